"""The steady part of a run: the fill-up left out, served against offered, the same metric code."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.result import build_result
from harness.analysis.steady import (
    FALSE_ALARM,
    FILL_MAX_SHARE,
    NOISE_Z,
    in_flight_noise,
    min_probe_duration_s,
    steady_part,
)
from harness.record.journal import read_journal
from harness.record.metrics import Columns, latency_stats
from harness.record.records import ErrorKind, Record

S = 1_000_000_000
DATA = Path(__file__).resolve().parent.parent / "sim" / "data"


def _records(
    n: int,
    gap_s: float,
    e2e_s: float | callable,  # type: ignore[valid-type]
    failed: Callable[[int], bool] | None = None,
) -> list[Record]:
    """n requests `gap_s` apart, each with 4 tokens spread over its E2E (a float, or a function
    of its index); those whose index `failed` says fail at once with HTTP 500."""
    out = []
    for i in range(n):
        t = int(i * gap_s * S)
        e = e2e_s(i) if callable(e2e_s) else e2e_s
        if failed is not None and failed(i):
            out.append(
                Record(i, 0, t, t, end_ns=t + S // 100, status=500, error=ErrorKind.HTTP_STATUS)
            )
            continue
        stamps = tuple(t + int(e * S * k / 4) for k in (1, 2, 3, 4))
        out.append(
            Record(
                i,
                0,
                t,
                t,
                headers_ns=t,
                chunk_ns=stamps,
                chunk_tokens=(1, 1, 1, 1),
                end_ns=stamps[-1],
                status=200,
                output_tokens=4,
                planned_output_tokens=4,
            )
        )
    return out


def test_a_stable_server_keeps_up_after_its_fill_up() -> None:
    # 10 req/s for 60 s, 2 s each: the first 2 s are the fill-up
    c = Columns.of(_records(600, 0.1, 2.0))
    part = steady_part(c, (0, 60 * S), [0])
    assert part.fill_s == pytest.approx(2.0)
    assert part.window_ns == (2 * S, 60 * S)
    assert part.served_ok and part.served_share == pytest.approx(1.0, abs=0.01)
    assert part.offered_requests_per_s == pytest.approx(10.0, rel=0.01)
    assert part.little_in_flight == pytest.approx(20.0, rel=0.01)  # Little: 10 req/s x 2 s
    assert part.error_share == 0.0
    # the latencies are the metric code's own, over the steady rows only
    assert part.latency_ms == latency_stats(c, part.rows)
    assert not part.rows[:20].any() and part.rows[20:].all()


def test_a_queue_that_grows_is_short_of_what_was_offered() -> None:
    # served one every 0.125 s, offered one every 0.1 s: each request waits 0.025 s more than the last
    c = Columns.of(_records(600, 0.1, lambda i: 0.5 + 0.025 * i))
    part = steady_part(c, (0, 60 * S), [0])
    assert part.fill_s == pytest.approx(
        0.5 + 0.025 * 594, rel=0.01
    )  # the p99 E2E, which keeps growing
    assert not part.served_ok and part.served_share < 0.9
    assert part.served_deficit_requests > part.served_allowance_requests


def test_the_fill_up_is_at_most_half_the_span() -> None:
    c = Columns.of(_records(600, 0.1, lambda i: 0.5 + 0.1 * i))  # E2E up to 60 s: no steady state
    part = steady_part(c, (0, 60 * S), [0])
    assert part.fill_s == pytest.approx(FILL_MAX_SHARE * 60)
    assert not part.served_ok


def test_errors_count_in_the_steady_part_only() -> None:
    # 10 req/s for 60 s, 5 s each: the fill-up is the first 5 s (requests 0-49)
    in_fill = Columns.of(
        _records(600, 0.1, 5.0, failed=lambda i: i < 50)
    )  # 50 of 600 fail, all in it
    part = steady_part(in_fill, (0, 60 * S), [0])
    assert part.fill_s == pytest.approx(5.0) and part.requests == 550
    assert part.error_share == 0.0  # not 50 / 600
    after = Columns.of(
        _records(600, 0.1, 5.0, failed=lambda i: i >= 50 and i % 10 == 0)
    )  # 55, all after
    part = steady_part(after, (0, 60 * S), [0])
    assert part.error_share == pytest.approx(55 / 550)  # not 55 / 600


def test_bursty_arrivals_widen_the_noise_allowed() -> None:
    rng = np.random.default_rng(1)
    gaps = rng.gamma(0.1, 1 / (0.1 * 10), 600)  # 10 req/s, cv^2 = 10
    recs = []
    for i, t in enumerate(np.cumsum(gaps)):
        ti = int(t * S)
        stamps = tuple(ti + k * S // 2 for k in (1, 2))
        recs.append(
            Record(
                i,
                0,
                ti,
                ti,
                chunk_ns=stamps,
                chunk_tokens=(1, 1),
                end_ns=stamps[-1],
                status=200,
                output_tokens=2,
            )
        )
    burst = steady_part(Columns.of(recs), (0, int(np.sum(gaps) * S)), [0])
    smooth = steady_part(Columns.of(_records(600, 0.1, 1.0)), (0, 60 * S), [0])
    assert burst.arrival_cv2 > 5 and smooth.arrival_cv2 < 0.01
    assert burst.served_allowance_requests > smooth.served_allowance_requests


@pytest.mark.parametrize(
    ("rate", "p99", "mean", "want"),
    [
        (1000.0, 1.0, 0.5, 1 + 3 * 1.0),  # many in flight: fill-up + 3 p99 E2Es
        (
            10.0,
            1.0,
            0.5,
            1 + 3 * np.sqrt(2 * 5) / 1.0,
        ),  # L = 5: the in-flight noise sets the window
        (1.0, 40.0, 30.0, 40 + 3 * np.sqrt(2 * 30) / 0.1),  # long answers, 1 req/s: minutes
    ],
)
def test_probes_are_long_enough_to_judge(rate: float, p99: float, mean: float, want: float) -> None:
    assert min_probe_duration_s(rate, p99, mean) == pytest.approx(want)


def test_a_run_stopped_during_its_warm_up_still_has_a_result(tmp_path: Path) -> None:
    # The journal of a run stopped in its warm-up has one phase start: build_result must not fail
    lines = (DATA / "llamacpp_p1.journal.jsonl").read_text().splitlines()
    end = (
        lines[-1]
        .replace(
            '"phase_starts_ns":[0,1000000000],"phase_ends_ns":[1000000000,25435504429]',
            '"phase_starts_ns":[0],"phase_ends_ns":[1000000000]',
        )
        .replace('"complete":true', '"complete":false')
    )
    assert end != lines[-1]
    p = tmp_path / "stopped.journal.jsonl"
    p.write_text("\n".join(lines[:-1] + [end]) + "\n")
    r = build_result(read_journal(p))
    assert r["complete"] is False and r["summary"]["requests"]["planned_or_due"] >= 0


def test_the_in_flight_allowance_is_the_exact_tail_of_two_poisson_counts() -> None:
    # A stable server's shortfall is the difference of the requests in flight at the window's two
    # ends. With a few in flight the normal approximation NOISE_Z sqrt(2 L) was too tight: at
    # L = 1.16 it failed 0.26 % of stable windows, and a plan called a replica at 38 % of its
    # capacity not keeping up (a CI run's fitted llama.cpp preset).
    rng = np.random.default_rng(7)
    n = 2_000_000
    for mean in (0.05, 0.3, 1.16, 4.0, 20.0, 80.0):
        shortfall = rng.poisson(mean, n) - rng.poisson(mean, n)
        allowance = in_flight_noise(mean)
        assert allowance == int(allowance)
        # exceeded at most FALSE_ALARM of the time (2,700 expected hits: +25 % is 10 sigma) ...
        assert (shortfall > allowance).mean() <= 1.25 * FALSE_ALARM, mean
        # ... and it is the smallest such: one request less is exceeded more often
        assert (shortfall > allowance - 1).mean() > 0.8 * FALSE_ALARM, mean
    assert in_flight_noise(1.16) > NOISE_Z * math.sqrt(2 * 1.16)  # where the normal failed
    # above EXACT_NOISE_MAX_MEAN the normal approximation, and no step where it takes over
    assert in_flight_noise(101.0) == pytest.approx(NOISE_Z * math.sqrt(202.0))
    assert abs(in_flight_noise(100.0) - NOISE_Z * math.sqrt(200.0)) < 1
    assert in_flight_noise(0.0) == 0.0
