"""Journal lines <-> Records: a record's line (`"t": "rec"`) encoded and decoded.

Token stamps are delta-encoded (first stamp relative to `intended_ns`, then gaps). Version 2
stores the deltas as base64 of a little-endian int32 array (`"c4"`; `"c8"`: int64 when a delta
exceeds int32, about 2.1 s) and the tokens-per-chunk the same way (`"k4"`/`"k8"`, omitted when
every chunk carried one token), so a reader turns them into numpy arrays with `np.frombuffer`
instead of parsing millions of JSON integers. Version-1 journals (`"c"`/`"k"` JSON lists) are
still read. The other keys are listed in harness.record.journal's docstring.
"""

from __future__ import annotations

import binascii
import sys
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.record.records import Channel, ErrorKind, Record

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
