"""The journal: every finished request appended to disk while the run goes.

Format: JSON Lines. The first line is a header (`"t": "header"`) holding everything needed to
rebuild the result offline (scenario, target without key, plan summary, clock anchor). Then one
line per finished request (`"t": "rec"`), interleaved with probe and server-metrics samples
(`"t": "loop_lag"`, `"t": "server_metrics"`), and, when the run ended in order, a last line
`"t": "end"`. A run killed with SIGKILL leaves at most a torn last line, which `read_journal`
drops: the flush interval bounds what can be lost.

Token stamps are delta-encoded (first stamp relative to `intended_ns`, then gaps) and the
tokens-per-chunk list is omitted when every chunk carried one token.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from harness.errors import RunAborted
from harness.record.records import ErrorKind, Record

JOURNAL_VERSION = 1
FLUSH_INTERVAL_S = 0.5  # at most this much finished work is only in memory


def encode_record(r: Record) -> dict[str, Any]:
    d: dict[str, Any] = {"t": "rec", "seq": r.seq, "ph": r.phase, "i": r.intended_ns}
    if r.sent_ns is not None:
        d["s"] = r.sent_ns
    if r.headers_ns is not None:
        d["h"] = r.headers_ns
    if r.end_ns is not None:
        d["e"] = r.end_ns
    if r.status is not None:
        d["st"] = r.status
    if r.chunk_ns:
        c = np.diff(np.asarray(r.chunk_ns, dtype=np.int64), prepend=r.intended_ns)
        d["c"] = c.tolist()
        if any(k != 1 for k in r.chunk_tokens):
            d["k"] = list(r.chunk_tokens)
    if r.error is not None:
        d["err"] = r.error.value
        if r.error_detail:
            d["msg"] = r.error_detail
    d["pt"] = r.prompt_tokens
    d["ot"] = r.output_tokens
    d["ppt"] = r.planned_prompt_tokens
    d["pot"] = r.planned_output_tokens
    if r.usage_per_chunk:
        d["u"] = 1
    if r.attempt:
        d["a"] = r.attempt
    if r.retried:
        d["r"] = 1
    return d


def decode_record(d: dict[str, Any]) -> Record:
    intended = int(d["i"])
    chunk_ns: tuple[int, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    if "c" in d:
        # accumulate runs in C: no Python frame per stamp (benchmarks/analysis_bench.py)
        chunk_ns = tuple(accumulate(d["c"], initial=intended))[1:]
        chunk_tokens = tuple(d["k"]) if "k" in d else (1,) * len(chunk_ns)
    err = d.get("err")
    return Record(
        seq=d["seq"], phase=d["ph"], intended_ns=intended, sent_ns=d.get("s"),
        headers_ns=d.get("h"), chunk_ns=chunk_ns, chunk_tokens=chunk_tokens, end_ns=d.get("e"),
        status=d.get("st"), error=ErrorKind(err) if err else None, error_detail=d.get("msg", ""),
        prompt_tokens=d.get("pt", 0), output_tokens=d.get("ot", 0),
        planned_prompt_tokens=d.get("ppt", 0), planned_output_tokens=d.get("pot", 0),
        usage_per_chunk=bool(d.get("u")), attempt=d.get("a", 0), retried=bool(d.get("r")),
    )


class JournalWriter:
    """Append-only journal. `write_*` buffer in memory; `flush()` (also every FLUSH_INTERVAL_S
    from `run_flusher`) hands the bytes to the OS, which is what survives a SIGKILL."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self._buf: list[bytes] = []
        self.failed: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._f: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise RunAborted(f"cannot write the journal {path}: {exc.strerror or exc}") from None
        self.write_line({"t": "header", "version": JOURNAL_VERSION, **header})
        self.flush()
        if self.failed:  # a full disk: refuse to start measuring into nothing
            try:
                self._f.close()
            except OSError:
                pass
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
            self.failed = self.failed or f"cannot write the journal {self.path}: {exc.strerror or exc}"


@dataclass
class Journal:
    header: dict[str, Any]
    records: list[Record] = field(default_factory=list)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    torn_lines: int = 0


def _lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from f


def read_journal(path: Path) -> Journal:
    """Read a journal back; a torn or unparsable line (the tail of a killed run) is skipped."""
    header: dict[str, Any] | None = None
    j = Journal(header={})
    for line in _lines(path):
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError:
            j.torn_lines += 1
            continue
        kind = d.get("t") if isinstance(d, dict) else None
        if kind == "rec":
            try:
                j.records.append(decode_record(d))
            except (KeyError, TypeError, ValueError):  # a damaged line: skipped and counted
                j.torn_lines += 1
        elif kind == "header":
            header = d
        elif kind == "end":
            j.end = d
        elif isinstance(kind, str):
            j.events.setdefault(kind, []).append(d)
    if header is None:
        raise ValueError(f"{path} is not a harness journal (no header line)")
    j.header = header
    return j
