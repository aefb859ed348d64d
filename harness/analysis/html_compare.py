"""The compare report's HTML page (`harness.analysis.html` is the page kit; `compare --html`
writes it)."""

from __future__ import annotations

from typing import Any

from harness.analysis.html_page import page, table
from harness.analysis.html_trust import compare_banner


def render_compare_html(report: dict[str, Any]) -> str:
    from harness.analysis.compare_report import HEAD, overall_line, reasons, table_rows

    th = report["thresholds"]
    sections: list[dict[str, Any]] = []
    for comp in report["comparisons"]:
        title = f"{comp['baseline']} -> {comp['candidate']}"
        if comp.get("point"):
            title = f"point {comp['point']}: {title}"
        title += f": {comp['status'].upper()}"
        if comp.get("missing"):
            sections.append({"type": "note", "text": f"{title}: {comp['missing']}"})
            continue
        classes = [
            "fail" if r["verdict"] == "REGRESSION" else "pass" if r["verdict"] == "better" else ""
            for r in comp["rows"]
        ]
        sections.append(table(title, HEAD, table_rows(comp["rows"]), classes))
        for n in comp.get("notes", []) + reasons(comp["rows"]):
            sections.append({"type": "note", "text": n})
        sections.append(
            {
                "type": "changes",
                "title": f"Change with its CI ({comp['data']})",
                "rows": [
                    [r["label"], r["change"], r["ci_low"], r["ci_high"], r["better"], r["verdict"]]
                    for r in comp["rows"]
                    if r["change"] is not None
                ],
            }
        )
    from harness.analysis.compare_report import ci_sentence

    sub = [
        ci_sentence(report),
        f"thresholds ({th['source']}): "
        + ", ".join(f"{k} {v * 100:g}%" for k, v in th["values"].items()),
        overall_line(report["status"]),
    ]
    return page("harness compare", sub, sections, compare_banner(report))


__all__ = ["render_compare_html"]
