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
"""

from __future__ import annotations


class HarnessError(Exception):
    """A mistake in the user's input, found before the run. Exit status 2."""

    exit_status = 2


class ConfigError(HarnessError):
    """A bad value in a file. `where` is the file, `key` the dotted path inside it."""

    def __init__(self, where: str, key: str, message: str, line: int | None = None) -> None:
        self.where = where
        self.key = key
        self.line = line
        self.detail = message
        loc = where if line is None else f"{where}:{line}"
        prefix = f"{loc}: {key}: " if key else f"{loc}: "
        super().__init__(prefix + message)


class UsageError(HarnessError):
    """A bad command-line flag or argument."""


class RunAborted(Exception):
    """The run had to stop (for example the journal could not be written). Exit status 1."""

    exit_status = 1
