"""`report`: print a result's report, rebuild a result from its journal, or report a sweep's
summary; with `html`, write the HTML report too. Reads files only, never a server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis.report_text import render_text
from harness.analysis.result import dump_result, rebuild_result
from harness.analysis.sweep_report import render_sweep_text
from harness.errors import UsageError
from harness.orchestrate.outputs import check_output_file
from harness.record.journal import JournalError
from harness.termtext import terminal_safe


def report_command(path: str, out: str | None, html: str | None = None) -> int:
    """Print the report of a result, or rebuild a result from a journal (and write it with --out);
    `html`: also write the HTML report. A sweep's summary.json gets the sweep report. Exit 1
    when the result is not trustworthy (its journal held impossible records)."""
    p = Path(path)
    for flag, dest in (("--out", out), ("--html", html)):
        if dest:  # written after the report: checked now
            check_output_file(flag, Path(dest))
    if p.name.endswith(".jsonl"):
        try:
            _, result = rebuild_result(p)
        except FileNotFoundError:
            raise UsageError(f"{p}: file not found") from None
        except OSError as exc:  # a folder, no permission
            raise UsageError(f"{p}: cannot read: {exc.strerror or exc}") from None
        except JournalError as exc:
            raise UsageError(str(exc)) from None
    else:
        from harness.analysis.sweep_report import is_summary

        if is_summary(result := _read_json_or_result(p)):
            return report_summary(p, result, html)
    print(terminal_safe(render_text(result)))
    if out:
        dump_result(result, Path(out))
        print(out)
    if html:
        from harness.analysis.html import render_result_html, write_html

        write_html(Path(html), render_result_html(result, p))
        print(html)
    return 0 if result.get("trustworthy", True) else 1  # impossible records: written, not trusted


def _read_json_or_result(p: Path) -> dict[str, Any]:
    """A sweep summary as is, else a result validated by load_result."""
    from harness.analysis.result import check_result
    from harness.analysis.result_file import read_json_file

    doc = read_json_file(p)  # bounded: a 2 GB file of zeros is refused unread
    if isinstance(doc, dict) and doc.get("kind") == "sweep_summary":
        return doc
    return check_result(doc, str(p))


def report_summary(
    path: Path, summary: dict[str, Any], html: str | None, point: str | None = None
) -> int:
    """Print a sweep summary's table; with `html`, write its HTML report too."""
    print(terminal_safe(render_sweep_text(summary)))
    if html:
        from harness.analysis.html import write_html
        from harness.analysis.html_sweep import render_sweep_html
        from harness.orchestrate.sweep import chosen_point

        write_html(
            Path(html), render_sweep_html(summary, path.parent, chosen_point(summary, point))
        )
        print(html)
    return 0


__all__ = ["report_command", "report_summary"]
