"""The journal: every finished request appended to disk while the run goes.

Format: JSON Lines. The first line is a header (`"t": "header"`) holding everything needed to
rebuild the result offline (scenario, target without key, plan summary, clock anchor). Then one
line per finished request (`"t": "rec"`), interleaved with probe and server-metrics samples
(`"t": "loop_lag"`, `"t": "server_metrics"`), and, when the run ended in order, a last line
`"t": "end"`. A run killed with SIGKILL leaves at most a torn last line, which `read_journal`
drops: the flush interval bounds what can be lost.

Token stamps are delta-encoded (first stamp relative to `intended_ns`, then gaps). Version 2
stores the deltas as base64 of a little-endian int32 array (`"c4"`; `"c8"`: int64 when a delta
exceeds int32, about 2.1 s) and the tokens-per-chunk the same way (`"k4"`/`"k8"`, omitted when
every chunk carried one token), so a reader turns them into numpy arrays with `np.frombuffer`
instead of parsing millions of JSON integers (benchmarks/analysis_bench.py). Version-1 journals
(`"c"`/`"k"` JSON lists) are still read.

A record line also carries the request and response body sizes (`"sb"`, `"rb"`), the token
channels where any event was not an answer (`"ch"`: flat [first event, channel, ...] runs,
harness.record.records.Channel), the usage's reasoning count (`"urt"`), its cached prompt tokens
(`"cpt"`, usage.prompt_tokens_details.cached_tokens), and the usage
counts that were not believed (`"uf"`, harness.record.usage); the reader vets every record's
counts again (`Columns.vetted`), so a journal written before that rule rebuilds safely. The end
line carries each shard's account of its requests (`"accounts"`, harness.analysis.accounting).

`read_journal` is columnar: it builds the arrays of `Columns` while reading, without one Python
int per stamp; `Journal.records` materialises Records only when a caller asks for them.

A journal is also a file users hand back (`report X.journal.jsonl`), so `read_journal` trusts
nothing in it: a header missing what the result is built from, or a second, different header
(two journals joined), is a JournalError naming the line and the key; a damaged record or end
line is skipped and counted (`torn_lines`); a line repeated -- the same record (seq, attempt)
again, or an identical event line -- is read once and counted (`duplicate_lines`), so a journal
copied into itself cannot double a run's requests.
"""

from __future__ import annotations

import asyncio
import binascii
import os
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from harness.errors import RunAborted
from harness.record.metrics import Columns
from harness.record.records import Channel, ErrorKind, Record, chunk_channels
from harness.record.usage import NEGATIVE
from harness.safe_write import JournalClaim, claim_journal

JOURNAL_VERSION = 2
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_DTYPES: dict[str, np.dtype[Any]] = {"4": np.dtype("<i4"), "8": np.dtype("<i8")}
_BIG_ENDIAN = sys.byteorder == "big"
assert array("i").itemsize == 4 and array("q").itemsize == 8


def _pack(d: dict[str, Any], key: str, a: np.ndarray) -> None:
    """d[key + "4"] (int32) or d[key + "8"] (int64): base64 of the little-endian array."""
    if len(a) == 0 or (int(a.min()) >= _I32_MIN and int(a.max()) <= _I32_MAX):
        d[key + "4"] = binascii.b2a_base64(a.astype("<i4").tobytes(), newline=False).decode("ascii")
    else:
        d[key + "8"] = binascii.b2a_base64(a.astype("<i8").tobytes(), newline=False).decode("ascii")


SMALL_ARRAY = 48  # below this many stamps, plain Python beats numpy's per-call overhead


def _b64(a: array[int]) -> str:
    if _BIG_ENDIAN:
        a.byteswap()
    return binascii.b2a_base64(a.tobytes(), newline=False).decode("ascii")


def _pack_ints(d: dict[str, Any], key: str, values: Sequence[int]) -> None:
    """`_pack` for a short sequence of Python ints, without numpy (same bytes)."""
    if len(values) >= SMALL_ARRAY:
        _pack(d, key, np.asarray(values, dtype=np.int64))
    elif min(values) >= _I32_MIN and max(values) <= _I32_MAX:
        d[key + "4"] = _b64(array("i", values))
    else:
        d[key + "8"] = _b64(array("q", values))


def _pack_deltas(d: dict[str, Any], stamps: Sequence[int], intended: int) -> None:
    """d["c4"|"c8"]: the stamps as deltas, the first from `intended`."""
    if len(stamps) >= SMALL_ARRAY:
        c = np.array(stamps, dtype=np.int64)  # in place: np.diff(prepend=) costs twice this
        c[1:] = np.subtract(c[1:], c[:-1])
        c[0] -= intended
        _pack(d, "c", c)
        return
    prev = intended
    deltas = []
    for t in stamps:
        deltas.append(t - prev)
        prev = t
    _pack_ints(d, "c", deltas)


def _unpack(d: dict[str, Any], key: str) -> np.ndarray | None:
    """The int array stored under key (v1 JSON list) or key+"4"/key+"8" (v2 base64); None if absent."""
    for suffix, dtype in _DTYPES.items():
        v = d.get(key + suffix)
        if v is not None:
            if not isinstance(v, str):
                raise TypeError(f"{key}{suffix}: expected a base64 string")
            return np.frombuffer(binascii.a2b_base64(v, strict_mode=True), dtype=dtype)
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, list):
        raise TypeError(f"{key}: expected a list")
    return np.array(v, dtype=np.int64)


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
        _pack_deltas(d, r.chunk_ns, r.intended_ns)
        k = r.chunk_tokens
        if k.count(1) != len(k):
            _pack_ints(d, "k", k)
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
    if r.retry_after_s is not None:
        d["ra"] = r.retry_after_s
    if r.session_id is not None:
        d["sid"] = r.session_id
        d["ti"] = r.turn_index
    if r.request_bytes is not None:
        d["sb"] = r.request_bytes
    if r.received_bytes is not None:
        d["rb"] = r.received_bytes
    if r.usage_flag:
        d["uf"] = r.usage_flag
    if r.channel_runs:
        d["ch"] = [x for run in r.channel_runs for x in run]
    if r.usage_reasoning_tokens is not None:
        d["urt"] = r.usage_reasoning_tokens
    if r.cached_tokens is not None:
        d["cpt"] = r.cached_tokens
    return d


def _runs(v: object) -> tuple[tuple[int, int], ...]:
    """A record's `"ch"` (flat [start, channel, ...]) as channel runs; raises TypeError or
    ValueError for anything else (the record is then damaged)."""
    if v is None:
        return ()
    if type(v) is not list or len(v) % 2 or any(type(x) is not int for x in v):
        raise TypeError("ch: expected a list of integer pairs")
    runs = tuple((v[i], v[i + 1]) for i in range(0, len(v), 2))
    if (
        any(ch not in _CHANNELS for _, ch in runs)
        or any(b[0] < a[0] for a, b in zip(runs, runs[1:], strict=False))
        or (runs and runs[0][0] < 0)
    ):
        raise ValueError("ch: channels are 0..2 and runs start in order")
    return runs


_CHANNELS = frozenset(int(c) for c in Channel)


def decode_record(d: dict[str, Any]) -> Record:
    intended = int(d["i"])
    chunk_ns: tuple[int, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    deltas = _unpack(d, "c")
    if deltas is not None and len(deltas):
        chunk_ns = tuple((np.cumsum(deltas, dtype=np.int64) + intended).tolist())
        k = _unpack(d, "k")
        chunk_tokens = tuple(k.tolist()) if k is not None else (1,) * len(chunk_ns)
    err = d.get("err")
    return Record(
        seq=d["seq"],
        phase=d["ph"],
        intended_ns=intended,
        sent_ns=d.get("s"),
        headers_ns=d.get("h"),
        chunk_ns=chunk_ns,
        chunk_tokens=chunk_tokens,
        end_ns=d.get("e"),
        status=d.get("st"),
        error=ErrorKind(err) if err else None,
        error_detail=d.get("msg", ""),
        prompt_tokens=d.get("pt", 0),
        output_tokens=d.get("ot", 0),
        planned_prompt_tokens=d.get("ppt", 0),
        planned_output_tokens=d.get("pot", 0),
        usage_per_chunk=bool(d.get("u")),
        attempt=d.get("a", 0),
        retried=bool(d.get("r")),
        retry_after_s=d.get("ra"),
        session_id=d.get("sid"),
        turn_index=d.get("ti", 0),
        request_bytes=d.get("sb"),
        received_bytes=d.get("rb"),
        usage_flag=d.get("uf", ""),
        channel_runs=_runs(d.get("ch")),
        usage_reasoning_tokens=d.get("urt"),
        cached_tokens=d.get("cpt"),
    )


class JournalError(ValueError):
    """A journal that cannot be read back: no header, or a header without what the result is
    built from. The message is one line naming the file, the line and the key."""


# The header's keys that `build_result` reads, and their JSON kinds (the rest is optional and
# read with defaults). Each phase and SLO entry is checked too (_PHASE_KEYS, _SLO_KEYS).
_HEADER_KEYS: dict[str, tuple[type, ...]] = {
    "scenario": (dict,),
    "scenario_name": (str,),
    "target": (dict,),
    "environment": (dict,),
    "started_at": (str,),
    "phases": (list,),
}
_HEADER_OPTIONAL: dict[str, tuple[type, ...]] = {
    "slo": (list,),
    "plan": (dict,),
    "options": (dict,),
    "request_adaptations": (list, type(None)),
}
_NUM = (int, float)
_PHASE_KEYS: dict[str, tuple[type, ...]] = {"name": (str,), "warmup": (bool,)}
_PHASE_OPTIONAL: dict[str, tuple[type, ...]] = {
    "closed": (bool,),
    "max_concurrency": (int, type(None)),
    "arrival": (str, type(None)),
    "planned_duration_s": (*_NUM, type(None)),
    "planned_requests": (int, type(None)),
}
_SLO_KEYS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "metric": (str,),
    "stat": (str, type(None)),
    "limit_s": _NUM,
}
# The end line's keys build_result reads: one of the wrong kind makes the line damaged.
_END_OPTIONAL: dict[str, tuple[type, ...]] = {
    "end_ns": (int,),
    "complete": (bool,),
    "stop_reason": (str, type(None)),
    "simulator": (dict, type(None)),
    "phase_starts_ns": (list, type(None)),
    "phase_ends_ns": (list, type(None)),
    "cpu_s": (*_NUM, type(None)),
    "loop_lag_ns": (list, type(None)),
    "t0_wall_s": (*_NUM, type(None)),
}
_KIND_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "true or false",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def _kind_problem(
    d: dict[str, Any], required: dict[str, tuple[type, ...]], optional: dict[str, tuple[type, ...]]
) -> tuple[str, str] | None:
    """(key, what is wrong) of the first key of `d` missing or of the wrong JSON kind."""
    for key, kinds in (*required.items(), *optional.items()):
        if key not in d:
            if key in required:
                return key, "is missing"
            continue
        v = d[key]
        if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
            want = " or ".join(dict.fromkeys(_KIND_NAMES[k] for k in kinds))
            return key, f"expected {want}, got {type(v).__name__} {str(v)[:40]!r}"
    return None


def header_problem(h: dict[str, Any], complete: bool = True) -> tuple[str, str] | None:
    """(dotted key, what is wrong) of a header `build_result` could not build a result from.
    `complete=False`: only the keys present are checked (a journal read for its records)."""
    if complete:
        found = _kind_problem(h, _HEADER_KEYS, _HEADER_OPTIONAL)
    else:
        found = _kind_problem(h, {}, {**_HEADER_KEYS, **_HEADER_OPTIONAL})
    if found is not None:
        return found
    for name, keys, optional in (
        ("phases", _PHASE_KEYS, _PHASE_OPTIONAL),
        ("slo", _SLO_KEYS, {}),
    ):
        for i, item in enumerate(h.get(name) or []):
            if not isinstance(item, dict):
                return f"{name}.{i}", f"expected an object, got {type(item).__name__}"
            found = _kind_problem(item, keys, optional)
            if found is not None:
                return f"{name}.{i}.{found[0]}", found[1]
    if complete and not h["phases"]:
        return "phases", "is empty: a run has at least one phase"
    return None


def _end_ok(d: dict[str, Any]) -> bool:
    if _kind_problem(d, {}, _END_OPTIONAL) is not None:
        return False
    return all(
        all(type(x) is int for x in d.get(k) or [])
        for k in ("phase_starts_ns", "phase_ends_ns", "loop_lag_ns")
    )


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


_ERROR_VALUES = frozenset(e.value for e in ErrorKind)


class _ColumnBuilder:
    """Per-record scalars in lists and per-record stamp arrays, turned into `Columns` at the end:
    one Python object per record, none per token stamp."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.failed_rows: list[dict[str, Any]] = []  # the rows with an error, for their messages
        self.scalars: list[tuple[Any, ...]] = []
        self.deltas: list[np.ndarray] = []
        self.tokens: list[np.ndarray] = []
        self.error_class: list[str | None] = []
        self.usage_flag: list[str] = []
        self.runs: list[tuple[int, tuple[tuple[int, int], ...]]] = []  # (row, runs) where any
        self.usage_reasoning: list[int] = []  # -1: not sent
        self.cached: list[int] = []  # usage's cached prompt tokens; -1: not sent

    def add(self, d: dict[str, Any]) -> None:
        """Take one decoded "rec" line; raise KeyError/TypeError/ValueError for a damaged one
        (the caller counts it as torn) before anything is appended."""
        seq, ph, intended = d["seq"], d["ph"], d["i"]
        sent, end, status = d.get("s"), d.get("e"), d.get("st")
        err = d.get("err")
        if err is not None and err not in _ERROR_VALUES:
            raise ValueError(f"unknown error kind {err!r}")
        ints = (
            seq,
            ph,
            intended,
            d.get("pt", 0),
            d.get("ot", 0),
            d.get("ppt", 0),
            d.get("pot", 0),
            d.get("a", 0),
            d.get("sid", -1),
            d.get("ti", 0),
        )
        sb, rb, uf = d.get("sb", -1), d.get("rb", -1), d.get("uf", "")
        if any(type(v) is not int for v in (*ints, sb, rb)) or any(
            v is not None and type(v) is not int for v in (sent, end, status, d.get("h"))
        ):
            raise TypeError("a time or count is not an integer")
        if type(uf) is not str:
            raise TypeError("uf: expected a string")
        runs = _runs(d.get("ch"))
        urt = d.get("urt", -1)
        if type(urt) is not int:
            raise TypeError("urt: expected an integer")
        cpt = d.get("cpt", -1)
        if type(cpt) is not int:
            raise TypeError("cpt: expected an integer")
        if cpt < 0 and "cpt" in d:  # a negative claim (the engine keeps none): flag it
            uf = "; ".join(x for x in (uf, f"{NEGATIVE}: cached_tokens {cpt}") if x)
            cpt = -1
        deltas = _unpack(d, "c")
        n = 0 if deltas is None else len(deltas)
        k = _unpack(d, "k") if n else None
        if k is not None and len(k) != n:
            raise ValueError("tokens per chunk and stamps differ in length")
        if runs:
            self.runs.append((len(self.rows), runs))
        self.usage_reasoning.append(urt)
        self.cached.append(cpt)
        self.rows.append(d)
        if err is not None:
            self.failed_rows.append(d)
        self.scalars.append(
            (
                seq,
                ph,
                intended,
                -1 if sent is None else sent,
                -1 if end is None else end,
                err is None and sent is not None,
                bool(d.get("r")),
                ints[3],
                ints[4],
                ints[5],
                ints[6],
                bool(d.get("u")),
                n,
                ints[7],
                ints[8],
                ints[9],
                sb,
                rb,
            )
        )
        self.usage_flag.append(uf)
        self.error_class.append(
            None
            if err is None
            else f"http_{status}"
            if err == ErrorKind.HTTP_STATUS.value and status is not None
            else err
        )
        if deltas is not None and n:
            self.deltas.append(deltas)
            if k is not None:
                self.tokens.append(k)
            else:
                self.tokens.append(np.ones(n, dtype=np.int64))

    def columns(self) -> Columns:
        """Columns in (seq, attempt) order, as `Columns.of(records)` would build them."""
        n = len(self.scalars)
        if n:
            cols = [np.array(col) for col in zip(*self.scalars, strict=True)]
        else:
            cols = [np.zeros(0, dtype=np.int64)] * 18
        (
            seq,
            ph,
            intended,
            sent,
            end,
            ok,
            retried,
            pt,
            ot,
            ppt,
            pot,
            upc,
            n_chunks,
            attempt,
            sid,
            turn,
            sb,
            rb,
        ) = cols
        deltas = (
            np.concatenate(self.deltas).astype(np.int64) if self.deltas else np.zeros(0, np.int64)
        )
        tokens = (
            np.concatenate(self.tokens).astype(np.int64) if self.tokens else np.zeros(0, np.int64)
        )
        n_chunks = n_chunks.astype(np.int64)
        starts = np.zeros(n, dtype=np.int64)
        if n:
            starts[1:] = np.cumsum(n_chunks)[:-1]
        # stamps = intended + running sum of the record's deltas, as one cumsum over all records
        # (int64 wrap-around cancels in the subtraction)
        cs = np.cumsum(deltas)
        before = np.where(starts > 0, cs[np.maximum(starts - 1, 0)] if len(cs) else 0, 0)
        stamps = cs + np.repeat(intended.astype(np.int64) - before, n_chunks)
        channel: np.ndarray | None = None
        if self.runs:  # all answer where no record had runs
            channel = np.zeros(len(stamps), dtype=np.int8)
            for row, runs in self.runs:
                s0, k = int(starts[row]), int(n_chunks[row])
                channel[s0 : s0 + k] = chunk_channels(runs, k)
        urt = np.array(self.usage_reasoning, dtype=np.int64)
        cpt = np.array(self.cached, dtype=np.int64)
        error_class, usage_flag = self.error_class, self.usage_flag
        order = np.lexsort((attempt, seq)) if n else np.zeros(0, dtype=np.int64)
        if n and not (order == np.arange(n)).all():
            new_n = n_chunks[order]
            new_starts = np.zeros(n, dtype=np.int64)
            new_starts[1:] = np.cumsum(new_n)[:-1]
            idx = np.repeat(starts[order] - new_starts, new_n) + np.arange(len(stamps))
            stamps, tokens = stamps[idx], tokens[idx]
            if channel is not None:
                channel = channel[idx]
            urt, cpt = urt[order], cpt[order]
            seq, ph, intended, sent, end, ok, retried, pt, ot, ppt, pot, upc, sid, turn, sb, rb = (
                a[order]
                for a in (
                    seq,
                    ph,
                    intended,
                    sent,
                    end,
                    ok,
                    retried,
                    pt,
                    ot,
                    ppt,
                    pot,
                    upc,
                    sid,
                    turn,
                    sb,
                    rb,
                )
            )
            n_chunks, starts = new_n, new_starts
            error_class = [error_class[i] for i in order.tolist()]
            usage_flag = [usage_flag[i] for i in order.tolist()]
        i64 = np.int64
        return Columns(
            seq=seq.astype(i64),
            phase=ph.astype(i64),
            intended=intended.astype(i64),
            sent=sent.astype(i64),
            end=end.astype(i64),
            ok=ok.astype(bool),
            retried=retried.astype(bool),
            prompt_tokens=pt.astype(i64),
            output_tokens=ot.astype(i64),
            planned_prompt=ppt.astype(i64),
            planned_output=pot.astype(i64),
            usage_per_chunk=upc.astype(bool),
            error_class=error_class,
            n_chunks=n_chunks,
            chunk_start=starts,
            stamps=stamps,
            tokens=tokens,
            session=sid.astype(i64),
            turn=turn.astype(i64),
            usage_flag=usage_flag,
            channel=channel,
            usage_reasoning=urt if n and (urt >= 0).any() else None,
            cached=cpt if n and (cpt >= 0).any() else None,
        ).vetted(rb.astype(i64), sb.astype(i64))


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """What the result says about a failure: its class, the server's words, its Retry-After."""

    seq: int
    attempt: int
    phase: int
    retried: bool
    error_class: str
    detail: str
    retry_after_s: float | None


class Journal:
    """A journal read back: header, events, end line, and the records -- as `Columns` (built
    while reading) and, on first use of `records`, as Record objects."""

    def __init__(
        self,
        header: dict[str, Any],
        records: list[Record] | None = None,
        events: dict[str, list[dict[str, Any]]] | None = None,
        end: dict[str, Any] | None = None,
        torn_lines: int = 0,
    ) -> None:
        """`records`: a journal made from Records in memory (tests, tools); `read_journal`
        fills the columnar builder instead."""
        self.header = header
        self.events: dict[str, list[dict[str, Any]]] = events if events is not None else {}
        self.end = end
        self.torn_lines = torn_lines
        self.duplicate_lines = 0  # repeated records and event lines, read once (read_journal)
        self.header_line = 0  # the header's line in the file (read_journal)
        self._builder = _ColumnBuilder()
        self._records = records
        self._columns: Columns | None = None

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            self._records = [decode_record(d) for d in self._builder.rows]
        return self._records

    def failed_attempts(self) -> list[FailedAttempt]:
        """Every failed attempt (retried ones too) with the server's message and Retry-After,
        in (seq, attempt) order; read from the journal lines without building Records."""
        if self._records is not None and not self._builder.rows:
            out = [
                FailedAttempt(
                    r.seq,
                    r.attempt,
                    r.phase,
                    r.retried,
                    r.error_class or "",
                    r.error_detail,
                    r.retry_after_s,
                )
                for r in self._records
                if r.error is not None
            ]
        else:
            out = []
            for d in self._builder.failed_rows:
                err = d["err"]
                st = d.get("st")
                cls = f"http_{st}" if err == ErrorKind.HTTP_STATUS.value and st is not None else err
                ra = d.get("ra")
                out.append(
                    FailedAttempt(
                        d["seq"],
                        d.get("a", 0),
                        d["ph"],
                        bool(d.get("r")),
                        cls,
                        str(d.get("msg", "")),
                        float(ra) if isinstance(ra, int | float) else None,
                    )
                )
        out.sort(key=lambda f: (f.seq, f.attempt))
        return out

    def columns(self) -> Columns:
        """The records as Columns in (seq, attempt) order; equal to `Columns.of(self.records)`."""
        if self._columns is None:
            if self._records is not None and not self._builder.rows:
                self._columns = Columns.of(self._records)
            else:
                self._columns = self._builder.columns()
        return self._columns


def _lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from f


def read_journal(path: Path) -> Journal:
    """Read a journal back. A torn or damaged record or end line (the tail of a killed run, a
    hand edit) is skipped and counted; a repeated record (seq, attempt) or event line is read
    once and counted. Raises JournalError (a ValueError) when there is no header or a header key
    has the wrong kind (`check_header` asks for all of them), OSError when the file cannot be read."""
    header: dict[str, Any] | None = None
    header_line = 0
    j = Journal(header={})
    add = j._builder.add
    seen: set[tuple[Any, Any]] = set()  # (seq, attempt) of the records read
    seen_events: set[bytes] = set()
    for lineno, line in enumerate(_lines(path), 1):
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError:
            j.torn_lines += 1
            continue
        kind = d.get("t") if isinstance(d, dict) else None
        if kind == "rec":
            key = (d.get("seq"), d.get("a", 0))
            if key in seen and isinstance(key[0], int):
                j.duplicate_lines += 1
                continue
            try:
                add(d)
            except (KeyError, TypeError, ValueError, binascii.Error):  # damaged: skipped, counted
                j.torn_lines += 1
                continue
            seen.add(key)
        elif kind == "header":
            if header is None:
                header, header_line = d, lineno
            elif d != header:
                raise JournalError(
                    f"{path}:{lineno}: a second, different header (the first is line "
                    f"{header_line}): two journals joined? Give each its own file"
                )
            else:
                j.duplicate_lines += 1
        elif kind == "end":
            if _end_ok(d):
                j.end = d
            else:
                j.torn_lines += 1
        elif isinstance(kind, str):
            raw = line.rstrip(b"\r\n")
            if raw in seen_events:
                j.duplicate_lines += 1
                continue
            seen_events.add(raw)
            j.events.setdefault(kind, []).append(d)
    if header is None:
        raise JournalError(f"{path}: not a harness journal (no header line)")
    problem = header_problem(header, complete=False)
    if problem is not None:
        raise JournalError(f"{path}:{header_line}: header: {problem[0]}: {problem[1]}")
    j.header, j.header_line = header, header_line
    return j


def check_header(j: Journal, path: Path) -> None:
    """Raise JournalError unless the journal's header holds everything a result is built from
    (`report JOURNAL` rebuilds one: harness.analysis.result.rebuild_result)."""
    problem = header_problem(j.header)
    if problem is not None:
        raise JournalError(f"{path}:{j.header_line}: header: {problem[0]}: {problem[1]}")


JOURNAL_SUFFIX = ".journal.jsonl"


def journal_path_for(out: Path) -> Path:
    """The journal sits next to the result, sharing its stem: r.json -> r.journal.jsonl."""
    name = out.name
    stem = name[: -len(".json")] if name.endswith(".json") else out.stem
    return out.with_name(stem + JOURNAL_SUFFIX)


def find_journal(result: dict[str, Any], result_path: Path | None) -> Path | None:
    """The journal of a result: the one next to the result file first (a results folder is
    often moved or copied whole, leaving the recorded path stale), else the path the result
    recorded (`files.journal`). None when neither is a file."""
    candidates = [journal_path_for(result_path)] if result_path is not None else []
    recorded = (result.get("files") or {}).get("journal")
    if recorded:
        candidates.append(Path(recorded))
    return next((c for c in candidates if c.is_file()), None)
