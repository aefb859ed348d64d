"""Flags that several commands share, defined once: a run of a scenario (`run`, `predict`) takes
`--set`, `--seed` and `--quiet` alike, and writes its HTML report with the same `--html`."""

from __future__ import annotations

import argparse

from harness.argtable import Option, opt


def scenario_options(set_example: str) -> tuple[Option, ...]:
    """`--set KEY=VALUE` (repeatable, into `sets`), `--seed N`, `--quiet`."""
    return (
        opt(
            "--set",
            dest="sets",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"override a scenario value by dotted path, e.g. {set_example} (repeatable)",
        ),
        opt("--seed", type=int, help="override the scenario's seed"),
        opt("--quiet", action="store_true", help="print only the result path"),
    )


HTML_SUFFIXES = (".html", ".htm")


class OptionalPath(argparse.Action):
    """An option whose path is optional: `--html` alone, `--html=PATH`, or `--html PATH.html`.

    argparse's `nargs="?"` takes whatever word follows, so `run --html scenarios/steady.toml`
    would swallow the scenario as the HTML path. The word after the flag is its path only when
    it ends in one of `suffixes`; `separate_optional_paths` (called by the command line's parser
    on every argv it parses) writes the flag as `--html=` otherwise, so the word stays where it
    belongs."""

    suffixes: tuple[str, ...] = HTML_SUFFIXES

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, "" if values is None else values)


def separate_optional_paths(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """`args` with each bare OptionalPath flag not followed by a path of its suffixes written
    as `--flag=` (its path: the default). Words after `--` are left alone."""
    flags = {
        s: a.suffixes
        for a in parser._actions
        if isinstance(a, OptionalPath)
        for s in a.option_strings
    }
    if not flags:
        return args
    out: list[str] = []
    for i, word in enumerate(args):
        if word == "--":
            return out + args[i:]
        following = args[i + 1] if i + 1 < len(args) else ""
        if word in flags and not following.lower().endswith(flags[word]):
            out.append(word + "=")
        else:
            out.append(word)
    return out


# `--html`, `--html=PATH` or `--html PATH.html`: the result's HTML report, by default next to
# the result.
HTML_OPTION = opt(
    "--html",
    action=OptionalPath,
    nargs="?",
    const="",
    default=None,
    metavar="PATH",
    help="also write the HTML report: --html (next to the result, r.json -> r.html), "
    "--html=PATH or --html PATH.html (a following word not ending in .html is not its path)",
)
