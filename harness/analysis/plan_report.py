"""Views of a deployment plan (`harness plan`): the ranked table as text, and the HTML page with
the cost/latency frontier. Pure: the plan document in, text out."""

from __future__ import annotations

from typing import Any

from harness.analysis.html import chart, page, table

HEAD = [
    "#",
    "GPU",
    "tp",
    "pp",
    "max_num_seqs",
    "replicas",
    "GPUs",
    "$/hour",
    "capacity/replica req/s",
    "load/replica req/s",
    "binding SLO",
    "margin",
]


def _money(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def option_row(i: int, o: dict[str, Any]) -> list[str]:
    return [
        str(i),
        o["gpu"],
        str(o["tensor_parallel_size"]),
        str(o.get("pipeline_parallel_size", 1)),  # plans before issue 47 have none
        "default" if o["max_num_seqs"] is None else str(o["max_num_seqs"]),
        _num(o["replicas"], 4),
        _num(o["gpus"], 4),
        _money(o["cost_per_hour"]),
        (">=" if o.get("capacity_lower_bound") else "") + _num(o["capacity_requests_per_s"]),
        _num(o["per_replica_requests_per_s"]),
        o["binding_slo"] or "-",
        "-" if o["margin"] is None else f"{o['margin']:.0%}",
    ]


def cheapest_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The cost/latency frontier: points no other point beats on both cost (x) and latency (y),
    lower being better for both; sorted by cost."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return front


def render_plan_text(doc: dict[str, Any]) -> str:
    feasible = [o for o in doc["options"] if o["feasible"]]
    other = [o for o in doc["options"] if not o["feasible"]]
    lines = [
        f"deployment plan for {doc['scenario']}: {doc['target_requests_per_s']:g} req/s of {doc['model']} at "
        + ", ".join(f"{s['name']} <= {s['limit']}" for s in doc["slos"])
        + f", each replica at most {1 - doc['headroom']:.0%} of its capacity (simulated, virtual clock)",
        "replicas: identical servers behind one load balancer, or one vLLM server's data-parallel "
        "ranks (--data-parallel-size); GPUs = replicas x tp x pp",
    ]
    rows = [HEAD] + [option_row(i + 1, o) for i, o in enumerate(feasible)]
    widths = [max(len(r[k]) for r in rows) for k in range(len(HEAD))]
    for r in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if k not in (1, 10) else c.ljust(w)
                for k, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    if any(o.get("capacity_lower_bound") for o in feasible):
        lines.append(
            ">= a lower bound: the search ran out of virtual probes before any broke above that "
            "capacity; its replicas may be more than needed"
        )
    if doc.get("interrupted"):
        lines.append(
            f"INTERRUPTED ({doc['interrupted']}): {len(doc['options'])} of "
            f"{doc.get('configurations', '?')} configurations planned"
            + ("; the verification was cut short" if doc.get("verification_cut_short") else "")
            + ": no pick (run it again)"
        )
    elif not feasible:
        lines.append("no configuration meets the SLOs at this load")
    lines += interval_lines(feasible)
    for o in other:
        lines.append(f"  not feasible: {option_label(o)}: {o['reason']}")
    lines.append("what each GPU preset was fitted on and validated against:")
    for gpu, text in doc["calibration"].items():
        lines.append(f"  {gpu}: {text}")
    for text in doc.get("validation", {}).values():  # plans before issue 23 have none
        lines.append(f"  {text}")
    margins = sorted(
        {o["capacity_margin_source"] for o in doc["options"] if "capacity_margin_source" in o}
    )
    if margins and margins != ["no margin"]:
        lines.append(
            "capacity margin (--margin " + str(doc.get("margin")) + "): " + "; ".join(margins)
        )
    elif doc.get("validation"):
        lines.append(
            "no capacity margin: --confidence 0.8 sizes replicas so that 80% of held-out capacity "
            "checks would have met the SLO (--margin median or worst: the validated error)"
        )
    for n in doc.get("notes", []):
        lines.append(f"note: {n}")
    v = doc.get("verification")
    if v:
        lines.append(
            f"verified over HTTP against the simulator ({v['config']}, {v['per_replica_requests_per_s']:.3g} "
            f"req/s): {_verified(v)}; "
            + ", ".join(
                f"{k} {_num(x)} (virtual {_num(v['virtual'].get(k))})"
                for k, x in v["values"].items()
            )
        )
    return "\n".join(lines)


def option_label(o: dict[str, Any]) -> str:
    """'H100-SXM tp=2 pp=2 max_num_seqs=default' (pp only where more than one stage)."""
    pp = int(o.get("pipeline_parallel_size") or 1)
    seqs = "default" if o["max_num_seqs"] is None else o["max_num_seqs"]
    stages = f" pp={pp}" if pp > 1 else ""
    return f"{o['gpu']} tp={o['tensor_parallel_size']}{stages} max_num_seqs={seqs}"


def interval_lines(options: list[dict[str, Any]]) -> list[str]:
    """Per option with one: where its capacity per replica lay for 80 % of held-out capacity
    checks (the stored interval of its regime, `harness.sim.validation.intervals`)."""
    out = []
    for o in options:
        band = o.get("capacity_interval")
        if not band or o.get("capacity_requests_per_s") is None:
            continue
        out.append(
            f"  capacity/replica {option_label(o)}: "
            f"{o['capacity_requests_per_s']:.3g} req/s predicted, 80% interval "
            f"{band['low']:.3g}..{band['high']:.3g} req/s ({band['regime']}; n={band['n']} held "
            f"out, {band['scope']})"
        )
    return out


def _verified(v: dict[str, Any]) -> str:
    if v["passed"]:
        return "meets the SLOs"
    return ("INCONCLUSIVE: " if v.get("inconclusive") else "FAILS: ") + str(v["reason"])


def render_plan_html(doc: dict[str, Any]) -> str:
    feasible = [o for o in doc["options"] if o["feasible"]]
    priced = all(o["cost_per_hour"] is not None for o in feasible) and bool(feasible)
    xkey, xlabel = ("cost_per_hour", "cost per hour (USD)") if priced else ("gpus", "GPUs")
    binding = [s for s in doc["slos"] if s["name"] != "error_share"]

    def ratio(o: dict[str, Any]) -> float | None:
        vals = [
            o["values"].get(s["name"]) / s["limit_value"]
            for s in binding
            if o["values"].get(s["name"]) is not None and s["limit_value"]
        ]
        return max(vals) if vals else None

    by_gpu: dict[str, list[list[float]]] = {}
    pts: list[tuple[float, float]] = []
    for o in feasible:
        r = ratio(o)
        if r is None or o[xkey] is None:
            continue
        by_gpu.setdefault(o["gpu"], []).append([float(o[xkey]), 100 * r])
        pts.append((float(o[xkey]), 100 * r))
    series = [{"name": g, "points": sorted(p), "only_markers": True} for g, p in by_gpu.items()]
    front = cheapest_front(pts)
    if front:
        series.append(
            {"name": "frontier", "points": [list(p) for p in sorted(front)], "dash": True}
        )
    frontier = chart(
        "Cost against latency: the worst SLO at the operating point",
        xlabel,
        "binding latency SLO, % of its limit",
        series,
        markers=True,
        note="each point one configuration at its operating point; the dashed line joins "
        "those that no other beats on both cost and latency",
    )
    sections = [
        frontier
        if frontier["series"]
        else {"type": "note", "text": "no feasible configuration to chart"},
        table(
            "Configurations that meet the SLOs, cheapest first",
            HEAD,
            [option_row(i + 1, o) for i, o in enumerate(feasible)],
        ),
        table(
            "Capacity per replica and its 80 % interval (held-out capacity checks under an SLO)",
            ["configuration", "capacity/replica req/s", "80 % interval req/s", "n", "from"],
            [
                [
                    option_label(o),
                    _num(o["capacity_requests_per_s"]),
                    f"{b['low']:.3g}..{b['high']:.3g}",
                    str(b["n"]),
                    b["scope"],
                ]
                for o in feasible
                if (b := o.get("capacity_interval")) and o["capacity_requests_per_s"] is not None
            ],
        ),
        table(
            "Not feasible",
            ["configuration", "why"],
            [[option_label(o), o["reason"]] for o in doc["options"] if not o["feasible"]],
        ),
        table(
            "What each GPU preset was validated against",
            ["GPU", "calibration"],
            [[g, t] for g, t in doc["calibration"].items()],
        ),
    ]
    sub = [
        f"{doc['target_requests_per_s']:g} req/s of {doc['model']}, scenario {doc['scenario']}",
        "SLOs: " + ", ".join(f"{s['name']} <= {s['limit']}" for s in doc["slos"]),
        "simulated on the virtual clock: figures of the simulator's model, not measurements",
    ]
    return page("harness deployment plan", sub, sections)
