"""Bounds on what a file a user names can make the harness do while it is read.

A scenario, config.toml, sweep or thresholds file, a trace, a length file, a dataset or a preset
file is the user's input, and a wrong one must end in one line naming the file (exit 2), never in
a traceback or gigabytes of memory:

- `file_problem`: a path that is not a regular file (a folder, `/dev/zero`, a socket) is named as
  such before it is opened, not read forever or reported as "no such file";
- `bounded_lines`: a line-oriented data file is read one line at a time, each line at most
  `MAX_LINE_BYTES`; a longer line (a 100 MB line with no newline) is refused naming its number;
- `MAX_TEXT_FILE_BYTES`: a TOML or JSON configuration file is read whole, up to this size;
- `check_nesting`: a parsed TOML or JSON document nested deeper than `MAX_NESTING` levels is
  refused (tomllib and json recurse per level: 500 levels is a RecursionError).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from harness.errors import ConfigError

MAX_LINE_BYTES = 4 * 1024 * 1024  # one trace / dataset / length-file line; real lines are < 1 MB
MAX_TEXT_FILE_BYTES = 64 * 1024 * 1024  # one scenario, config, sweep, thresholds or preset file
MAX_NESTING = 32  # tables and arrays inside one another; real scenarios nest at most 5 deep


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a data file ("no such file", "it is a folder", "not a regular
    file (a character device)"), or None when it is a regular file (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except NotADirectoryError:
        return "no such file (a part of the path is not a folder)"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "it is a folder"
    return f"not a regular file ({_kind(mode)})"


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def read_bounded(path: Path, limit: int = MAX_TEXT_FILE_BYTES) -> bytes:
    """The bytes of a configuration file, at most `limit`; ConfigError naming the file beyond.
    A pipe (`<(...)`) is read, to the same bound; a device or a folder is refused unread."""
    problem = file_problem(path)
    if problem is not None and not problem.endswith("(a pipe)"):
        raise ConfigError(
            str(path),
            "",
            "file not found" if problem == "no such file" else f"cannot read: {problem}",
        )
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ConfigError(
            str(path), "", f"larger than {limit // (1024 * 1024)} MiB, the bound for this file"
        )
    return data


def bounded_lines(f: IO[bytes], where: str, what: str = "line") -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line with its newline) of a binary file, each read with a bound:
    a line longer than MAX_LINE_BYTES is a ConfigError naming the file and the line."""
    lineno = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            raise ConfigError(
                where,
                "",
                f"{what} longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB (the bound on one "
                f"{what}); is this the right file?",
                line=lineno,
            )
        yield lineno, raw


def check_nesting(doc: Any, where: str) -> None:
    """ConfigError naming `where` if `doc` holds tables/arrays nested deeper than MAX_NESTING.
    Walked without recursion, so any depth is measured safely."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ConfigError(where, "", nesting_message())
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))


def nesting_message() -> str:
    return f"tables and arrays nested more than {MAX_NESTING} deep (the bound on nesting)"
