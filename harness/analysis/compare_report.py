"""The compare report as text or markdown: one table per comparison (`harness.analysis.compare`
builds the report; the HTML page reuses `table_rows`)."""

from __future__ import annotations

from typing import Any

from harness.analysis.html_trust import compare_banner
from harness.analysis.numbers import fmt_number


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%"


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        if r["ci_low"] is None:
            ci = "-"
        elif r["ci_high"] is None:  # bounded on one side only
            ci = f"[{_pct(r['ci_low'])}, unbounded)"
        else:
            ci = f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]"
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


HEAD = ["metric", "better", "baseline", "candidate", "change", "CI", "max", "verdict"]


def ci_sentence(report: dict[str, Any]) -> str:
    """What the CI column holds: each interval's confidence, and the family's."""
    rows = [r for c in report["comparisons"] for r in c["rows"]]
    each = rows[0].get("confidence") if rows else None
    family = report.get("confidence", 0.95)
    gated = sum(
        1
        for r in rows[: len(rows) // max(1, len(report["comparisons"]))]
        if r["threshold"] is not None
    )
    if each is None:
        return ""
    if gated <= 1:
        return f"CI: {each * 100:.3g}% confidence interval of the change."
    return (
        f"CI: each interval at {each * 100:.3g}% so that the {gated} gated metrics hold "
        f"{family * 100:.3g}% together: a false REGRESSION on any of them is at most "
        f"{(1 - family) * 100:.3g}% likely."
    )


def render(report: dict[str, Any], fmt: str = "text") -> str:
    """The compare report as plain text or markdown (one table per comparison), opening with
    each compared run that is not trustworthy or incomplete (as the HTML page's banner)."""
    banner = compare_banner(report)
    lines = [("**" + banner[0] + "**") if fmt == "markdown" else banner[0]] if banner else []
    lines += [("- " if fmt == "markdown" else "  ") + line for line in banner[1:]]
    lines.append(thresholds_line(report["thresholds"]))
    if ci_sentence(report):
        lines.append(ci_sentence(report))
    for comp in report["comparisons"]:
        lines.append("")
        title = f"{_side_name(comp, 'baseline')} -> {_side_name(comp, 'candidate')}"
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
        for line in reasons(comp["rows"]):
            lines.append(("- " if fmt == "markdown" else "  ") + line)
    lines.append("")
    lines.append(overall_line(report["status"]))
    return "\n".join(lines)


def thresholds_line(th: dict[str, Any]) -> str:
    used = ", ".join(f"{k} {v * 100:g}%" for k, v in th["values"].items()) or "none"
    return (
        f"thresholds ({th['source']}): {used}. A regression needs the change beyond the "
        "threshold and its CI entirely on the worse side; a pass needs the CI's worse end "
        "within the threshold; anything else is INCONCLUSIVE."
    )


def _side_name(comp: dict[str, Any], side: str) -> str:
    runs = comp.get(f"{side}_runs") or []
    return comp[side] if len(runs) <= 1 else f"{comp[side]} ({len(runs)} runs)"


def reasons(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per undecided row (INCONCLUSIVE, or an ungated one not judged): why, and
    what would decide it."""
    return [f"{r['label']} is {r['verdict']}: {r['reason']}." for r in rows if r.get("reason")]


OVERALL = {
    "pass": "overall: PASS (exit 0)",
    "regression": "overall: REGRESSION (exit 1)",
    "inconclusive": "overall: INCONCLUSIVE (exit 3): a gated metric could not be judged; "
    "neither a pass nor a regression",
}


def overall_line(status: str) -> str:
    return OVERALL.get(status, f"overall: {status.upper()}")


__all__ = ["HEAD", "overall_line", "reasons", "render", "table_rows", "thresholds_line"]
