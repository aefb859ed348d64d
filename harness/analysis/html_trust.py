"""The banner at the top of every HTML view whose figures are not to be trusted as they stand.

A result that is not trustworthy (impossible or suspect records in its journal, set aside:
harness.record.journal_vet), or incomplete (interrupted, stopped, cut short), says so first, in
the terminal's words (harness.analysis.report_text prints the same NOT TRUSTWORTHY line), before
any figure. A compare page names each run of either side that is not trustworthy or incomplete;
a sweep page names the sweep's stop reason and every point not done, with its reason. The page
kit (harness.analysis.html_page.page) draws the lines as a red block above the title, in the
HTML itself (no script needed), and prefixes the page's title. A run whose kept-alive connections
carried stray bytes (responses nobody asked for: harness.client.keepalive) says how many, and
how many answers were set aside as suspect for it, in the terminal report and on the result
page alike (`stale_line`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.record.journal_vet import set_aside_kind

BANNER_TITLE = "NOT TRUSTWORTHY"  # the page's <title> prefix where any banner line is shown


def untrustworthy_line(r: dict[str, Any]) -> str | None:
    """The terminal's NOT TRUSTWORTHY line of a result (report_text.render_text), without its
    indent; None for a trustworthy result."""
    if r.get("trustworthy") is not False:
        return None
    bad = r.get("impossible_records") or {}
    by_check = bad.get("checks") or {}
    checks = ", ".join(f"{n} {k}" for k, n in by_check.items())
    return (
        f"NOT TRUSTWORTHY: {set_aside_kind(by_check)} in the journal ({checks}), "
        f"{bad.get('count', 0)} set aside; e.g. {'; '.join(bad.get('examples') or [])}"
    )


def stale_line(r: dict[str, Any]) -> str | None:
    """How many kept-alive connections were closed for stray bytes (`accounting.
    stale_connections`) and how many answers taken on them were set aside as suspect; None
    when there were none."""
    n = int((r.get("accounting") or {}).get("stale_connections") or 0)
    if n <= 0:
        return None
    suspect = int(((r.get("impossible_records") or {}).get("checks") or {}).get("suspect") or 0)
    head = (
        f"stray bytes: {n} kept-alive connection{'s' * (n != 1)} carried responses nobody "
        "asked for (closed)"
    )
    if suspect:
        return (
            f"{head}; {suspect} answer{'s' * (suspect != 1)} taken on them just before set aside "
            "as suspect (possibly another request's)"
        )
    return f"{head}; each answer before them was its connection's first, which nothing overtakes"


def trust_lines(r: dict[str, Any]) -> list[str]:
    """The terminal report's lines under its first (harness.analysis.report_text): NOT
    TRUSTWORTHY with what was set aside, and the stray bytes its connections met, indented."""
    return [f"  {line}" for line in (untrustworthy_line(r), stale_line(r)) if line is not None]


def result_banner(r: dict[str, Any]) -> list[str]:
    """The banner lines of one result: not trustworthy, incomplete (with its stop reason)."""
    out = []
    line = untrustworthy_line(r)
    if line is not None:
        out.append(line)
    if r.get("complete") is False:
        out.append(
            f"INCOMPLETE ({r.get('stop_reason')}): the figures cover only what finished, "
            "not the run the scenario planned"
        )
    return out


def _run_problem(name: str) -> str | None:
    """Why the result file `name` is not to be trusted as it stands; None when it is, or when
    `name` is not a readable result file (a run compared from memory)."""
    lines = _run_lines(name)
    return f"{name}: {' | '.join(lines)}" if lines else None


def _run_lines(name: str) -> list[str]:
    """The banner lines of the result file `name` ([] when there are none, or when `name` is
    not a file: a run compared from memory)."""
    from harness.analysis.result import load_result
    from harness.errors import ConfigError

    p = Path(name)
    if not p.is_file():
        return []
    try:
        r = load_result(p)
    except ConfigError:
        return ["no longer readable as a result"]
    return result_banner(r)


def untrusted_runs(report: dict[str, Any]) -> list[dict[str, str]]:
    """Each run of either side of a compare report that is not trustworthy or incomplete, once:
    {side, run (its file), problem (its banner lines, joined by " | ")}; compare's JSON keeps
    them as `untrusted_runs`, its text and HTML page say them first."""
    if isinstance(report.get("untrusted_runs"), list):
        return list(report["untrusted_runs"])
    out: list[dict[str, str]] = []
    for comp in report.get("comparisons") or []:
        for side in ("baseline", "candidate"):
            for name in comp.get(f"{side}_runs") or []:
                lines = _run_lines(str(name))
                row = {"side": side, "run": str(name), "problem": " | ".join(lines)}
                if lines and row not in out:
                    out.append(row)
    return out


def compare_banner(report: dict[str, Any]) -> list[str]:
    """One line per run of either side that is not trustworthy or incomplete, once each."""
    out = [f"{u['side']} run {u['run']}: {u['problem']}" for u in untrusted_runs(report)]
    if out:
        out.insert(
            0, "NOT TRUSTWORTHY: a compared run's figures are not to be trusted as they stand"
        )
    return out


def capacity_banner(rep: dict[str, Any], folder: Path | None = None) -> list[str]:
    """A capacity search's banner (capacity.json as `rep`; its probes' results in `folder`):
    NOT TRUSTWORTHY when the answer is UNRELIABLE (the harness, not the server, was late at and
    above it) or a probe's result is not trustworthy (that run's line, as its own page says);
    INCOMPLETE when a signal stopped the search (it answers nothing)."""
    out = []
    if rep.get("unreliable"):
        out.append(
            "NOT TRUSTWORTHY: UNRELIABLE answer: the harness itself was late in the runs at and "
            "above it; the server may sustain less as well as more"
        )
    for i, p in enumerate(rep.get("probes") or [], 1):
        name = p.get("result")
        if folder is None or not isinstance(name, str) or not (folder / name).is_file():
            continue
        problem = _run_problem(str(folder / name))
        if problem is not None and "NOT TRUSTWORTHY" in problem:
            out.append(f"run {i} ({p.get('kind')} at {p.get('rate'):.4g} req/s): {problem}")
    if any(line.startswith("run ") for line in out) and not rep.get("unreliable"):
        out.insert(0, "NOT TRUSTWORTHY: a run of the search is not to be trusted as it stands")
    if rep.get("interrupted"):
        out.append(
            f"INCOMPLETE search ({rep['interrupted']}: {rep.get('stop_reason')}): no answer; "
            "only the runs that finished are shown"
        )
    return out


def sweep_banner(summary: dict[str, Any]) -> list[str]:
    """The sweep's stop reason and every point not done (failed, pending) with its reason: such a
    point is left out of the charts. A run whose journal held impossible records is a failed
    point (its result is not complete), named NOT TRUSTWORTHY."""
    sw = summary.get("sweep") or {}
    points = []
    for p in summary.get("points") or []:
        if p.get("status") != "done":
            where = " / ".join(str(p.get(k)) for k in ("setting_label", "load_label") if p.get(k))
            why = f": {p['error']}" if p.get("error") else ""
            points.append(f"point {p.get('id')} ({where}) {p.get('status')}{why}")
    out = []
    if any("not trustworthy" in line for line in points):
        out.append("NOT TRUSTWORTHY: a point's journal held impossible records; it is left out")
    if sw.get("stop_reason"):
        out.append(f"INCOMPLETE sweep ({sw['stop_reason']}): points not done have no figures")
    elif points:
        out.append("INCOMPLETE sweep: not every point is done; those not done have no figures")
    return out + points


__all__ = [
    "BANNER_TITLE",
    "capacity_banner",
    "compare_banner",
    "result_banner",
    "stale_line",
    "sweep_banner",
    "trust_lines",
    "untrusted_runs",
    "untrustworthy_line",
]
