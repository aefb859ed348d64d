"""Sweep views: one row of headline figures per result, repeats folded into mean and 95 % CI,
and the sweep table (setting x load -> throughput, goodput, TTFT, ITL, TPOT, server peaks).

With `[slo]` in the base scenario each point also keeps its SLO verdicts (`point_slo`, folded
over repeats by `fold_slo`), and `recommend` picks the point to run at: among the points that
meet every aggregate SLO (`ttft_p99 = "2s"`: the figure at or under its limit in every repeat),
the one with the highest goodput (requests/s that met every per-request SLO), with its margin
to each limit. Per-request SLOs (`ttft = "2s"`) are what goodput counts; they rank the points
rather than exclude them.

Pure: results and summaries in, dicts and text out. `harness.orchestrate.sweep` runs the points and writes
`summary.json`; `report SUMMARY.json` and `compare` read it back through these functions.
"""

from __future__ import annotations

import math
from typing import Any

from harness.analysis.clock import clock_note
from harness.analysis.numbers import fmt_number
from harness.analysis.server_metrics import GAUGES

SUMMARY_KIND = "sweep_summary"
SUMMARY_SCHEMA_VERSION = 1

# Figures kept per point: key -> (label, unit, how to read it from a result).
POINT_METRICS: tuple[tuple[str, str], ...] = (
    ("offered_requests_per_s", "offered req/s"),
    ("requests_per_s", "req/s"),
    ("output_tokens_per_s", "out tok/s"),
    ("total_tokens_per_s", "total tok/s"),
    ("goodput_requests_per_s", "goodput req/s"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p99_ms", "TTFT p99 ms"),
    ("ttft_from_schedule_p99_ms", "TTFT sched p99 ms"),
    ("itl_p99_ms", "ITL p99 ms"),
    ("tpot_mean_ms", "TPOT mean ms"),
    ("e2e_p99_ms", "E2E p99 ms"),
    ("tokens_per_s_per_user", "tok/s/user"),
    ("error_share", "errors"),
    ("peak_running", "peak running"),
    ("peak_waiting", "peak waiting"),
)
TABLE_COLUMNS = (
    "offered_requests_per_s",
    "output_tokens_per_s",
    "goodput_requests_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "ttft_from_schedule_p99_ms",
    "itl_p99_ms",
    "tpot_mean_ms",
    "peak_running",
    "peak_waiting",
)

# Two-sided 97.5 % quantiles of Student's t for n-1 degrees of freedom (n = 2..30); beyond: 1.96.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
)


def t975(dof: int) -> float:
    """The 97.5 % quantile of Student's t with `dof` degrees of freedom (>= 1)."""
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


# Names a /metrics scrape may give the running and waiting gauges (vLLM, llama.cpp, ours).
def server_series(result: dict[str, Any]) -> dict[str, list[list[float]]]:
    """Running, waiting and KV-usage time series ([t_s, value] pairs) from the result's
    `server_metrics.series` (the scraper's gauges per poll, named as in
    `harness.analysis.server_metrics.GAUGES`); empty lists where the target published none.
    KV usage is in percent, as the peaks and the text report give it (vLLM's gauge is a
    fraction despite its `_perc` name)."""
    sm = result.get("server_metrics") or {}
    series = sm.get("series") if isinstance(sm, dict) else None
    out: dict[str, list[list[float]]] = {"running": [], "waiting": [], "kv_usage": []}
    if not isinstance(series, dict):
        return out
    times, gauges = series.get("t_s") or [], series.get("gauges") or {}
    wanted = {"running": "running", "waiting": "waiting", "kv_cache_usage_pct": "kv_usage"}
    for names in GAUGES.values():
        for role, metric in names.items():
            values = gauges.get(metric)
            if role in wanted and isinstance(values, list) and not out[wanted[role]]:
                scale = 100.0 if role == "kv_cache_usage_pct" else 1.0
                out[wanted[role]] = [
                    [float(t), scale * float(v)]
                    for t, v in zip(times, values, strict=False)
                    if isinstance(v, int | float)
                ]
    return out


def _peak(result: dict[str, Any], name: str, series: dict[str, list[list[float]]]) -> float | None:
    sm = result.get("server_metrics") or {}
    peaks = sm.get("peaks") if isinstance(sm, dict) else None
    if isinstance(peaks, dict):
        for k, v in peaks.items():
            if name in k and isinstance(v, dict) and isinstance(v.get("max"), int | float):
                return float(v["max"])
    vals = [v for _, v in series[name]]
    return max(vals) if vals else None


def offered_rate(result: dict[str, Any]) -> float:
    """Requests per second the plan offered in the measured phases: arrivals over the phases'
    planned durations (the measured window also holds the final drain, so it would understate)."""
    from harness.units import parse_duration_s

    reqs = result["summary"]["requests"]["planned_or_due"]
    planned = 0.0
    spec = (result.get("scenario") or {}).get("phases") or []
    for ph, sp in zip(result["phases"], spec, strict=False):
        if ph["warmup"]:
            continue
        try:
            planned += parse_duration_s(sp.get("duration"), allow_zero=False)
        except ValueError:
            planned = 0.0
            break
    clock = result.get("clock")
    planned *= (
        float(clock.get("speedup", 1.0)) if isinstance(clock, dict) else 1.0
    )  # model seconds, as the result's figures
    window = planned or result["summary"]["throughput"]["window_s"]
    return reqs / window if window > 0 else 0.0


def point_metrics(result: dict[str, Any]) -> dict[str, float | None]:
    """The headline figures of one result (measured phases), keyed as POINT_METRICS."""
    s = result["summary"]
    lat, thr = s["latency_ms"], s["throughput"]
    tpot = lat["tpot"]["mean"]
    failed = s["requests"]["failed"] + s["requests"].get("not_sent", 0)
    due = s["requests"]["planned_or_due"]
    series = server_series(result)
    return {
        "offered_requests_per_s": offered_rate(result),
        "requests_per_s": thr["requests_per_s"],
        "output_tokens_per_s": thr["output_tokens_per_s"],
        "total_tokens_per_s": thr["total_tokens_per_s"],
        "goodput_requests_per_s": thr["goodput_requests_per_s"],
        "ttft_p50_ms": lat["ttft"]["p50"],
        "ttft_p99_ms": lat["ttft"]["p99"],
        "ttft_from_schedule_p99_ms": lat["ttft_from_schedule"]["p99"],
        "itl_p99_ms": lat["itl"]["p99"],
        "tpot_mean_ms": tpot,
        "e2e_p99_ms": lat["e2e"]["p99"],
        "tokens_per_s_per_user": (1000.0 / tpot) if tpot else None,
        "error_share": failed / due if due else 0.0,
        "peak_running": _peak(result, "running", series),
        "peak_waiting": _peak(result, "waiting", series),
    }


def fold_repeats(runs: list[dict[str, float | None]]) -> dict[str, dict[str, float | int | None]]:
    """Mean and 95 % confidence interval (Student's t over repeats) of each figure."""
    out: dict[str, dict[str, float | int | None]] = {}
    for key, _ in POINT_METRICS:
        vals = [float(v) for r in runs if (v := r.get(key)) is not None]
        n = len(vals)
        if n == 0:
            out[key] = {"mean": None, "ci95_low": None, "ci95_high": None, "n": 0}
            continue
        mean = sum(vals) / n
        if n < 2:
            out[key] = {"mean": mean, "ci95_low": None, "ci95_high": None, "n": n}
            continue
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
        half = t975(n - 1) * sd / math.sqrt(n)
        out[key] = {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half, "n": n}
    return out


def point_slo(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One result's SLO verdicts over its measured phases (the summary's `slo`)."""
    return [dict(v) for v in (result.get("summary") or {}).get("slo") or []]


def fold_slo(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each SLO over repeats: the mean value (aggregate) or attainment (per request); `pass`
    true only when every repeat passed, None when some repeat could not be judged."""
    out: list[dict[str, Any]] = []
    for i, first in enumerate(runs[0] if runs else []):
        same = [r[i] for r in runs if i < len(r) and r[i].get("name") == first.get("name")]
        entry = {k: first.get(k) for k in ("name", "limit_ms", "kind")}
        if first.get("kind") == "aggregate":
            vals = [v["value_ms"] for v in same if v.get("value_ms") is not None]
            verdicts = [v.get("pass") for v in same]
            entry["value_ms"] = sum(vals) / len(vals) if vals else None
            entry["pass"] = None if None in verdicts else all(verdicts)
        else:
            att = [v["attainment"] for v in same if v.get("attainment") is not None]
            entry["attainment"] = sum(att) / len(att) if att else None
            entry["pass"] = None
        out.append(entry)
    return out


def sweep_slos(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's SLO limits (name, limit_ms, kind), as its points' results carry them."""
    for p in summary.get("points") or []:
        if p.get("slo"):
            return [{k: v.get(k) for k in ("name", "limit_ms", "kind")} for v in p["slo"]]
    return []


def slo_status(point: dict[str, Any]) -> bool | None:
    """Whether a finished point met every aggregate SLO (None: some could not be judged)."""
    verdicts = [v.get("pass") for v in point.get("slo") or [] if v.get("kind") == "aggregate"]
    if None in verdicts:
        return None
    return all(verdicts)


def recommend(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The point to run at, or why there is none; None when the sweep has no SLO.

    {"point": id or None, "label", "goodput_requests_per_s", "margins": [{name, limit_ms,
    value_ms, margin_share}] (how far under each aggregate limit, as a share of it), "text"}."""
    slos = sweep_slos(summary)
    if not slos:
        return None
    done = [p for p in summary.get("points") or [] if p.get("status") == "done"]

    def goodput(p: dict[str, Any]) -> float:
        v = ((p.get("metrics") or {}).get("goodput_requests_per_s") or {}).get("mean")
        return float(v) if isinstance(v, int | float) else -1.0

    meeting = [p for p in done if slo_status(p) is True and goodput(p) >= 0]
    limits = ", ".join(slo_text(v) for v in slos)
    if not meeting:
        missed = sorted(
            {
                v["name"]
                for p in done
                for v in p.get("slo") or []
                if v.get("kind") == "aggregate" and v.get("pass") is not True
            }
        )
        return {
            "point": None,
            "text": f"no point meets every SLO ({limits})"
            + (f": every point missed {', '.join(missed)}" if missed and done else "")
            + ("; lower the load or change the server's settings" if done else ""),
        }
    best = max(meeting, key=goodput)
    margins = [
        {
            "name": v["name"],
            "limit_ms": v["limit_ms"],
            "value_ms": v["value_ms"],
            "margin_share": (v["limit_ms"] - v["value_ms"]) / v["limit_ms"]
            if v.get("limit_ms")
            else None,
        }
        for v in best.get("slo") or []
        if v.get("kind") == "aggregate" and v.get("value_ms") is not None
    ]
    label = " ".join(x for x in (best.get("setting_label"), best.get("load_label")) if x)
    said = "; ".join(
        f"{m['name']} {fmt_number(m['value_ms'])} ms, {m['margin_share']:.0%} under its "
        f"{fmt_number(m['limit_ms'])} ms"
        for m in margins
        if m["margin_share"] is not None
    )
    return {
        "point": best.get("id"),
        "label": label,
        "goodput_requests_per_s": goodput(best),
        "margins": margins,
        "text": f"recommended: {label} (goodput {fmt_number(goodput(best))} req/s, the highest "
        f"of the {len(meeting)} of {len(done)} points that meet every SLO)"
        + (f"; margin: {said}" if said else ""),
    }


def slo_text(v: dict[str, Any]) -> str:
    """An SLO as the sweep views write it: `ttft_p99 <= 2,000 ms`, `ttft <= 2,000 ms per request`."""
    tail = " per request" if v.get("kind") == "per_request" else ""
    return f"{v.get('name')} <= {fmt_number(v.get('limit_ms'))} ms{tail}"


def point_slo_cell(p: dict[str, Any]) -> str:
    """The table's SLO column: `meets`, `misses ttft_p99`, `?` (not judged) or blank."""
    if p.get("status", "done") != "done" or not p.get("slo"):
        return ""
    missed = [
        v["name"] for v in p["slo"] if v.get("kind") == "aggregate" and v.get("pass") is False
    ]
    if missed:
        return "misses " + ", ".join(missed)
    return "meets" if slo_status(p) else "?"


def sweep_speedup(summary: dict[str, Any]) -> float | None:
    """The simulator speedup of the sweep's runs when it is not 1 (their figures are model
    time, harness.analysis.clock), else None."""
    ks = {
        float(run.get("speedup", 1.0))
        for p in summary.get("points") or []
        for run in p.get("runs") or []
    }
    ks.discard(1.0)
    return max(ks) if ks else None


def is_summary(doc: dict[str, Any]) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == SUMMARY_KIND


def _cell(m: dict[str, Any]) -> str:
    if m.get("mean") is None:
        return "-"
    s = fmt_number(m["mean"])
    if m.get("ci95_low") is not None:
        s += f" ±{fmt_number((m['ci95_high'] - m['ci95_low']) / 2)}"
    return s


def render_sweep_text(summary: dict[str, Any], markdown: bool = False) -> str:
    """The sweep table: one row per point, TABLE_COLUMNS figures (mean ± CI half-width)."""
    labels = dict(POINT_METRICS)
    sw = summary.get("sweep", {})
    rec = recommend(summary)
    slos = sweep_slos(summary)
    head = ["setting", "load"] + [labels[k] for k in TABLE_COLUMNS] + (["SLO"] if slos else [])
    rows = []
    for p in summary.get("points", []):
        status = p.get("status", "done")
        cells = [p.get("setting_label", ""), p.get("load_label", "")]
        if status != "done":
            cells += [status] + [""] * (len(TABLE_COLUMNS) - 1)
        else:
            cells += [_cell(p["metrics"].get(k, {})) for k in TABLE_COLUMNS]
        if slos:
            mark = " <- recommended" if rec and rec.get("point") == p.get("id") else ""
            cells.append(point_slo_cell(p) + mark)
        rows.append(cells)
    title = (
        f"sweep {sw.get('name', '?')}: {len(rows)} points, base scenario {sw.get('scenario', '?')}, "
        f"server {sw.get('server_kind', '?')}, repeats {sw.get('repeat', 1)}"
    )
    lines = [title]
    if sw.get("server_kind") == "sim":
        lines.append("(simulated server: figures show the simulator's model, not a real GPU)")
    k = sweep_speedup(summary)
    if k is not None:
        lines.append(f"({clock_note(k)})")
    if slos:
        lines.append(
            "SLOs: " + ", ".join(slo_text(v) for v in slos) + " (a point must meet the "
            "aggregate ones; the per-request ones are what goodput counts)"
        )
    if markdown:
        lines.append("")
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    else:
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
        ]
        lines.append(
            "  ".join(
                h.rjust(w) if i > 1 else h.ljust(w)
                for i, (h, w) in enumerate(zip(head, widths, strict=True))
            )
        )
        for r in rows:
            lines.append(
                "  ".join(
                    c.rjust(w) if i > 1 else c.ljust(w)
                    for i, (c, w) in enumerate(zip(r, widths, strict=True))
                )
            )
    if any(
        p.get("metrics", {}).get("peak_running", {}).get("mean") is None
        for p in summary.get("points", [])
    ):
        lines.append("peak running/waiting: '-' where the server published no /metrics samples")
    if rec is not None:
        lines.append(rec["text"])
    return "\n".join(lines)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points not dominated when both coordinates are better higher (x = total tokens/s,
    y = tokens/s per user), sorted by x."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return sorted(front)
