"""The capacity search's HTML page (`capacity --html`), from its capacity.json: for each SLO,
the probes on a rate axis (passed, failed, confirmations and re-runs), the SLO's limit, the
answer, the bracket it was narrowed to and the failing probe cited as evidence; then every run
in a table, and the search's notes. `harness.analysis.html` is the page kit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis.capacity import ERROR_SHARE
from harness.analysis.html_page import chart, page, table
from harness.analysis.html_trust import capacity_banner


def _figure(slo: dict[str, Any], value: float | None) -> float | None:
    """An SLO's figure as drawn: ms for latency, % for the error share."""
    if value is None:
        return None
    return value * 100 if slo["name"] == ERROR_SHARE else value


def _limit(slo: dict[str, Any]) -> float:
    return float(slo["limit_share"] * 100 if slo["limit_share"] is not None else slo["limit_ms"])


def _slo_chart(rep: dict[str, Any], slo: dict[str, Any]) -> dict[str, Any]:
    name = slo["name"]
    probes = rep["probes"]

    def pts(keep: Any) -> list[list[float]]:
        out = []
        for p in probes:
            y = _figure(slo, p["values"].get(name))
            if keep(p) and y is not None:
                out.append([p["rate"], y])
        return out

    rates = [p["rate"] for p in probes]
    ys = [y for _, y in pts(lambda p: True)] + [_limit(slo)]
    lo_y, hi_y = min(ys), max(ys)
    x0, x1 = min(rates), max(rates)
    series: list[dict[str, Any]] = [
        {"name": "passed", "points": pts(lambda p: p["passed"]), "only_markers": True},
        {"name": f"limit {slo['limit']}", "points": [[x0, _limit(slo)], [x1, _limit(slo)]]},
    ]
    answer = rep.get("answer_requests_per_s")
    if answer is not None:
        series.append(
            {"name": f"answer {answer:.3g} req/s", "points": [[answer, lo_y], [answer, hi_y]]}
        )
    series.append(
        {"name": "failed", "points": pts(lambda p: not p["passed"]), "only_markers": True}
    )
    lo, hi = rep["bracket"]
    for edge, label in ((lo, "bracket"), (hi, "bracket")):
        if edge is not None and edge != answer:
            series.append(
                {"name": label, "points": [[edge, lo_y], [edge, hi_y]], "dash": True},
            )
    failed = (rep.get("evidence") or {}).get("failed")
    if failed is not None and _figure(slo, failed["values"].get(name)) is not None:
        series.append(
            {
                "name": f"failing evidence ({failed['kind']})",
                "points": [[failed["rate"], _figure(slo, failed["values"][name])]],
                "only_markers": True,
            }
        )
    unit = "%" if name == ERROR_SHARE else "ms"
    return chart(
        f"{name} by probe rate",
        "offered rate (req/s)",
        f"{name} ({unit})",
        series,
        note="each point one run, judged on its steady part; dashed: the bracket",
    )


def render_capacity_html(rep: dict[str, Any], folder: Path | None = None) -> str:
    """The page of a capacity search (capacity.json as `rep`; `folder`: where its probes'
    results are, for the banner of a run not to be trusted: harness.analysis.html_trust)."""
    answer = rep.get("answer_requests_per_s")
    lo, hi = rep.get("bracket") or [None, None]
    sub = [
        f"{rep['scenario']} on {rep.get('target_kind', 'http')}: "
        + ", ".join(f"{s['name']} <= {_limit_text(s)}" for s in rep["slos"]),
        (
            f"sustainable: {'at least ' if rep.get('lower_bound') else ''}{answer:.3g} req/s "
            f"(bracket {lo:.3g}"
            + (f"..{hi:.3g}" if hi is not None else ", nothing failed")
            + " req/s)"
            if answer is not None and lo is not None
            else "no rate met the SLOs"
        ),
    ]
    if rep.get("binding_slo"):
        sub.append(f"binding SLO {rep['binding_slo']}, margin {rep['margin'] * 100:.0f}%")
    slos = [{**s, "limit": _limit_text(s)} for s in rep["slos"]]
    sections: list[dict[str, Any]] = [_slo_chart(rep, s) for s in slos]
    head = ["run", "kind", "rate (req/s)", "verdict"] + [s["name"] for s in slos] + ["why"]
    rows, classes = [], []
    for i, p in enumerate(rep["probes"]):
        figures = []
        for s in slos:
            v = _figure(s, p["values"].get(s["name"]))
            figures.append("-" if v is None else f"{v:.3g}")
        rows.append(
            [i + 1, p["kind"], f"{p['rate']:.4g}", "pass" if p["passed"] else "FAIL"]
            + figures
            + [p["reason"] or ""]
        )
        classes.append("pass" if p["passed"] else "fail")
    sections.append(table("Runs, in order", head, rows, classes))
    for n in rep.get("notes", []):
        sections.append({"type": "note", "text": n})
    return page(f"harness capacity: {rep['scenario']}", sub, sections, capacity_banner(rep, folder))


def _limit_text(slo: dict[str, Any]) -> str:
    if slo["limit_share"] is not None:
        return f"{slo['limit_share']:.2%}"
    return f"{slo['limit_ms']:g} ms"


__all__ = ["render_capacity_html"]
