"""How output tokens are counted when chunks may carry several tokens, planned vs actual
lengths, and send lag measured on a request's first attempt."""

from __future__ import annotations

import numpy as np
import pytest

from harness.record.metrics import (
    Columns,
    latency_stats,
    output_lengths,
    timeseries,
    token_counting,
    token_weights,
    window_throughput,
)
from harness.record.records import ErrorKind, Record

MS = 1_000_000


def rec(seq=0, chunks=(), tokens=None, out=None, prompt=10, per_chunk=False, planned=0, **kw):
    tokens = tokens if tokens is not None else (1,) * len(chunks)
    return Record(
        seq,
        0,
        kw.pop("intended", 0),
        kw.pop("sent", 0),
        0,
        tuple(chunks),
        tuple(tokens),
        chunks[-1] if chunks else 0,
        200,
        kw.pop("error", None),
        "",
        prompt,
        out if out is not None else sum(tokens),
        0,
        planned,
        per_chunk,
        **kw,
    )


ALL = np.ones(1, bool)


@pytest.mark.parametrize(
    ("r", "weights", "source", "itl_per"),
    [
        # per-chunk usage: each chunk its own count; ITL per token
        (
            rec(chunks=(1, 2, 3), tokens=(1, 3, 2), per_chunk=True),
            [1, 3, 2],
            "usage_per_chunk",
            "token",
        ),
        # final usage only, equal to the chunks: one token each, exactly
        (rec(chunks=(1, 2, 3), out=3), [1, 1, 1], "usage", "token"),
        # final usage only, 9 tokens in 3 chunks (a coalescing gateway): spread evenly, ITL per chunk
        (rec(chunks=(1, 2, 3), out=9), [3, 3, 3], "usage", "chunk"),
        # no usage at all: one token per chunk assumed, ITL per chunk
        (rec(chunks=(1, 2, 3), prompt=0), [1, 1, 1], "chunks", "chunk"),
    ],
)
def test_tokens_per_event_and_what_itl_is(
    r: Record, weights: list[float], source: str, itl_per: str
) -> None:
    c = Columns.of([r])
    assert token_weights(c).tolist() == weights
    assert token_counting(c, ALL) == {"output_count_source": source, "itl_per": itl_per}


def test_throughput_counts_the_final_usage_of_a_coalescing_gateway() -> None:
    # 12 tokens in 4 chunks, usage only at the end; a window holding half the chunks holds 6
    c = Columns.of([rec(chunks=(100 * MS, 200 * MS, 600 * MS, 700 * MS), out=12)])
    t = window_throughput(c, [(0, 500 * MS)], c.ok)
    assert t["output_tokens_per_s"] == pytest.approx(6 / 0.5)
    assert sum(timeseries(c, 1000 * MS, step_ns=500 * MS)["output_tokens"]) == 12
    # TPOT uses the 12 tokens: 600 ms over 11 gaps between tokens
    assert latency_stats(c, ALL)["tpot"]["mean"] == pytest.approx(600 / 11)


def test_mixed_sources_and_no_success() -> None:
    c = Columns.of([rec(seq=0, chunks=(1,), per_chunk=True), rec(seq=1, chunks=(1,), out=1)])
    assert token_counting(c, np.ones(2, bool))["output_count_source"] == "mixed"
    failed = Columns.of([rec(error=ErrorKind.HTTP_STATUS)])
    assert token_counting(failed, ALL) == {"output_count_source": None, "itl_per": None}
    assert output_lengths(failed, ALL) is None


def test_planned_against_actual_output_lengths() -> None:
    rs = [rec(seq=i, chunks=(1,), out=n, planned=100) for i, n in enumerate([20, 40, 60, 80, 100])]
    o = output_lengths(Columns.of(rs), np.ones(5, bool))
    assert o["planned_tokens"] == {
        "count": 5,
        "mean": 100.0,
        "min": 100,
        "p50": 100,
        "p90": 100,
        "p99": 100,
        "max": 100,
    }
    assert o["actual_tokens"]["mean"] == 60.0 and o["actual_tokens"]["p50"] == 60
    assert (o["actual_tokens"]["min"], o["actual_tokens"]["max"]) == (20, 100)
    assert o["reached_planned_share"] == pytest.approx(0.2)


def test_send_lag_is_the_first_attempts() -> None:
    # request 0: first sent 1 ms late, a 429, retried 2 s later (the Retry-After): lag 1 ms
    first = rec(
        seq=0, intended=0, sent=1 * MS, error=ErrorKind.HTTP_STATUS, retried=True, retry_after_s=2.0
    )
    final = rec(seq=0, intended=0, sent=2001 * MS, chunks=(2100 * MS,), attempt=1)
    c = Columns.of([final, first])
    lag = latency_stats(c, np.ones(2, bool))["send_lag"]
    assert (lag["count"], lag["max"]) == (1, 1.0)
