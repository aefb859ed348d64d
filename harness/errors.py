"""Errors, sorted by who is at fault and when it happens.

HarnessError                the user's input is wrong; raised BEFORE a run starts.
                            The CLI prints its message on one line and exits with status 2.
  ConfigError               a file (scenario, config.toml, settings.json, trace, preset) has a
                            bad value; the message names the file, the key and what is allowed.
  UsageError                a command-line flag is wrong.
RunAborted                  the run could not go on (results folder unwritable mid-run); exit 1.

Per-request outcomes are *not* exceptions: they are `harness.record.records.ErrorKind`
values stored in each Record, because a failed request never aborts a run.
Anything else that escapes is our bug and keeps its traceback.

An error about a file's contents names the file, the line (and column where the parser knows
it) and the key, and never quotes a line of the file: a file handed over by mistake (a `.env`
given as a trace) may hold a key. Where a message shows a value read from a data file or from
settings.json it shows `preview(value)`: numbers (and strings of digits and date punctuation)
in full, another string by at most its first 6 characters and its length, as a key is masked.
"""

from __future__ import annotations

import re


class HarnessError(Exception):
    """A mistake in the user's input, found before the run. Exit status 2."""

    exit_status = 2


class ConfigError(HarnessError):
    """A bad value in a file. `where` is the file, `key` the dotted path inside it."""

    def __init__(
        self,
        where: str,
        key: str,
        message: str,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.where = where
        self.key = key
        self.line = line
        self.column = column
        self.detail = message
        loc = where if line is None else f"{where}:{line}"
        if line is not None and column is not None:
            loc += f":{column}"
        prefix = f"{loc}: {key}: " if key else f"{loc}: "
        super().__init__(prefix + message)


class UsageError(HarnessError):
    """A bad command-line flag or argument."""


class RunAborted(Exception):
    """The run had to stop (for example the journal could not be written). Exit status 1."""

    exit_status = 1


PREVIEW_CHARS = 6  # as many characters of a string as a masked key shows
_NUMBER_OR_DATE = re.compile(r"[0-9 .:/+\-eETZ]{1,40}")  # '1.5e3', '2023-11-16 18:17:03.97'


def preview(value: object) -> str:
    """A value read from a file, as an error message may show it: None, booleans and numbers in
    full; a string that is a number or a date and time (digits, signs, `.:/ eETZ`, at most 40
    characters) or has at most PREVIEW_CHARS characters in full, another by its first
    PREVIEW_CHARS and its length (`'OPENAI…' (51 characters)`); a list or object by its size."""
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        if len(value) <= PREVIEW_CHARS or _NUMBER_OR_DATE.fullmatch(value):
            return repr(value)
        head = repr(value[:PREVIEW_CHARS])
        return f"{head[:-1]}…{head[-1]} ({len(value)} characters)"
    if isinstance(value, bytes):
        return f"{len(value)} bytes"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return f"an object with {len(value)} key{'' if len(value) == 1 else 's'}"
    return type(value).__name__
