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

Series = list[dict[str, Any]]


def _m(p: dict[str, Any], k: str) -> float | None:
    """A point's mean of one metric over its repeats."""
    return ((p.get("metrics") or {}).get(k) or {}).get("mean")


def _points_tables(
    summary: dict[str, Any], rec: dict[str, Any] | None, slos: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The recommendation (where the sweep has SLOs) and the table of every point."""
    labels = dict(POINT_METRICS)
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
    return out


class _Curves:
    """The done points grouped by server setting, drawn as one series per setting, with the
    sweep's SLO lines and its recommended point marked."""

    def __init__(
        self,
        pts: list[dict[str, Any]],
        rec: dict[str, Any] | None,
        slos: list[dict[str, Any]],
    ) -> None:
        self.rec, self.slos = rec, slos
        self.best = next((p for p in pts if rec and rec.get("point") == p.get("id")), None)
        self.groups: dict[str, list[dict[str, Any]]] = {}
        for p in pts:
            self.groups.setdefault(p["setting_label"] or "(fixed server)", []).append(p)

    def by(self, xk: str, yk: str) -> Series:
        return [
            {
                "name": g,
                "points": sorted(
                    [
                        [_m(p, xk), _m(p, yk)]
                        for p in ps
                        if _m(p, xk) is not None and _m(p, yk) is not None
                    ]
                ),
            }
            for g, ps in self.groups.items()
        ]

    def marked(self, xk: str, yk: str) -> Series:
        """`by(xk, yk)` plus its SLO line (dashed, across the points' x range) and the
        recommended point, where the sweep has them."""
        series = self.by(xk, yk)
        xs = [x for s in series for x, _ in s["points"] if x is not None]
        extra: Series = []
        for v in self.slos:
            if v.get("kind") == "aggregate" and f"{v['name']}_ms" == yk and xs:
                extra.append(
                    {
                        "name": f"SLO {slo_text(v)}",
                        "points": [[min(xs), v["limit_ms"]], [max(xs), v["limit_ms"]]],
                        "dash": True,
                    }
                )
        best = self.best
        if best is not None and _m(best, xk) is not None and _m(best, yk) is not None:
            extra.append(
                {
                    "name": f"recommended: {self.rec.get('label') if self.rec else ''}",
                    "points": [[_m(best, xk), _m(best, yk)]],
                    "only_markers": True,
                }
            )
        return series + extra

    def trade_off(self) -> dict[str, Any]:
        """Tokens/s per user against total tokens/s, with the Pareto front dashed."""
        scatter: Series = [
            {
                "name": g,
                "points": [
                    [_m(p, "total_tokens_per_s"), _m(p, "tokens_per_s_per_user")] for p in ps
                ],
                "only_markers": True,
            }
            for g, ps in self.groups.items()
        ]
        allpts = [
            (float(x), float(y))
            for s in scatter
            for x, y in s["points"]
            if x is not None and y is not None
        ]
        front = [list(xy) for xy in pareto_front(allpts)]
        return chart(
            "Trade-off: tokens/s per user against total tokens/s (Pareto front dashed)",
            "total tokens/s",
            "tokens/s per user (1000 / mean TPOT)",
            scatter + [{"name": "Pareto front", "points": front, "dash": True}],
            markers=True,
        )


# (title, x label, y label, x metric, y metric, y log)
LOAD_CURVES = (
    (
        "Output tokens/s against offered load",
        "offered requests/s",
        "output tokens/s",
        "offered_requests_per_s",
        "output_tokens_per_s",
        False,
    ),
    (
        "p99 TTFT against throughput",
        "output tokens/s",
        "TTFT p99 (ms)",
        "output_tokens_per_s",
        "ttft_p99_ms",
        True,
    ),
    (
        "p99 ITL against throughput",
        "output tokens/s",
        "ITL p99 (ms)",
        "output_tokens_per_s",
        "itl_p99_ms",
        False,
    ),
    (
        "Queueing: p99 TTFT from schedule against offered load",
        "offered requests/s",
        "TTFT from schedule p99 (ms)",
        "offered_requests_per_s",
        "ttft_from_schedule_p99_ms",
        True,
    ),
)


def _chosen_point_chart(folder: Path, chosen: dict[str, Any]) -> dict[str, Any]:
    """Running and waiting requests over the chosen point's first run (its /metrics), or the
    client's in-flight count where the server published none."""
    from harness.analysis.result import load_result

    r = load_result(folder / chosen["runs"][0]["result"])
    srv = server_series(r)
    title = f"Running and waiting requests over time, point {chosen['id']}"
    if srv["running"] or srv["waiting"]:
        return chart(
            title + " (/metrics)",
            "time (s)",
            "requests",
            [
                {"name": "running", "points": srv["running"]},
                {"name": "waiting", "points": srv["waiting"], "dash": True},
            ],
        )
    ts = r.get("timeseries") or {}
    step = ts.get("step_s") or 1.0
    return chart(
        title + " (client's in-flight count: the server published no /metrics)",
        "time (s)",
        "requests",
        [
            {
                "name": "in flight (client)",
                "points": [[(i + 1) * step, v] for i, v in enumerate(ts.get("in_flight") or [])],
            }
        ],
    )


def sweep_sections(
    summary: dict[str, Any], folder: Path, chosen: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The sweep page's sections: the recommendation and points table, the load curves per
    server setting, the trade-off, and the chosen point's running/waiting requests."""
    pts = [p for p in summary["points"] if p.get("status") == "done"]
    slos = sweep_slos(summary)
    rec = recommend(summary)
    out = _points_tables(summary, rec, slos)
    curves = _Curves(pts, rec, slos)
    for title, xlabel, ylabel, xk, yk, ylog in LOAD_CURVES:
        out.append(chart(title, xlabel, ylabel, curves.marked(xk, yk), ylog=ylog, markers=True))
    out.append(curves.trade_off())
    if chosen is not None and chosen.get("runs"):
        out.append(_chosen_point_chart(folder, chosen))
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
