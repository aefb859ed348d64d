"""Metric definitions on hand-made records with known answers."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from harness.catalogue import SloLimit
from harness.record import hist
from harness.record.metrics import (
    Columns,
    exact_stats_ms,
    latency_stats,
    meets_per_request_slos,
    per_request_values_ns,
    request_counts,
    timeseries,
    token_gaps_ns,
    window_throughput,
)
from harness.record.records import ErrorKind, Record

MS = 1_000_000


def rec(
    seq=0,
    intended=0,
    sent=0,
    chunks=(),
    tokens=None,
    out=None,
    error=None,
    status=200,
    phase=0,
    **kw,
):
    tokens = tokens if tokens is not None else (1,) * len(chunks)
    return Record(
        seq,
        phase,
        intended,
        sent,
        sent,
        tuple(chunks),
        tuple(tokens),
        chunks[-1] if chunks else sent,
        status,
        error,
        "",
        kw.pop("prompt", 10),
        out if out is not None else sum(tokens),
        **kw,
    )


def test_record_properties():
    r = rec(intended=0, sent=5 * MS, chunks=(105 * MS, 115 * MS, 125 * MS))
    assert r.ttft_ns == 100 * MS
    assert r.ttft_from_schedule_ns == 105 * MS
    assert r.e2e_ns == 120 * MS
    assert r.e2e_from_schedule_ns == 125 * MS
    assert r.send_lag_ns == 5 * MS
    assert (
        dataclasses.replace(r, attempt=1).send_lag_ns is None
    )  # a retry's late send is its backoff
    assert r.tpot_ns == pytest.approx(10 * MS)
    assert r.ok and r.error_class is None
    bad = rec(error=ErrorKind.HTTP_STATUS, status=429)
    assert bad.error_class == "http_429" and not bad.ok


def test_itl_spreads_a_multi_token_chunk_over_its_tokens():
    # gaps: 10 ms carrying 1 token, then 30 ms carrying 3 tokens -> ITL samples 10, 10, 10, 10
    r = rec(chunks=(100 * MS, 110 * MS, 140 * MS), tokens=(1, 1, 3))
    c = Columns.of([r])
    itl, inter = token_gaps_ns(c, np.ones(1, bool))
    assert itl.tolist() == [10 * MS] * 4
    assert inter.tolist() == [10 * MS, 30 * MS]
    assert per_request_values_ns(c)["tpot"][0] == pytest.approx(40 * MS / 4)


def test_gaps_never_cross_requests_and_skip_failures():
    a = rec(seq=0, chunks=(10 * MS, 20 * MS))
    b = rec(seq=1, chunks=(500 * MS, 530 * MS))
    bad = rec(seq=2, chunks=(1 * MS, 900 * MS), error=ErrorKind.STREAM_CUT)
    c = Columns.of([a, b, bad])
    itl, _ = token_gaps_ns(c, np.ones(3, bool))
    assert sorted(itl.tolist()) == [10 * MS, 30 * MS]


def test_stats_known_answer():
    values = np.arange(1, 101, dtype=np.float64) * MS  # 1..100 ms
    s = exact_stats_ms(values)
    assert s["count"] == 100 and s["mean"] == pytest.approx(50.5)
    assert s["p50"] == 50 and s["p90"] == 90 and s["p99"] == 99 and s["max"] == 100
    assert exact_stats_ms(np.array([np.nan]))["count"] == 0


def test_latency_stats_match_hdr_within_precision():
    rng = np.random.default_rng(0)
    recs = []
    for i in range(300):
        sent = i * 10 * MS
        first = sent + int(rng.uniform(50, 400) * MS)
        gaps = np.cumsum(rng.uniform(5, 40, size=20) * MS).astype(np.int64)
        recs.append(rec(seq=i, intended=sent, sent=sent, chunks=(first, *(first + gaps).tolist())))
    c = Columns.of(recs)
    rows = np.ones(c.n, bool)
    exact = latency_stats(c, rows)
    from harness.record.metrics import latency_histograms

    hdr = {k: hist.stats_ms(h) for k, h in latency_histograms(c, rows).items()}
    for metric in ("ttft", "itl", "e2e", "tpot"):
        for q in ("p50", "p99", "max"):
            assert hdr[metric][q] == pytest.approx(exact[metric][q], rel=2e-3), (metric, q)


def test_shuffle_invariance():
    recs = [
        rec(seq=i, intended=i * MS, sent=i * MS + 1000, chunks=(i * MS + 50 * MS, i * MS + 70 * MS))
        for i in range(50)
    ]
    recs.append(rec(seq=99, error=ErrorKind.TIMEOUT_IDLE))
    shuffled = recs[:]
    random.Random(1).shuffle(shuffled)
    rows = lambda c: np.ones(c.n, bool)  # noqa: E731
    a, b = Columns.of(recs), Columns.of(shuffled)
    assert latency_stats(a, rows(a)) == latency_stats(b, rows(b))
    assert request_counts(a, rows(a)) == request_counts(b, rows(b))


def test_throughput_counts_inside_the_window():
    # 2 requests, 10 tokens each, all tokens within [0, 1 s); one request ends after the window.
    a = rec(seq=0, chunks=tuple(range(100 * MS, 200 * MS, 10 * MS)), prompt=100)
    b = rec(seq=1, chunks=tuple(range(900 * MS, 1100 * MS, 20 * MS)), prompt=100)
    c = Columns.of([a, b])
    good = np.ones(2, bool)
    t = window_throughput(c, [(0, 1000 * MS)], good)
    assert t["window_s"] == 1.0
    assert t["requests_per_s"] == 1.0  # only a finished inside
    assert t["output_tokens_per_s"] == 10 + 5  # b's stamps at 900..980 ms are inside
    assert t["total_tokens_per_s"] == 15 + 100


def test_goodput_uses_per_request_slos():
    fast = rec(seq=0, sent=0, chunks=(100 * MS, 110 * MS))
    slow = rec(seq=1, sent=0, chunks=(3000 * MS, 3010 * MS))
    c = Columns.of([fast, slow])
    slos = [SloLimit("ttft", "ttft", None, 1.0)]
    assert meets_per_request_slos(c, slos).tolist() == [True, False]
    t = window_throughput(c, [(0, 4000 * MS)], meets_per_request_slos(c, slos))
    assert t["goodput_requests_per_s"] == pytest.approx(0.25) and t["requests_per_s"] == 0.5


def test_request_counts_and_retries():
    recs = [
        rec(seq=0, chunks=(5,)),
        rec(seq=1, error=ErrorKind.HTTP_STATUS, status=429, retried=True),
        rec(seq=1, chunks=(9,), attempt=1),
        rec(seq=2, error=ErrorKind.HTTP_STATUS, status=500),
        Record(3, 0, 0, None, error=ErrorKind.NOT_SENT),
    ]
    c = Columns.of(recs)
    counts, errors = request_counts(c, np.ones(c.n, bool))
    assert counts == {
        "planned_or_due": 4,
        "sent": 3,
        "completed": 2,
        "failed": 1,
        "not_sent": 1,
        "retried_attempts": 1,
    }
    assert errors == {"http_500": 1, "not_sent": 1}


def test_timeseries():
    recs = [
        rec(seq=0, intended=0, sent=100 * MS, chunks=(500 * MS, 1500 * MS)),
        rec(
            seq=1,
            intended=1200 * MS,
            sent=1200 * MS,
            chunks=(2500 * MS,),
            error=ErrorKind.STREAM_CUT,
        ),
    ]
    ts = timeseries(Columns.of(recs), 3000 * MS)
    assert ts["offered"] == [1, 1, 0] and ts["sent"] == [1, 1, 0]
    assert ts["completed"] == [0, 1, 0] and ts["errors"] == [0, 0, 1]
    assert ts["output_tokens"] == [1, 1, 1]
    assert ts["in_flight"] == [1, 1, 0]
