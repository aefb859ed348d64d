"""The sweep's HTML page: the points table and, per server setting, the load curves
(`harness.analysis.html` is the page kit; `report SUMMARY.json --html` writes it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis.clock import clock_note, tag_titles
from harness.analysis.html_page import chart, keep_drawn, page, table
from harness.analysis.html_trust import sweep_banner
from harness.analysis.numbers import fmt_number
from harness.analysis.sweep_report import (
    POINT_METRICS,
    TABLE_COLUMNS,
    pareto_front,
    point_slo_cell,
    recommend,
    server_series,
    slo_text,
    sweep_slos,
    sweep_speedup,
)


def sweep_sections(
    summary: dict[str, Any], folder: Path, chosen: dict[str, Any] | None
) -> list[dict[str, Any]]:
    from harness.analysis.result import load_result

    labels = dict(POINT_METRICS)
    pts = [p for p in summary["points"] if p.get("status") == "done"]
    slos = sweep_slos(summary)
    rec = recommend(summary)
    rows, classes = [], []
    for p in summary["points"]:
        cells = [p["setting_label"], p["load_label"], p.get("status", "")]
        for k in TABLE_COLUMNS:
            fig = (p.get("metrics") or {}).get(k) or {}
            c = fmt_number(fig.get("mean"))
            if fig.get("ci95_low") is not None:
                c += f" ±{fmt_number((fig['ci95_high'] - fig['ci95_low']) / 2)}"
            cells.append(c)
        chosen_point = bool(rec and rec.get("point") == p.get("id"))
        if slos:
            cells.append(point_slo_cell(p) + (" (recommended)" if chosen_point else ""))
        rows.append(cells)
        classes.append("pass" if chosen_point else "")
    out: list[dict[str, Any]] = []
    if rec is not None:
        out.append(
            table(
                "Recommendation (the highest goodput that meets every SLO)",
                ["SLOs", "recommended point"],
                [[", ".join(slo_text(v) for v in slos), rec["text"]]],
                ["pass" if rec.get("point") else "fail"],
            )
        )
    out.append(
        table(
            "Sweep points (mean ± 95% CI half-width over repeats)",
            ["setting", "load", "status", *[labels[k] for k in TABLE_COLUMNS]]
            + (["SLO"] if slos else []),
            rows,
            classes,
        )
    )
    best = next((p for p in pts if rec and rec.get("point") == p.get("id")), None)

    def marked(xk: str, yk: str, series: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A chart's series plus its SLO line (dashed, across the points' x range) and the
        recommended point, where the sweep has them."""
        xs = [x for s in series for x, _ in s["points"] if x is not None]
        extra: list[dict[str, Any]] = []
        for v in slos:
            if v.get("kind") == "aggregate" and f"{v['name']}_ms" == yk and xs:
                extra.append(
                    {
                        "name": f"SLO {slo_text(v)}",
                        "points": [[min(xs), v["limit_ms"]], [max(xs), v["limit_ms"]]],
                        "dash": True,
                    }
                )
        if best is not None and m(best, xk) is not None and m(best, yk) is not None:
            extra.append(
                {
                    "name": f"recommended: {rec.get('label') if rec else ''}",
                    "points": [[m(best, xk), m(best, yk)]],
                    "only_markers": True,
                }
            )
        return series + extra

    groups: dict[str, list[dict[str, Any]]] = {}
    for p in pts:
        groups.setdefault(p["setting_label"] or "(fixed server)", []).append(p)

    def m(p: dict[str, Any], k: str) -> float | None:
        return ((p.get("metrics") or {}).get(k) or {}).get("mean")

    def by(xk: str, yk: str) -> list[dict[str, Any]]:
        return [
            {
                "name": g,
                "points": sorted(
                    [
                        [m(p, xk), m(p, yk)]
                        for p in ps
                        if m(p, xk) is not None and m(p, yk) is not None
                    ]
                ),
            }
            for g, ps in groups.items()
        ]

    out.append(
        chart(
            "Output tokens/s against offered load",
            "offered requests/s",
            "output tokens/s",
            marked(
                "offered_requests_per_s",
                "output_tokens_per_s",
                by("offered_requests_per_s", "output_tokens_per_s"),
            ),
            markers=True,
        )
    )
    out.append(
        chart(
            "p99 TTFT against throughput",
            "output tokens/s",
            "TTFT p99 (ms)",
            marked("output_tokens_per_s", "ttft_p99_ms", by("output_tokens_per_s", "ttft_p99_ms")),
            ylog=True,
            markers=True,
        )
    )
    out.append(
        chart(
            "p99 ITL against throughput",
            "output tokens/s",
            "ITL p99 (ms)",
            marked("output_tokens_per_s", "itl_p99_ms", by("output_tokens_per_s", "itl_p99_ms")),
            markers=True,
        )
    )
    out.append(
        chart(
            "Queueing: p99 TTFT from schedule against offered load",
            "offered requests/s",
            "TTFT from schedule p99 (ms)",
            marked(
                "offered_requests_per_s",
                "ttft_from_schedule_p99_ms",
                by("offered_requests_per_s", "ttft_from_schedule_p99_ms"),
            ),
            ylog=True,
            markers=True,
        )
    )
    scatter: list[dict[str, Any]] = [
        {
            "name": g,
            "points": [[m(p, "total_tokens_per_s"), m(p, "tokens_per_s_per_user")] for p in ps],
            "only_markers": True,
        }
        for g, ps in groups.items()
    ]
    allpts = [
        (float(x), float(y))
        for s in scatter
        for x, y in s["points"]
        if x is not None and y is not None
    ]
    front = [list(xy) for xy in pareto_front(allpts)]
    out.append(
        chart(
            "Trade-off: tokens/s per user against total tokens/s (Pareto front dashed)",
            "total tokens/s",
            "tokens/s per user (1000 / mean TPOT)",
            scatter + [{"name": "Pareto front", "points": front, "dash": True}],
            markers=True,
        )
    )
    if chosen is not None and chosen.get("runs"):
        r = load_result(folder / chosen["runs"][0]["result"])
        srv = server_series(r)
        title = f"Running and waiting requests over time, point {chosen['id']}"
        if srv["running"] or srv["waiting"]:
            out.append(
                chart(
                    title + " (/metrics)",
                    "time (s)",
                    "requests",
                    [
                        {"name": "running", "points": srv["running"]},
                        {"name": "waiting", "points": srv["waiting"], "dash": True},
                    ],
                )
            )
        else:
            ts = r.get("timeseries") or {}
            step = ts.get("step_s") or 1.0
            out.append(
                chart(
                    title + " (client's in-flight count: the server published no /metrics)",
                    "time (s)",
                    "requests",
                    [
                        {
                            "name": "in flight (client)",
                            "points": [
                                [(i + 1) * step, v] for i, v in enumerate(ts.get("in_flight") or [])
                            ],
                        }
                    ],
                )
            )
    return keep_drawn(out)


def render_sweep_html(summary: dict[str, Any], folder: Path, chosen: dict[str, Any] | None) -> str:
    sw = summary.get("sweep", {})
    sub = [
        f"{len(summary.get('points', []))} points, base scenario {sw.get('scenario')}, server "
        f"{sw.get('server_kind')}, repeats {sw.get('repeat')}, started {sw.get('started_at')}"
    ]
    if sw.get("server_kind") == "sim":
        sub.append("simulated server: figures show the simulator's model, not a real GPU")
    k = sweep_speedup(summary)
    if k is not None:
        sub.append(clock_note(k))
    sections = tag_titles(sweep_sections(summary, folder, chosen), k)
    return page(f"harness sweep: {sw.get('name')}", sub, sections, sweep_banner(summary))


__all__ = ["render_sweep_html", "sweep_sections"]
