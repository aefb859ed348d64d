"""Where a command will write, checked before the work starts: a run that measured for an hour
must not end in a traceback because `--html` names a read-only folder.

`check_output_file(flag, path)` makes the file's folder (as the writers do), then really writes
and removes a probe file in it (`os.access` says yes to root on a read-only mount), and refuses
a path that is a folder. Each failure is a UsageError naming the flag and the path (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import UsageError


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
    probe = folder / f".harness-write-test-{os.getpid()}"
    try:  # os.access says yes to root on a read-only mount or /proc: really write a file
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot write in folder {folder}: {exc.strerror or exc}"
        ) from None


def check_output_file(flag: str, path: Path) -> None:
    """A file can be written at `path`: its folder is writable and `path` is not a folder."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    check_output_folder(flag, path, path.parent if str(path.parent) else Path("."))


__all__ = ["check_output_file", "check_output_folder"]
