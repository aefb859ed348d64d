"""Flags that several commands share, defined once: a run of a scenario (`run`, `predict`) takes
`--set`, `--seed` and `--quiet` alike, and writes its HTML report with the same `--html`."""

from __future__ import annotations

import argparse


def add_scenario_flags(p: argparse.ArgumentParser, set_example: str) -> None:
    """`--set KEY=VALUE` (repeatable, into `sets`), `--seed N`, `--quiet`."""
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a scenario value by dotted path, e.g. {set_example} (repeatable)",
    )
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--quiet", action="store_true", help="print only the result path")


def add_result_html_flag(p: argparse.ArgumentParser) -> None:
    """`--html [OUT.html]`: the result's HTML report, by default next to the result."""
    p.add_argument(
        "--html",
        nargs="?",
        const="",
        default=None,
        metavar="OUT.html",
        help="also write the HTML report (default: next to the result, r.json -> r.html)",
    )
