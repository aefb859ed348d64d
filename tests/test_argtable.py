"""harness.argtable: a table of options registers exactly what the add_argument calls it stands
for would, in the same order (the --help text and its usage line are the proof)."""

from __future__ import annotations

import argparse

import pytest

from harness.argtable import Group, add_options, opt


def _by_calls() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="x")
    p.add_argument("scenario", nargs="?", help="a file")
    g = p.add_argument_group("quick", "flags that build a scenario")
    g.add_argument("--rate", "--request-rate", dest="rate", metavar="R", help="requests/s")
    g.add_argument("--n", type=int, default=3, help="how many")
    p.add_argument("--quiet", action="store_true", help="less")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    return p


def _by_table() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="x")
    add_options(
        p,
        (
            opt("scenario", nargs="?", help="a file"),
            Group(
                "quick",
                (
                    opt("--rate", "--request-rate", dest="rate", metavar="R", help="requests/s"),
                    opt("--n", type=int, default=3, help="how many"),
                ),
                "flags that build a scenario",
            ),
            opt("--quiet", action="store_true", help="less"),
            opt("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE"),
        ),
    )
    return p


def test_a_table_gives_the_same_help_as_the_calls():
    assert _by_table().format_help() == _by_calls().format_help()


@pytest.mark.parametrize(
    "argv",
    [
        [],  # every default
        ["s.toml", "--request-rate", "4", "--n", "7", "--quiet", "--set", "a=1", "--set", "b=2"],
    ],
)
def test_a_table_parses_as_the_calls_do(argv):
    assert vars(_by_table().parse_args(argv)) == vars(_by_calls().parse_args(argv))


def test_rows_keep_their_order():
    p = argparse.ArgumentParser(prog="x")
    add_options(p, (opt("--b"), opt("--a")))
    assert p.format_usage() == "usage: x [-h] [--b B] [--a A]\n"
