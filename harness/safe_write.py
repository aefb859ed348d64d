"""How every output file is written: the one function (and its streaming form) that the result,
the journal, HTML pages, exports, plans, capacity and sweep summaries go through.

- `write_file(path, data)` / `atomic_file(path)`: the bytes go to a temporary file created
  exclusively (`tempfile.mkstemp`: O_EXCL, an unpredictable name) in the destination's folder,
  are fsynced, and then atomically replace the destination. A planted `R.json.tmp` link is never
  followed: no fixed temporary name is used.
- `refuse_unsafe(path)`: an existing output that is not a regular file (a symbolic link, a
  device, a fifo, a socket, a folder) is refused with a one-line UsageError (exit 2) naming it;
  it is never written through nor replaced.
- `claim_journal(path)`: the journal opened with O_NOFOLLOW (a link or a non-regular file is
  refused the same way) and locked (`flock`, LOCK_EX | LOCK_NB) before it is truncated, so a
  second run with the same `--out` refuses at its start, naming the run that holds it.
- `open_append(path)`: a log appended to, with the same refusal (the simulator's log).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from harness.errors import UsageError

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a fifo"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refusal(path: Path, mode: int) -> UsageError:
    return UsageError(
        f"{path}: exists and is {_kind(mode)}, not a regular file; refusing to write "
        "through or over it (remove it or choose another path)"
    )


def refuse_unsafe(path: Path) -> bool:
    """Raise UsageError if `path` exists and is not a regular file (a link is not followed);
    return whether a regular file is there (the write will replace it)."""
    try:
        st = os.lstat(path)
    except OSError:  # not there (or its folder is not): making the folder says what is wrong
        return False
    if not stat.S_ISREG(st.st_mode):
        raise _refusal(path, st.st_mode)
    return True


@functools.cache
def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc), else by the
    set-and-restore dance."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(
    path: Path | str,
    mode: str = "wb",
    encoding: str | None = None,
    newline: str | None = None,
    make_folder: bool = True,
) -> Iterator[IO[Any]]:
    """A file object to write `path` with: a fresh temporary file beside it that replaces
    `path` (after fsync) when the block ends without an exception, and is removed when it does
    not. Refuses (UsageError) an existing `path` that is not a regular file. `make_folder`:
    the folder is made (else a missing one is the OSError of opening the file in it)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    existed = refuse_unsafe(path)
    if make_folder:
        folder.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        # the destination's permissions when it exists, else what a plain open() would give
        os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode) if existed else 0o666 & ~_umask())
        with os.fdopen(fd, mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        refuse_unsafe(path)  # planted while we wrote: still not followed, still not replaced
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_folder(folder)


def write_file(path: Path | str, data: bytes | str, make_folder: bool = True) -> None:
    """Write `data` (str: UTF-8) to `path` atomically, as `atomic_file` does."""
    with atomic_file(path, make_folder=make_folder) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def _open_nofollow(path: Path, flags: int) -> int:
    """An fd for the regular file at `path` (created if missing), opened without following a
    link and without blocking on a fifo; anything else is a UsageError naming it."""
    refuse_unsafe(path)
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refusal(path, stat.S_IFLNK) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refusal(path, st.st_mode)
    os.set_blocking(fd, True)
    return fd


def open_append(path: Path | str) -> IO[bytes]:
    """`path` opened to append bytes (a log), never through a link nor onto a device."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.fdopen(_open_nofollow(path, os.O_WRONLY | os.O_APPEND), "ab")


class JournalClaim:
    """A journal opened (O_NOFOLLOW) and locked for one run; `file()` truncates it and hands a
    file object to write with. The lock is held until `close()` (or the process ends), so it
    outlives the writer: the result is built and written from the journal under it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def _emptied(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path}: the journal's claim was released")
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        return self._fd

    def file(self) -> BinaryIO:
        """The journal emptied, as a file object of its own: closing it keeps the lock."""
        return cast(BinaryIO, os.fdopen(os.dup(self._emptied()), "wb"))

    def take(self) -> BinaryIO:
        """The journal emptied, as a file object that owns the lock: closing it releases it."""
        fd, self._fd = self._emptied(), None
        return cast(BinaryIO, os.fdopen(fd, "wb"))

    def close(self) -> None:
        """Release the lock (a second call does nothing)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> JournalClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _holder(path: Path) -> str:
    """Words naming the run that holds a journal: its header's start time and pid, if any."""
    try:
        with open(path, "rb") as f:  # a regular file (checked): its first line, bounded
            first = f.readline(65536)
    except OSError:
        return "another run"
    try:
        h = json.loads(first)
    except ValueError:
        return "another run"
    if not isinstance(h, dict):
        return "another run"
    pid, started = h.get("pid"), h.get("started_at")
    words = "another run"
    if isinstance(pid, int):
        words += f" (pid {pid}"
        words += f", started {started})" if isinstance(started, str) else ")"
    return words


def claim_journal(path: Path | str) -> JournalClaim:
    """Open and lock the journal at `path` before anything is sent. Refuses (UsageError, exit 2)
    a link or a non-regular file there, and a journal another run holds, naming it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_nofollow(path, os.O_WRONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"{path}: the journal is in use by {_holder(path)}; two runs cannot share one "
            "--out: wait for it or give this run another --out"
        ) from None
    except OSError:  # a file system without flock: written unlocked, as before
        pass
    return JournalClaim(path, fd)


__all__ = [
    "JournalClaim",
    "atomic_file",
    "claim_journal",
    "open_append",
    "refuse_unsafe",
    "write_file",
]
