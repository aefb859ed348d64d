"""Server-reported counts are data, never sizes: `vet_counts` believes a count only when the
request could have it, the columns built from records or from a journal apply the same rule
(vectorised), and a journal holding an absurd count -- written before the rule, or by hand --
rebuilds without allocating by it."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.analysis.result import build_result
from harness.client.sse import MAX_PENDING_BYTES
from harness.record.journal import encode_record, read_journal
from harness.record.metrics import Columns, token_gaps_ns
from harness.record.records import Record
from harness.record.usage import (
    MAX_COUNT,
    PROMPT_TEMPLATE_TOKENS,
    completion_limit,
    flag_reasons,
    stream_bytes_bound,
    vet_counts,
)

MS = 1_000_000


def vet(out: int, chunks: list[int], max_tokens: int = 64, prompt: int = 10, **kw: object):
    return vet_counts(
        output_tokens=out,
        prompt_tokens=prompt,
        n_events=len(chunks),
        chunk_sum=sum(chunks),
        max_tokens=max_tokens,
        received_bytes=kw.get("received", 100_000),  # type: ignore[arg-type]
        request_bytes=kw.get("sent", 1_000),  # type: ignore[arg-type]
        flags=kw.get("flags", ()),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("out", "chunks", "prompt", "kw", "reasons", "want_out", "want_prompt"),
    [
        (64, [1] * 64, 10, {}, [], 64, 10),  # what was asked: believed
        (80, [1] * 64, 10, {}, [], 80, 10),  # past max_tokens 64, within the margin of 16
        (81, [1] * 64, 10, {}, ["over_max_tokens"], 64, 10),  # past the margin: own count
        (10**12, [1, 10**12 - 1], 10, {}, ["over_max_tokens"], 2, 10),  # the count
        (5, [1, 10**12], 10, {}, ["over_max_tokens"], 2, 10),  # huge per-chunk, small final
        (-1, [1, 1], 10, {}, ["negative"], 2, 10),
        (30, [10, 10, 10], 10, {"received": 20}, ["over_bytes"], 3, 10),  # 30 tokens, 20 bytes
        (3, [1, 1, 1], 10, {"received": 2}, [], 3, 10),  # the client's own count: not vetted
        (200, [1] * 200, 10, {}, [], 200, 10),  # own count past max_tokens: not a claim
        (5, [1] * 5, 100 + PROMPT_TEMPLATE_TOKENS, {"sent": 100}, [], 5, 4196),  # at its bound
        (5, [1] * 5, 100 + PROMPT_TEMPLATE_TOKENS + 1, {"sent": 100}, ["over_bytes"], 5, 0),
        (5, [1] * 5, -2, {}, ["negative"], 5, 0),  # a negative prompt count
        (5, [5], 10, {"flags": ("not_integer: completion_tokens 1.5",)}, ["not_integer"], 1, 10),
        (5, [5], 0, {"flags": ("not_integer: prompt_tokens '3'",)}, ["not_integer"], 5, 0),
        (10**12, [5], 10, {"max_tokens": 0, "received": None}, [], 10**12, 10),  # no bound known
        (500, [5], 10, {"max_tokens": 0}, [], 500, 10),  # max_tokens unknown: bytes bound only
        (500, [5], 10, {"max_tokens": 0, "received": 400}, ["over_bytes"], 1, 10),
    ],
)
def test_vet_counts(out, chunks, prompt, kw, reasons, want_out, want_prompt) -> None:
    max_tokens = int(kw.pop("max_tokens", 64))
    v = vet(out, chunks, max_tokens, prompt, **kw)
    assert flag_reasons(v.flag) == reasons
    assert v.output_tokens == want_out
    assert v.prompt_tokens == want_prompt
    assert v.own_chunks == ("completion_tokens" in v.flag)


def test_a_stream_may_carry_the_largest_event_the_splitter_takes() -> None:
    # the stream's byte bound never cuts what the SSE splitter's own cap would let through
    assert stream_bytes_bound(0) > MAX_PENDING_BYTES + 512 * 1024
    # 16 KiB per token of the limit; the margin is half of max_tokens, at least 1, at most 16
    assert stream_bytes_bound(200) - stream_bytes_bound(100) == 100 * 16 * 1024
    assert [completion_limit(m) for m in (0, 1, 4, 8, 32, 100)] == [1, 2, 6, 12, 48, 116]


def rec(seq: int, out: int, tokens: tuple[int, ...], planned: int = 8, **kw: object) -> Record:
    stamps = tuple(100 * MS + i * 10 * MS for i in range(len(tokens)))
    return Record(
        seq=seq,
        phase=0,
        intended_ns=0,
        sent_ns=1 * MS,
        chunk_ns=stamps,
        chunk_tokens=tokens,
        end_ns=stamps[-1],
        status=200,
        prompt_tokens=4,
        output_tokens=out,
        planned_prompt_tokens=4,
        planned_output_tokens=planned,
        usage_per_chunk=True,
        **kw,  # type: ignore[arg-type]
    )


def test_columns_vet_a_record_the_engine_did_not() -> None:
    # a record as an older harness wrote it: the server's 10**12 in one chunk
    c = Columns.of([rec(0, 10**12, (1, 10**12 - 1)), rec(1, 8, (1,) * 8)])
    assert c.output_tokens.tolist() == [2, 8]
    assert c.tokens.tolist() == [1] * 10
    assert c.usage_per_chunk.tolist() == [False, True]
    assert c.usage_flag is not None and flag_reasons(c.usage_flag[0]) == ["over_max_tokens"]
    itl, _ = token_gaps_ns(c, np.ones(2, bool))
    assert len(itl) == 1 + 7  # per token of what was believed, no more


ints = st.integers(-5, 200) | st.sampled_from([10**12, MAX_COUNT + 1, 2**62])


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            ints,  # output_tokens
            st.lists(st.integers(1, 40) | st.sampled_from([10**12, 2**60]), min_size=1, max_size=6),
            st.integers(-3, 300),  # prompt_tokens
            st.integers(0, 64),  # planned output
            st.none() | st.integers(0, 500),  # received bytes
            st.none() | st.integers(0, 100),  # request bytes
        ),
        min_size=1,
        max_size=8,
    )
)
def test_vectorised_vetting_is_the_scalar_rule(rows) -> None:
    records = [
        rec(i, out, tuple(toks), planned, received_bytes=rb, request_bytes=sb)
        for i, (out, toks, _, planned, rb, sb) in enumerate(rows)
    ]
    records = [
        Record(**{**{f: getattr(r, f) for f in r.__slots__}, "prompt_tokens": pt})  # type: ignore[attr-defined]
        for r, (_, _, pt, _, _, _) in zip(records, rows, strict=True)
    ]
    c = Columns.of(records)
    for i, r in enumerate(records):
        v = vet_counts(
            output_tokens=r.output_tokens,
            prompt_tokens=r.prompt_tokens,
            n_events=len(r.chunk_tokens),
            chunk_sum=sum(r.chunk_tokens),
            max_tokens=r.planned_output_tokens,
            received_bytes=r.received_bytes,
            request_bytes=r.request_bytes,
        )
        assert c.output_tokens[i] == v.output_tokens
        assert c.prompt_tokens[i] == v.prompt_tokens
        assert c.usage_flag is not None and c.usage_flag[i] == v.flag


def _journal(path: Path, records: list[Record]) -> Path:
    header = {
        "t": "header",
        "version": 2,
        "scenario": {},
        "scenario_name": "s",
        "target": {"kind": "http", "base_url": "http://x", "model": "m", "endpoint": "chat"},
        "environment": {},
        "started_at": "2026-12-01T00:00:00Z",
        "phases": [
            {"name": "main", "warmup": False, "closed": False, "planned_requests": len(records)}
        ],
        "slo": [],
        "plan": {},
    }
    lines = [orjson.dumps(header)] + [orjson.dumps(encode_record(r)) for r in records]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_a_journal_with_a_huge_count_rebuilds_without_allocating_by_it(tmp_path: Path) -> None:
    # the issue: one chunk claiming 10**12 tokens made `report JOURNAL` allocate 21.8 TiB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    path = _journal(
        tmp_path / "r.journal.jsonl",
        [rec(0, 10**12, (1, 10**12 - 1)), rec(1, -7, (1, 1)), rec(2, 8, (1,) * 8)],
    )
    result = build_result(read_journal(path), str(path))
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grew_kib < 256 * 1024
    tok = result["summary"]["tokens"]
    assert tok["usage_rejected"] == {
        "requests": 2,
        "reasons": {"negative": 1, "over_max_tokens": 1},
    }
    assert tok["output_total"] == 2 + 2 + 8  # the client's own counts for the two
    assert result["summary"]["throughput"]["total_tokens_per_s"] >= 0
