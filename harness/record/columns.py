"""`Columns`: a run's Records as one columnar table (parallel numpy arrays, every token stamp
concatenated), the shape every metric in harness.record.metrics and harness.record.counts is
computed over, with each row's server-reported counts vetted (harness.record.usage) as the
table is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from harness.record.records import Record
from harness.record.usage import (
    MAX_COUNT,
    PROMPT_TEMPLATE_TOKENS,
    USAGE_MARGIN_TOKENS,
    vet_counts,
)

NONE = -1  # a stamp or count that is not there
_row_key = attrgetter("seq", "attempt")


@dataclass
class Columns:
    """Records as parallel numpy arrays, plus all token stamps concatenated."""

    seq: np.ndarray
    phase: np.ndarray
    intended: np.ndarray
    sent: np.ndarray  # -1 when never sent
    end: np.ndarray  # -1 when unknown
    ok: np.ndarray  # bool
    retried: np.ndarray  # bool: a failed attempt that was retried
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    planned_prompt: np.ndarray
    planned_output: np.ndarray
    usage_per_chunk: np.ndarray
    error_class: list[str | None]
    n_chunks: np.ndarray
    chunk_start: np.ndarray  # offsets into stamps: request i owns [chunk_start[i], +n_chunks[i])
    stamps: np.ndarray  # every token event stamp, request by request
    tokens: np.ndarray  # tokens carried by each event
    session: np.ndarray | None = None  # multi-turn: session id per request (-1: none); None: all -1
    turn: np.ndarray | None = None  # multi-turn: turn index per request; None: all 0
    usage_flag: list[str] | None = None  # the usage counts not believed (harness.record.usage)
    channel: np.ndarray | None = None  # int8 Channel per stamp; None: every event an answer
    usage_reasoning: np.ndarray | None = None  # usage's reasoning_tokens per request (-1: none)
    cached: np.ndarray | None = None  # usage's cached prompt tokens per request (-1: none)

    @property
    def n(self) -> int:
        return len(self.seq)

    @classmethod
    def of(cls, records: Sequence[Record]) -> Columns:
        """Rows in (seq, attempt) order, whatever order the records came in (worker processes
        journal in arrival order), so every float sum -- and so the result -- is order-free."""
        records = sorted(records, key=_row_key)
        n = len(records)
        n_chunks = np.fromiter((len(r.chunk_ns) for r in records), dtype=np.int64, count=n)
        total = int(n_chunks.sum())
        # chain.from_iterable iterates in C: no Python frame per stamp
        stamps = np.fromiter(
            chain.from_iterable(r.chunk_ns for r in records), dtype=np.int64, count=total
        )
        tokens = np.fromiter(
            chain.from_iterable(r.chunk_tokens for r in records), dtype=np.int64, count=total
        )
        starts = np.zeros(n, dtype=np.int64)
        if n:
            starts[1:] = np.cumsum(n_chunks)[:-1]

        def col(f: Any, dtype: Any = np.int64) -> np.ndarray:
            return np.fromiter((f(r) for r in records), dtype=dtype, count=n)

        return cls(
            seq=col(lambda r: r.seq),
            phase=col(lambda r: r.phase),
            intended=col(lambda r: r.intended_ns),
            sent=col(lambda r: NONE if r.sent_ns is None else r.sent_ns),
            end=col(lambda r: NONE if r.end_ns is None else r.end_ns),
            ok=col(lambda r: r.ok, bool),
            retried=col(lambda r: r.retried, bool),
            prompt_tokens=col(lambda r: r.prompt_tokens),
            output_tokens=col(lambda r: r.output_tokens),
            planned_prompt=col(lambda r: r.planned_prompt_tokens),
            planned_output=col(lambda r: r.planned_output_tokens),
            usage_per_chunk=col(lambda r: r.usage_per_chunk, bool),
            error_class=[r.error_class for r in records],
            n_chunks=n_chunks,
            chunk_start=starts,
            stamps=stamps,
            tokens=tokens,
            session=col(lambda r: NONE if r.session_id is None else r.session_id),
            turn=col(lambda r: r.turn_index),
            usage_flag=[r.usage_flag for r in records],
            channel=np.fromiter(
                chain.from_iterable(r.channels for r in records), dtype=np.int8, count=total
            )
            if any(r.channel_runs for r in records)
            else None,
            usage_reasoning=col(
                lambda r: NONE if r.usage_reasoning_tokens is None else r.usage_reasoning_tokens
            )
            if any(r.usage_reasoning_tokens is not None for r in records)
            else None,
            cached=col(lambda r: NONE if r.cached_tokens is None else r.cached_tokens)
            if any(r.cached_tokens is not None for r in records)
            else None,
        ).vetted(
            col(lambda r: NONE if r.received_bytes is None else r.received_bytes),
            col(lambda r: NONE if r.request_bytes is None else r.request_bytes),
        )

    def vetted(self, received_bytes: np.ndarray, request_bytes: np.ndarray) -> Columns:
        """These columns with every row's usage counts vetted (`harness.record.usage.vet_counts`,
        -1 bytes: unknown): a count not believed is replaced (completion: one token per event;
        prompt: 0) and named in `usage_flag`. The rows it could change are picked vectorised; a
        journal whose records the engine vetted already comes back unchanged. Changes the arrays
        in place; returns self."""
        n = self.n
        if n == 0:
            return self
        has = self.n_chunks > 0
        kmax = np.zeros(n, dtype=np.int64)
        if has.any():
            kmax[has] = np.maximum.reduceat(self.tokens, self.chunk_start[has])
        ksum = chunk_token_sums(self)
        ot, pt = self.output_tokens, self.prompt_tokens
        planned = self.planned_output
        margin = np.clip(planned // 2, 1, USAGE_MARGIN_TOKENS)  # usage.usage_margin
        limit = np.where(planned > 0, planned + margin, MAX_COUNT)
        # a sum of counts beyond the limit may wrap around: the largest count stands for it
        ksum = np.where(kmax > limit, kmax, ksum)
        own = (ot == self.n_chunks) & (ksum == self.n_chunks)
        claimed = np.maximum(ot, ksum)
        suspect = ~own & (
            (ot < 0)
            | (claimed > limit)
            | ((received_bytes >= 0) & (claimed > np.maximum(received_bytes, self.n_chunks)))
        )
        suspect |= (pt < 0) | (
            pt > np.where(request_bytes >= 0, request_bytes + PROMPT_TEMPLATE_TOKENS, MAX_COUNT)
        )
        cached = self.cached
        if cached is not None:  # a cached count above its prompt's (or negative: -1 is none)
            suspect |= (cached < NONE) | (cached > pt)
        rows = np.flatnonzero(suspect)
        if not len(rows):
            return self
        flags = self.usage_flag if self.usage_flag is not None else [""] * n
        for i in rows.tolist():
            rb, sb = int(received_bytes[i]), int(request_bytes[i])
            start, events = int(self.chunk_start[i]), int(self.n_chunks[i])
            v = vet_counts(
                output_tokens=int(ot[i]),
                prompt_tokens=int(pt[i]),
                n_events=events,
                chunk_sum=sum(self.tokens[start : start + events].tolist()),  # exact: no wrap
                max_tokens=int(self.planned_output[i]),
                received_bytes=rb if rb >= 0 else None,
                request_bytes=sb if sb >= 0 else None,
                flags=flags[i].split("; ") if flags[i] else (),
                cached_tokens=None if cached is None or cached[i] == NONE else int(cached[i]),
            )
            ot[i], pt[i], flags[i] = v.output_tokens, v.prompt_tokens, v.flag
            if cached is not None:
                cached[i] = NONE if v.cached_tokens is None else v.cached_tokens
            if v.own_chunks:
                self.usage_per_chunk[i] = False
                self.tokens[start : start + events] = 1
        self.usage_flag = flags
        return self

    def first(self) -> np.ndarray:
        """First token stamp per request (-1 where none)."""
        out = np.full(self.n, NONE, dtype=np.int64)
        has = self.n_chunks > 0
        out[has] = self.stamps[self.chunk_start[has]]
        return out

    def last(self) -> np.ndarray:
        out = np.full(self.n, NONE, dtype=np.int64)
        has = self.n_chunks > 0
        out[has] = self.stamps[self.chunk_start[has] + self.n_chunks[has] - 1]
        return out

    def owner(self) -> np.ndarray:
        """For each stamp, the index of the request it belongs to."""
        return np.repeat(np.arange(self.n), self.n_chunks)


def chunk_token_sums(c: Columns) -> np.ndarray:
    """Per request, the tokens its events carry (sum of chunk_tokens)."""
    out = np.zeros(c.n, dtype=np.int64)
    has = c.n_chunks > 0
    if has.any():  # a request's events run from its start to the next non-empty request's
        out[has] = np.add.reduceat(c.tokens, c.chunk_start[has])
    return out
