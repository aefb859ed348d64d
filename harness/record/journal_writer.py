"""The journal's writer: records appended while the run goes, flushed every FLUSH_INTERVAL_S.

What is flushed is what survives a SIGKILL; a write failure is kept in `failed` for the run to
stop on. The file is claimed (opened without following links, locked against a second run)
through harness.safe_write.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from harness.errors import RunAborted
from harness.record.journal_codec import JOURNAL_VERSION, encode_record
from harness.record.records import Record
from harness.safe_write import JournalClaim, claim_journal

FLUSH_INTERVAL_S = 0.5  # at most this much finished work is only in memory


class JournalWriter:
    """Append-only journal. `write_*` buffer in memory; `flush()` (also every FLUSH_INTERVAL_S
    from `run_flusher`) hands the bytes to the OS, which is what survives a SIGKILL."""

    def __init__(
        self, path: Path, header: dict[str, Any], claim: JournalClaim | None = None
    ) -> None:
        """`claim`: opened and locked already (safe_write.claim_journal), else claimed here."""
        self.path = path
        self._buf: list[bytes] = []
        self.failed: str | None = None
        try:
            self._f: BinaryIO = claim.file() if claim else claim_journal(path).take()
        except OSError as exc:
            raise RunAborted(f"cannot write the journal {path}: {exc.strerror or exc}") from None
        self.write_line({"t": "header", "version": JOURNAL_VERSION, "pid": os.getpid(), **header})
        self.flush()
        if self.failed:  # a full disk: refuse to start measuring into nothing
            self.close()
            raise RunAborted(self.failed)

    def write_line(self, obj: dict[str, Any]) -> None:
        self._buf.append(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")

    def write_record(self, r: Record) -> None:
        self._buf.append(orjson.dumps(encode_record(r)) + b"\n")

    def write_encoded(self, lines: bytes) -> None:
        """Append journal lines already encoded elsewhere (worker processes, Ray tasks)."""
        if lines:
            self._buf.append(lines)

    def flush(self) -> None:
        if not self._buf or self.failed:
            return
        data = b"".join(self._buf)
        self._buf.clear()
        try:
            self._f.write(data)
            self._f.flush()
        except OSError as exc:
            self.failed = f"cannot write the journal {self.path}: {exc.strerror or exc}"

    async def run_flusher(self, on_failure: Any = None) -> None:
        """Flush every FLUSH_INTERVAL_S until cancelled; call on_failure(message) once on error."""
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            self.flush()
            if self.failed:
                if on_failure is not None:
                    on_failure(self.failed)
                return

    def close(self, end: dict[str, Any] | None = None) -> None:
        """Write the end line (when given), flush and close; a second close does nothing, so a
        run that failed midway is closed without an end line (read as interrupted)."""
        if self._f.closed:
            return
        if end is not None:
            self.write_line({"t": "end", **end})
        self.flush()
        try:
            os.fsync(self._f.fileno())
        except OSError:
            pass
        try:
            self._f.close()
        except OSError as exc:  # the last buffered bytes could not be written
            self.failed = (
                self.failed or f"cannot write the journal {self.path}: {exc.strerror or exc}"
            )
