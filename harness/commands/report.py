"""`harness report RESULT.json | JOURNAL.jsonl`: print a saved result, or rebuild one from a journal."""

from __future__ import annotations

import argparse

from harness.orchestrate.report import report_command


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="print a result's report; rebuild a result from a journal",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness report results/burst-20261129T120000Z.json\n"
        "  python -m harness report results/burst-20261129T120000Z.journal.jsonl --out rebuilt.json",
    )
    p.add_argument("path", help="a result .json or a journal .journal.jsonl")
    p.add_argument("--out", help="write the (rebuilt) result JSON here")
    p.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write a self-contained HTML report (result or sweep summary.json)",
    )
    p.set_defaults(func=lambda a: report_command(a.path, a.out, a.html))
