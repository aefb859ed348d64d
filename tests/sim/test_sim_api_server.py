"""The API server in front of the engine (scheduler.py, "The API server"): serial intake per
request and streaming per token, on the virtual clock (model times), and the real-time engine
driving the same mechanism."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np
import pytest

from harness.sim.engine import SimEngine
from harness.sim.metrics import SimMetrics
from harness.sim.roofline import Roofline
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from harness.sim.settings import ResolvedSim, SimSettings
from harness.sim.truth import RequestTruth
from harness.sim.virtual import run_virtual, run_virtual_steps

H100 = SimSettings(gpu="H100-SXM", model="Meta-Llama-3-8B-Instruct")
FREE = {
    "intake_s_per_request": 0.0,
    "intake_s_per_prompt_token": 0.0,
    "stream_s_per_token": 0.0,
    "request_latency_s": 0.0,
}
# The mechanism's tests use these costs, not the fitted defaults (which the validation owns)
API = {
    "intake_s_per_request": 2.5e-3,
    "intake_s_per_prompt_token": 1e-6,
    "stream_s_per_token": 20e-6,
    "request_latency_s": 0.0,
}


def _sched(r: ResolvedSim, roofline: Roofline | None = None) -> Scheduler:
    roof = roofline or r.roofline.with_coefficients(**API)
    return Scheduler(SchedulerConfig.from_resolved(r, jitter=False), roof)


def _burst(n: int, seed: int = 3) -> list[tuple[float, SimRequest]]:
    """n requests at t = 0, prompts lognormal around ~250 tokens (ShareGPT-like), 64 out."""
    rng = np.random.default_rng(seed)
    prompts = np.clip(rng.lognormal(np.log(200), 0.8, n), 4, 2000).astype(int)
    return [(0.0, SimRequest(i, int(p), 64)) for i, p in enumerate(prompts)]


def test_a_burst_is_admitted_one_by_one_at_the_intake_rate() -> None:
    r = H100.resolved()
    roof = r.roofline.with_coefficients(**API)
    burst = _burst(320)
    run = run_virtual(_sched(r), burst)
    costs = np.array([roof.intake_s(req.prompt_tokens) for _, req in burst])
    done = np.cumsum(costs)  # the intake finishes request i after all before it
    admitted = np.array([run.times[i].admitted_s for i in range(320)])
    assert np.all(admitted >= done - 1e-12)
    assert np.all(np.diff(admitted) >= 0)  # first come, first admitted
    assert admitted[0] == pytest.approx(done[0])  # the engine takes the first one at once
    # at 2.5 ms + 1 us per prompt token the last request leaves the API server ~0.9 s in
    assert 0.75 < done[-1] < 1.1
    # Streaming goes first on the one worker: the first requests' tokens flow while the rest
    # of the burst is still being admitted, and the last request's first token comes after its
    # own intake, the burst's whole intake
    ttft = np.array([run.times[i].ttft_s for i in range(320)])
    assert ttft.min() < 0.5 * done[-1] and ttft.max() >= done[-1]
    free = run_virtual(_sched(r, roof.with_coefficients(**FREE)), _burst(320))
    ttft_free = np.array([free.times[i].ttft_s for i in range(320)])
    # without the API server the first token comes after the first 8,192-token prefill step
    assert ttft_free.min() < 0.5 * done[-1]


def test_one_request_waits_its_own_intake_and_its_token_is_streamed() -> None:
    r = H100.resolved()
    roof = r.roofline.with_coefficients(**API)
    req = [(0.5, SimRequest(0, 300, 3))]
    with_api = run_virtual(_sched(r), req).times[0]
    without = run_virtual(_sched(r, roof.with_coefficients(**FREE)), [(0.5, SimRequest(0, 300, 3))])
    ahead = roof.intake_s(300) + roof.stream_s_per_token
    assert with_api.ttft_s - without.times[0].ttft_s == pytest.approx(ahead, abs=1e-12)
    assert roof.intake_s(300) == pytest.approx(2.5e-3 + 300 * 1e-6)
    # streaming one token per step delays every token alike: the gaps stay the engine's
    assert with_api.itl_s == pytest.approx(without.times[0].itl_s, abs=1e-12)


def test_a_request_latency_delays_first_tokens_and_holds_nothing() -> None:
    # 20 ms between intake and the scheduler for every request: each first token 20 ms later,
    # the intake worker as busy as before (the burst leaves it at the same times), and the
    # engine's work unchanged
    r = H100.resolved()
    base = r.roofline.with_coefficients(**API)
    late = base.with_coefficients(request_latency_s=0.02)
    a = run_virtual(_sched(r, base), [(0.5, SimRequest(0, 300, 3))]).times[0]
    b = run_virtual(_sched(r, late), [(0.5, SimRequest(0, 300, 3))]).times[0]
    assert b.ttft_s - a.ttft_s == pytest.approx(0.02, abs=1e-12)
    assert b.itl_s == pytest.approx(a.itl_s, abs=1e-12)
    s = _sched(r, late)
    for i in range(3):
        s.add(SimRequest(i, 100, 4), at_s=0.0)
    assert s.api.free_s == pytest.approx(3 * base.intake_s(100))  # the worker is not held
    assert s.next_intake_s == pytest.approx(base.intake_s(100) + 0.02)


def test_streaming_goes_first_so_an_overload_of_arrivals_does_not_stop_the_answers() -> None:
    # 20x more arrivals than the intake can take: its backlog grows, yet the requests already
    # admitted keep streaming, so answers keep ending at the engine's pace (no collapse)
    r = H100.resolved()
    roof = r.roofline.with_coefficients(**{**API, "intake_s_per_request": 0.01})
    reqs = [(i / 2000.0, SimRequest(i, 64, 32)) for i in range(4000)]  # 2,000/s for 2 s
    steps = run_virtual_steps(_sched(r, roof), reqs)
    done_by_2s = int(steps.emitted_count[steps.delivered_s <= 2.0].sum()) // 32
    assert 150 <= done_by_2s <= 200  # ~100/s admitted, and answered as admitted
    assert steps.num_waiting.max() > 3000  # the backlog of arrivals the intake has not taken


def test_when_streaming_is_the_bottleneck_delivery_falls_behind_the_engine() -> None:
    r = H100.resolved()
    slow = r.roofline.with_coefficients(**{**FREE, "stream_s_per_token": 1e-3})
    reqs = [(0.0, SimRequest(i, 64, 200)) for i in range(64)]
    steps = run_virtual_steps(_sched(r, slow), reqs)
    tokens = int(steps.emitted_count.sum())
    assert tokens == 64 * 200
    # one worker, 1 ms a token: delivery takes at least tokens x 1 ms; the engine ends sooner
    assert steps.delivered_s[-1] >= tokens * 1e-3
    assert steps.end_s[-1] < 0.5 * steps.delivered_s[-1]
    assert np.all(np.diff(steps.delivered_s) > 0) and np.all(steps.delivered_s >= steps.end_s)
    # the virtual probe's token times are the deliveries
    assert np.array_equal(steps.token_end_s, np.repeat(steps.delivered_s, steps.emitted_count))


def test_requests_in_intake_count_as_waiting_and_can_be_aborted() -> None:
    r = H100.resolved()
    roof = r.roofline.with_coefficients(**API)
    s = _sched(r)
    for i in range(5):
        s.add(SimRequest(i, 100, 4), at_s=0.0)
    assert (s.num_intake, s.num_waiting, s.idle) == (5, 0, False)
    assert s.next_intake_s == pytest.approx(roof.intake_s(100))
    assert s.abort(3) and s.num_intake == 4
    out = s.step(0.0)  # nothing is admitted yet: an empty step
    assert out.duration_s == 0 and s.num_intake == 4
    out = s.step()  # no time given: the clock jumps to the first intake completion
    assert out.start_s == pytest.approx(roof.intake_s(100)) and out.admitted == [0]
    steps = run_virtual_steps(_sched(r), [(0.0, SimRequest(i, 100, 4)) for i in range(5)])
    assert steps.num_waiting[0] == 4  # still in the API server after the first step


def test_the_real_time_engine_drives_the_same_intake() -> None:
    # Model times only: 5 requests submitted together leave the intake one by one, in order,
    # and every token is delivered (the delivery timers keep the steps' order).
    base = SimSettings(gpu="H100-SXM", model="Meta-Llama-3-8B-Instruct", speedup=20).resolved()
    roof = base.roofline.with_coefficients(intake_s_per_request=0.05, stream_s_per_token=2e-3)
    resolved = dataclasses.replace(base, roofline=roof)

    async def main() -> tuple[list[RequestTruth], list[int]]:
        engine = SimEngine(resolved, SimMetrics("m", {}))
        engine.start()
        truths = [
            RequestTruth(f"r{i}", "completions", True, time.perf_counter_ns(), 50, 8, 8)
            for i in range(5)
        ]
        handles = [engine.submit(t) for t in truths]
        in_intake = engine.scheduler.num_intake
        for h in handles:
            while not h.finished:
                await h.wait(h.produced)
        await engine.stop()
        return truths, [in_intake, *(h.produced for h in handles)]

    truths, counts = asyncio.run(main())
    assert counts == [5, 8, 8, 8, 8, 8]
    scheduled = [t.scheduled_ns for t in truths]
    assert all(s is not None for s in scheduled)
    assert scheduled == sorted(scheduled)  # type: ignore[type-var]  # all set (checked above)
