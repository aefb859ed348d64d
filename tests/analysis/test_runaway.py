"""The runaway-queue detector: never on a healthy fill-up (a sweep of shapes and loads on the
simulator's virtual clock), always with its evidence in numbers, and on a real runaway."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis import runaway as rw
from tests.virtual_shapes import (
    OVERLOAD,
    SERVICE_RATE_RUN_S,
    series,
    service_rate,
    virtual_at,
    write_shape,
)


def _series(
    t_end: float,
    rate: float,
    in_flight: callable,
    e2e_s: callable,
    ttft_s: callable,  # type: ignore[valid-type]
    waiting: callable | None = None,
    step: float = 0.25,
) -> list[rw.Sample]:  # type: ignore[valid-type]
    """A hand-made series: requests sent at `rate`, finishing `e2e_s(t)` after they were sent."""
    out, done, e2e_sum, e2e_max, ttft_sum = [], 0, 0.0, 0.0, 0.0
    t = step
    while t <= t_end + 1e-9:
        while True:  # requests whose last token came by t, in send order
            sent_at = (done + 1) / rate
            if sent_at + e2e_s(sent_at) > t:
                break
            done += 1
            e2e_sum += e2e_s(sent_at)
            e2e_max = max(e2e_max, e2e_s(sent_at))
            ttft_sum += ttft_s(sent_at)
        out.append(
            rw.Sample(
                t,
                int(t * rate),
                in_flight(t),
                done,
                e2e_sum,
                e2e_max,
                min(e2e_max, 1.0),
                ttft_sum,
                None if waiting is None else waiting(t),
            )
        )
        t += step
    return out


def test_a_fill_up_is_not_a_runaway() -> None:
    # 10 req/s, 3 s E2E: in flight climbs to 30 over the first 3 s while nothing finishes -- the
    # issue's false stop (in flight up 5x, served 0 of 10 offered), which must not stop a probe
    s = _series(20.0, 10.0, lambda t: int(10 * min(t, 3.0)), lambda t: 3.0, lambda t: 0.05)
    assert rw.first_stop(s, 10.0) is None


def test_a_runaway_stops_with_its_evidence_in_numbers() -> None:
    # 10 req/s offered, 6 served: in flight grows by 4/s, and the TTFT from schedule with it
    s = _series(
        30.0, 10.0, lambda t: int(6 + 4 * t), lambda t: 1.0 + 0.4 * t, lambda t: 0.05 + 0.4 * t
    )
    ev = rw.first_stop(s, 10.0)
    assert ev is not None and ev.rule == "client"
    text = ev.describe()
    assert (
        "queue grows without bound" in text and "served" in text and "Little's law expects" in text
    )
    assert ev.in_flight_to > ev.in_flight_from and ev.served_per_s < 0.9 * ev.offered_per_s
    assert (
        ev.window_s >= ev.scale_s and ev.t_s - ev.window_s >= ev.scale_s
    )  # after the fill-up, over one E2E


def test_the_servers_waiting_queue_stops_a_runaway_the_client_cannot_see_yet() -> None:
    # FIFO overload at 3x: completions' E2E grows as fast as the probe runs (in flight matches
    # Little's law for them), so the client alone cannot tell; the server's queue can
    def flight(t: float) -> int:
        return int(10 * t - 3.3 * t)

    args = (20.0, 10.0, flight, lambda t: 1.0 + 2 * t, lambda t: 2 * t)
    assert rw.first_stop(_series(*args), 10.0) is None
    ev = rw.first_stop(_series(*args, waiting=lambda t: 6.7 * t), 10.0)
    assert (
        ev is not None
        and ev.rule == "server"
        and ev.waiting is not None
        and ev.waiting[1] > ev.waiting[0]
    )
    assert "server waiting queue" in ev.describe()


def test_too_little_evidence_never_stops() -> None:
    assert rw.runaway_evidence([], 10.0) is None
    few = _series(30.0, 0.1, lambda t: int(t), lambda t: 1.0 + t, lambda t: t)  # 3 arrivals in all
    assert rw.first_stop(few, 0.1) is None


# (shape, loads as shares of the shape's service rate) -- E2E from ~45 ms (short) to ~45 s
# (long_outputs), rates from ~1 to ~900 req/s, short and long answers, gamma bursts
HEALTHY = [
    ("short", (0.001, 0.05, 0.2, 0.6, 0.9)),
    ("steady", (0.01, 0.2, 0.5, 0.8, 0.9)),
    ("long_outputs", (0.3, 0.6, 0.9)),
    ("burst", (0.3, 0.6, 0.9)),
    ("burstier", (0.3, 0.6, 0.9)),
    ("long_prompts", (0.3, 0.6, 0.9)),
    ("capped", (0.3, 0.6, 0.9)),
    ("heavy_tail", (0.3, 0.6, 0.9)),
]


# "short" (E2E ~45 ms, ~370 req/s): 5 s of overload are ~100 E2Es and serve what 20 s serve
# (370.4 and 370.5 req/s, seed 1) at a quarter of the CPU; its runaways are stopped 1.25 s in
# (at 1.5x and 2.5x), so 10 s of them show it as well as its 30 s. Shapes that fill up for longer
# keep 20 s (capped serves 14.8 req/s over 5 s, 13.6 over 20 s).
SERVICE_RUN_S = {"short": 5.0}
RUNAWAY_RUN_S = {"short": 10.0}


@pytest.mark.slow
@pytest.mark.virtual  # no wall time measured: beside a server test at idle priority
@pytest.mark.parametrize(("shape", "loads"), HEALTHY, ids=[h[0] for h in HEALTHY])
def test_no_false_stop_on_healthy_loads_of_any_shape(
    tmp_path: Path, shape: str, loads: tuple[float, ...]
) -> None:
    long_e2e = shape in (
        "long_outputs",
        "heavy_tail",
    )  # their overload needs their whole length to show
    run_s = None if long_e2e else SERVICE_RUN_S.get(shape, SERVICE_RATE_RUN_S)
    mu = service_rate(write_shape(tmp_path, shape), OVERLOAD[shape], run_s)
    for seed in (1, 2):
        path = write_shape(tmp_path, shape, seed=seed)
        for rho in loads:
            vp, part = virtual_at(path, rho * mu)
            for gauge in (True, False):
                ev = rw.first_stop(series(vp, gauge), rho * mu)
                assert ev is None, (shape, seed, rho, gauge, ev.describe() if ev else None)
            assert part.latency_ms["e2e"]["count"] > 0


@pytest.mark.slow
@pytest.mark.virtual
@pytest.mark.parametrize("shape", ["short", "steady", "capped", "long_prompts", "burst"])
def test_runaways_are_stopped_early(tmp_path: Path, shape: str) -> None:
    path = write_shape(tmp_path, shape)
    mu = service_rate(path, OVERLOAD[shape], SERVICE_RUN_S.get(shape, SERVICE_RATE_RUN_S))
    for over in (1.5, 2.5):
        vp, _ = virtual_at(path, over * mu, RUNAWAY_RUN_S.get(shape))
        span_s = (vp.span_ns[1] - vp.span_ns[0]) / 1e9
        ev = rw.first_stop(series(vp), over * mu)
        assert ev is not None and ev.t_s < span_s, (shape, over)
        assert ev.served_per_s < ev.offered_per_s
