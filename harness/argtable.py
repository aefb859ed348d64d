"""Command-line options as tables: a command lists its options as rows (`Option`, and `Group`
for a titled section of its --help) and `add_options` registers a table into a parser.

A row is one `add_argument` call written as data, so a command's registration reads as a
table rather than a long run of calls, and tables that several commands share (the files a
target comes from, a run's scenario flags) are tuples that are concatenated. The order of
the rows is the order of --help and of its usage line, exactly as the calls were."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ArgTarget = argparse.ArgumentParser | argparse._ArgumentGroup


@dataclass(frozen=True, slots=True)
class Option:
    """One `add_argument` call: the flags (or a positional's name), the help text, and
    argparse's other keywords (dest, type, metavar, default, action, ...)."""

    flags: tuple[str, ...]
    help: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Group:
    """An argument group: a titled section of --help holding its own rows."""

    title: str
    rows: tuple[Option, ...]
    description: str | None = None


def opt(*flags: str, help: str | None = None, **kwargs: Any) -> Option:
    """A row, written as the `add_argument` call it stands for."""
    return Option(flags, help, kwargs)


def add_options(target: ArgTarget, table: Iterable[Option | Group]) -> None:
    """Register each row of `table` into `target` (a parser or a group), in order; a `Group`
    row becomes an argument group of `target` holding its rows."""
    for row in table:
        if isinstance(row, Group):
            add_options(target.add_argument_group(row.title, row.description), row.rows)
        else:
            target.add_argument(*row.flags, help=row.help, **row.kwargs)


__all__ = ["ArgTarget", "Group", "Option", "add_options", "opt"]
