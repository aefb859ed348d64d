"""The compare report as text or markdown: one table per comparison (`harness.analysis.compare`
builds the report; the HTML page reuses `table_rows`)."""

from __future__ import annotations

from typing import Any

from harness.analysis.numbers import fmt_number


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%"


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        ci = "-" if r["ci_low"] is None else f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]"
        thr = "-" if r["threshold"] is None else f"{r['threshold'] * 100:g}%"
        out.append(
            [
                r["label"],
                "lower" if r["better"] == "lower" else "higher",
                fmt_number(r["baseline"]),
                fmt_number(r["candidate"]),
                _pct(r["change"]),
                ci,
                thr,
                r["verdict"],
            ]
        )
    return out


HEAD = ["metric", "better", "baseline", "candidate", "change", "95% CI", "max", "verdict"]


def render(report: dict[str, Any], fmt: str = "text") -> str:
    """The compare report as plain text or markdown (one table per comparison)."""
    lines = []
    th = report["thresholds"]
    used = ", ".join(f"{k} {v * 100:g}%" for k, v in th["values"].items())
    lines.append(
        f"thresholds ({th['source']}): {used}; a regression needs the change beyond the "
        "threshold and its 95% CI entirely on the worse side"
    )
    for comp in report["comparisons"]:
        lines.append("")
        title = f"{comp['baseline']} -> {comp['candidate']}"
        if comp.get("point"):
            title = f"point {comp['point']}: " + title
        lines.append(
            ("### " if fmt == "markdown" else "")
            + title
            + f": {comp['status'].upper()} (data: {comp['data']})"
        )
        for n in comp.get("notes", []):
            lines.append(("- " if fmt == "markdown" else "  note: ") + n)
        if comp.get("missing"):
            lines.append(("- " if fmt == "markdown" else "  ") + comp["missing"])
            continue
        rows = table_rows(comp["rows"])
        if fmt == "markdown":
            lines.append("")
            lines.append("| " + " | ".join(HEAD) + " |")
            lines.append("|---|---|--:|--:|--:|--:|--:|---|")
            lines += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEAD)]
            lines.append(
                "  "
                + "  ".join(
                    h.ljust(w) if i in (0, 1, 7) else h.rjust(w)
                    for i, (h, w) in enumerate(zip(HEAD, widths, strict=True))
                )
            )
            for r in rows:
                lines.append(
                    "  "
                    + "  ".join(
                        c.ljust(w) if i in (0, 1, 7) else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))
                    )
                )
    lines.append("")
    lines.append(f"overall: {report['status'].upper()}")
    return "\n".join(lines)


__all__ = ["HEAD", "render", "table_rows"]
