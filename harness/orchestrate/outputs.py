"""Where a command will write, checked before the work starts: a run that measured for an hour
must not end in a traceback because `--html` names a read-only folder.

`check_output_file(flag, path)` makes the file's folder (as the writers do), then really writes
and removes a probe file in it (`os.access` says yes to root on a read-only mount), and refuses
a path that is a folder, a link, a device or a fifo (harness.safe_write). Each failure is a
UsageError naming the flag and the path (exit 2).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.errors import UsageError
from harness.safe_write import refuse_unsafe


def check_output_folder(flag: str, path: Path, folder: Path) -> None:
    """`folder` (where `path` goes) exists or can be made, and a file can be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot create folder {folder}: {exc.strerror or exc}"
        ) from None
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{flag} {path}: folder {folder} is not writable")
    try:  # os.access says yes to root on a read-only mount or /proc: really write a file
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".harness-write-test-")  # O_EXCL
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot write in folder {folder}: {exc.strerror or exc}"
        ) from None


def check_output_file(flag: str, path: Path) -> bool:
    """A file can be written at `path`: its folder is writable and `path` is not a folder, nor
    a link, a device or a fifo (harness.safe_write, which every writer goes through, refuses
    those too). Returns whether a regular file is there (the write will replace it)."""
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    try:
        existed = refuse_unsafe(path)
    except UsageError as exc:
        raise UsageError(f"{flag} {exc}") from None
    check_output_folder(flag, path, path.parent if str(path.parent) else Path("."))
    return existed


__all__ = ["check_output_file", "check_output_folder"]
