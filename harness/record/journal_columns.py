"""Journal record lines turned into `Columns` while reading: one Python object per record, none
per token stamp.

`ColumnBuilder.add` takes one decoded `"rec"` line and refuses a damaged one (KeyError,
TypeError, ValueError) before appending anything; `columns()` builds the arrays in (seq,
attempt) order, as `Columns.of(records)` would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.record.journal_codec import _runs, _unpack
from harness.record.metrics import Columns
from harness.record.records import ErrorKind, chunk_channels
from harness.record.usage import NEGATIVE

_ERROR_VALUES = frozenset(e.value for e in ErrorKind)
# The per-record scalar columns, in the order of each tuple in ColumnBuilder.scalars.
SCALARS = (
    "seq",
    "phase",
    "intended",
    "sent",
    "end",
    "ok",
    "retried",
    "prompt_tokens",
    "output_tokens",
    "planned_prompt",
    "planned_output",
    "usage_per_chunk",
    "n_chunks",
    "attempt",
    "session",
    "turn",
    "request_bytes",
    "received_bytes",
)
_BOOLS = frozenset({"ok", "retried", "usage_per_chunk"})


def _int_or_flag(d: dict[str, Any], key: str, uf: str) -> tuple[int, str]:
    """An optional count (-1: not sent); a negative cached-token claim is flagged and dropped."""
    v = d.get(key, -1)
    if type(v) is not int:
        raise TypeError(f"{key}: expected an integer")
    if key == "cpt" and v < 0 and "cpt" in d:  # a negative claim (the engine keeps none)
        uf = "; ".join(x for x in (uf, f"{NEGATIVE}: cached_tokens {v}") if x)
        v = -1
    return v, uf


def _parse(d: dict[str, Any]) -> dict[str, Any]:
    """One record line's values, checked; raises KeyError/TypeError/ValueError when damaged."""
    seq, ph, intended = d["seq"], d["ph"], d["i"]
    sent, end, status = d.get("s"), d.get("e"), d.get("st")
    err = d.get("err")
    if err is not None and err not in _ERROR_VALUES:
        raise ValueError(f"unknown error kind {err!r}")
    counts = (d.get("pt", 0), d.get("ot", 0), d.get("ppt", 0), d.get("pot", 0))
    ids = (d.get("a", 0), d.get("sid", -1), d.get("ti", 0))
    sb, rb, uf = d.get("sb", -1), d.get("rb", -1), d.get("uf", "")
    if any(type(v) is not int for v in (seq, ph, intended, *counts, *ids, sb, rb)) or any(
        v is not None and type(v) is not int for v in (sent, end, status, d.get("h"))
    ):
        raise TypeError("a time or count is not an integer")
    if type(uf) is not str:
        raise TypeError("uf: expected a string")
    runs = _runs(d.get("ch"))
    urt, uf = _int_or_flag(d, "urt", uf)
    cpt, uf = _int_or_flag(d, "cpt", uf)
    deltas = _unpack(d, "c")
    n = 0 if deltas is None else len(deltas)
    k = _unpack(d, "k") if n else None
    if k is not None and len(k) != n:
        raise ValueError("tokens per chunk and stamps differ in length")
    scalars = (
        (seq, ph, intended, -1 if sent is None else sent, -1 if end is None else end)
        + (err is None and sent is not None, bool(d.get("r")))
        + (*counts, bool(d.get("u")), n, *ids, sb, rb)
    )
    error_class = (
        None
        if err is None
        else f"http_{status}"
        if err == ErrorKind.HTTP_STATUS.value and status is not None
        else err
    )
    return {
        "scalars": scalars,
        "runs": runs,
        "urt": urt,
        "cpt": cpt,
        "uf": uf,
        "deltas": deltas if n else None,
        "tokens": k,
        "error_class": error_class,
    }


class ColumnBuilder:
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
        p = _parse(d)
        if p["runs"]:
            self.runs.append((len(self.rows), p["runs"]))
        self.usage_reasoning.append(p["urt"])
        self.cached.append(p["cpt"])
        self.rows.append(d)
        if p["error_class"] is not None:
            self.failed_rows.append(d)
        self.scalars.append(p["scalars"])
        self.usage_flag.append(p["uf"])
        self.error_class.append(p["error_class"])
        deltas = p["deltas"]
        if deltas is not None:
            self.deltas.append(deltas)
            k = p["tokens"]
            self.tokens.append(k if k is not None else np.ones(len(deltas), dtype=np.int64))

    def _scalar_columns(self) -> dict[str, np.ndarray]:
        n = len(self.scalars)
        if n:
            arrays = [np.array(col) for col in zip(*self.scalars, strict=True)]
        else:
            arrays = [np.zeros(0, dtype=np.int64)] * len(SCALARS)
        return {
            name: a.astype(bool if name in _BOOLS else np.int64)
            for name, a in zip(SCALARS, arrays, strict=True)
        }

    def _stamps(self, intended: np.ndarray, n_chunks: np.ndarray) -> tuple[Any, ...]:
        """(stamps, tokens, chunk starts, channel per stamp or None), in the rows' order."""
        deltas = (
            np.concatenate(self.deltas).astype(np.int64) if self.deltas else np.zeros(0, np.int64)
        )
        tokens = (
            np.concatenate(self.tokens).astype(np.int64) if self.tokens else np.zeros(0, np.int64)
        )
        starts = np.zeros(len(n_chunks), dtype=np.int64)
        if len(n_chunks):
            starts[1:] = np.cumsum(n_chunks)[:-1]
        # stamps = intended + running sum of the record's deltas, as one cumsum over all records
        # (int64 wrap-around cancels in the subtraction)
        cs = np.cumsum(deltas)
        before = np.where(starts > 0, cs[np.maximum(starts - 1, 0)] if len(cs) else 0, 0)
        stamps = cs + np.repeat(intended - before, n_chunks)
        channel: np.ndarray | None = None
        if self.runs:  # all answer where no record had runs
            channel = np.zeros(len(stamps), dtype=np.int8)
            for row, runs in self.runs:
                s0, k = int(starts[row]), int(n_chunks[row])
                channel[s0 : s0 + k] = chunk_channels(runs, k)
        return stamps, tokens, starts, channel

    def columns(self) -> Columns:
        """Columns in (seq, attempt) order, as `Columns.of(records)` would build them."""
        col = self._scalar_columns()
        n = len(self.scalars)
        stamps, tokens, starts, channel = self._stamps(col["intended"], col["n_chunks"])
        urt = np.array(self.usage_reasoning, dtype=np.int64)
        cpt = np.array(self.cached, dtype=np.int64)
        error_class, usage_flag = self.error_class, self.usage_flag
        order = np.lexsort((col["attempt"], col["seq"])) if n else np.zeros(0, dtype=np.int64)
        if n and not (order == np.arange(n)).all():
            new_n = col["n_chunks"][order]
            new_starts = np.zeros(n, dtype=np.int64)
            new_starts[1:] = np.cumsum(new_n)[:-1]
            idx = np.repeat(starts[order] - new_starts, new_n) + np.arange(len(stamps))
            stamps, tokens = stamps[idx], tokens[idx]
            if channel is not None:
                channel = channel[idx]
            urt, cpt = urt[order], cpt[order]
            col = {name: a[order] for name, a in col.items()}
            starts = new_starts
            error_class = [error_class[i] for i in order.tolist()]
            usage_flag = [usage_flag[i] for i in order.tolist()]
        sent_bytes, received = col.pop("request_bytes"), col.pop("received_bytes")
        del col["attempt"]
        return Columns(
            **col,
            error_class=error_class,
            chunk_start=starts,
            stamps=stamps,
            tokens=tokens,
            usage_flag=usage_flag,
            channel=channel,
            usage_reasoning=urt if n and (urt >= 0).any() else None,
            cached=cpt if n and (cpt >= 0).any() else None,
        ).vetted(received, sent_bytes)


__all__ = ["SCALARS", "ColumnBuilder"]
