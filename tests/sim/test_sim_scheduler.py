"""Scheduler invariants and engine anchors, on the virtual clock (no event loop, no sleeping)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.sim import scheduler as scheduler_module
from harness.sim.roofline import Roofline
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest, StepOutput
from harness.sim.settings import SimSettings
from harness.sim.virtual import VirtualRun, run_virtual

H100_LLAMA = {"gpu": "H100-SXM", "model": "Llama-3.1-8B-Instruct"}


# The scheduling tests below isolate the engine from the API server in front of it (intake
# and streaming cost nothing): they check admission order, budgets and blocks, which a serial
# intake would spread over time. The API server has its own tests (test_sim_api_server.py).
NO_API_SERVER = {
    "intake_s_per_request": 0.0,
    "intake_s_per_prompt_token": 0.0,
    "stream_s_per_token": 0.0,
    "request_latency_s": 0.0,
}


def _roofline() -> Roofline:
    return SimSettings(**H100_LLAMA).resolved().roofline.with_coefficients(**NO_API_SERVER)


def _scheduler(**kw: object) -> Scheduler:
    settings = SimSettings(**{**H100_LLAMA, **kw})  # type: ignore[arg-type]
    r = settings.resolved()
    return Scheduler(
        SchedulerConfig.from_resolved(r), r.roofline.with_coefficients(**NO_API_SERVER)
    )


class InvariantChecker:
    """Checks every step: caps, budget, block accounting."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self.prev_running_empty = True
        self.steps = 0

    def __call__(self, s: Scheduler, out: StepOutput) -> None:
        cfg = self.cfg
        self.steps += 1
        assert len(s.running) <= cfg.max_num_seqs
        assert out.num_scheduled_seqs <= cfg.max_num_seqs
        assert out.num_scheduled_tokens <= cfg.max_num_batched_tokens or cfg.static
        pool = s.pool
        assert pool.private_used >= 0 and pool.free >= 0
        assert pool.used <= pool.num_blocks
        held = int(s._blocks[s.running].sum()) if s.running else 0
        assert held == pool.private_used + sum(pool._refs.values())
        for slot in s.running:
            need = -(-int(s._computed[slot]) // cfg.block_size)
            assert s._blocks[slot] >= need
        if cfg.static and out.admitted:
            assert self.prev_running_empty, "static batching admitted into a running batch"
        self.prev_running_empty = not s.running


def _check_finished(run: VirtualRun, reqs: list[SimRequest], s: Scheduler) -> None:
    for req in reqs:
        assert len(run.times[req.rid].token_s) == req.target_output, req
        assert req.state == "finished"
        assert req.output == req.target_output
    assert s.idle
    assert s.pool.private_used == 0
    assert all(v == 0 for v in s.pool._refs.values())


@st.composite
def workloads(draw: st.DrawFn) -> tuple[SchedulerConfig, list[tuple[float, SimRequest]]]:
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    chunked = draw(st.booleans())
    n = draw(st.integers(1, 25))
    prefix = draw(st.integers(0, 40))  # a shared prompt prefix, in tokens
    reqs = []
    for i in range(n):
        prompt = draw(st.integers(1, 40)) + (prefix if draw(st.booleans()) else 0)
        output = draw(st.integers(1, 30))
        t = draw(st.floats(0, 0.05))
        words = ["p"] * min(prefix, prompt) + [f"w{i}"] * (prompt - min(prefix, prompt))
        hashes = _hashes(words, block_size)
        reqs.append((t, SimRequest(i, prompt, output, hashes)))
    longest = max(r.prompt_tokens + r.target_output for _, r in reqs)
    min_blocks = -(-longest // block_size)
    cfg = SchedulerConfig(
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.integers(1, 64)) + (0 if chunked else longest),
        num_blocks=min_blocks + draw(st.integers(0, 3 * min_blocks)),
        block_size=block_size,
        chunked_prefill=chunked,
        prefix_caching=draw(st.booleans()),
        static=draw(st.booleans()),
        seed=draw(st.integers(0, 3)),
    )
    return cfg, reqs


def _hashes(words: list[str], bs: int) -> tuple[int, ...]:
    from harness.sim.protocol import block_hashes

    return block_hashes(words, bs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_invariants_hold_and_every_request_gets_exactly_its_tokens(
    case: tuple[SchedulerConfig, list[tuple[float, SimRequest]]],
) -> None:
    cfg, arrivals = case
    s = Scheduler(cfg, _roofline())
    check = InvariantChecker(cfg)
    run = run_virtual(s, arrivals, on_step=check, max_steps=100_000)
    _check_finished(run, [r for _, r in arrivals], s)


def _steps_with(
    few: int, cfg: SchedulerConfig, arrivals: list[tuple[float, SimRequest]], api: Roofline
) -> list[tuple[object, ...]]:
    """Every step of a run whose batches of at most `few` requests take `_step_few`."""
    saved = scheduler_module.FEW_SEQUENCES
    scheduler_module.FEW_SEQUENCES = few
    try:
        s = Scheduler(cfg, api)
        steps: list[tuple[object, ...]] = []

        def keep(_: Scheduler, out: StepOutput) -> None:
            fields = {**dataclasses.asdict(out), "emitted": out.emitted.tolist()}
            steps.append(tuple(fields.items()))

        fresh = [(t, dataclasses.replace(r, shared=[])) for t, r in arrivals]
        run_virtual(s, fresh, on_step=keep, max_steps=100_000)
    finally:
        scheduler_module.FEW_SEQUENCES = saved
    assert s.idle and s.pool.private_used == 0
    return [*steps, (s.num_preemptions, s.prefix_cache_queries, s.prefix_cache_hits)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(1, 40), st.integers(1, 6))
def test_the_few_sequences_step_is_the_vector_step(
    case: tuple[SchedulerConfig, list[tuple[float, SimRequest]]], seqs: int, few: int
) -> None:
    # `_step_few` is `_step` in Python ints for small batches: every step's output (duration,
    # jitter draw, tokens, admissions, preemptions, delivery) is the same whichever path runs,
    # and the same when a run crosses from one to the other (`few` below the batch sizes)
    cfg, arrivals = case
    cfg = dataclasses.replace(cfg, max_num_seqs=seqs)
    api = SimSettings(**H100_LLAMA).resolved().roofline  # with the API server's costs
    vector = _steps_with(0, cfg, arrivals, api)
    assert _steps_with(40, cfg, arrivals, api) == vector
    assert _steps_with(few, cfg, arrivals, api) == vector


def test_preemption_happens_when_blocks_run_out_and_all_still_finish() -> None:
    # 8 requests of 16 + 48 tokens need 4 blocks each at the end; only 12 blocks exist.
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=256, num_blocks=12, block_size=16)
    s = Scheduler(cfg, _roofline())
    reqs = [SimRequest(i, 16, 48) for i in range(8)]
    run = run_virtual(s, [(0.0, r) for r in reqs], on_step=InvariantChecker(cfg))
    assert s.num_preemptions > 0
    assert sum(t.preemptions for t in run.times.values()) == s.num_preemptions
    _check_finished(run, reqs, s)
    # Recompute preemption takes the most recently admitted: the first request never is.
    assert run.times[0].preemptions == 0


def test_no_admission_in_a_step_that_preempted() -> None:
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=256, num_blocks=10, block_size=4)
    s = Scheduler(cfg, _roofline())
    outs: list[StepOutput] = []
    reqs = [SimRequest(i, 8, 20) for i in range(10)]
    run_virtual(s, [(0.0, r) for r in reqs], on_step=lambda _s, o: outs.append(o))
    assert any(o.preempted for o in outs)
    assert all(not o.admitted for o in outs if o.preempted)


def test_budget_splits_a_long_prompt_into_chunks() -> None:
    # 1000-token prompt, 256-token budget: 4 prefill steps (256, 256, 256, 232), token on the 4th.
    cfg = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=256, num_blocks=100, block_size=16)
    s = Scheduler(cfg, _roofline())
    s.add(SimRequest(0, 1000, 2))
    sizes = []
    emitted = []
    while not s.idle:
        out = s.step()
        sizes.append(out.num_scheduled_tokens)
        emitted.append(out.emitted.size)
    assert sizes == [256, 256, 256, 232, 1]
    assert emitted == [0, 0, 0, 1, 1]


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget() -> None:
    # Running decode uses 1 token of 100; a 100-token prompt cannot start until it finishes.
    cfg = SchedulerConfig(
        max_num_seqs=4,
        max_num_batched_tokens=100,
        num_blocks=100,
        block_size=16,
        chunked_prefill=False,
    )
    s = Scheduler(cfg, _roofline())
    run = run_virtual(s, [(0.0, SimRequest(0, 10, 5)), (0.0, SimRequest(1, 100, 5))])
    assert run.times[1].admitted_s is not None
    assert run.times[1].admitted_s >= run.times[0].token_s[-1]


def test_max_num_seqs_caps_the_running_set() -> None:
    cfg = SchedulerConfig(
        max_num_seqs=3, max_num_batched_tokens=4096, num_blocks=1000, block_size=16
    )
    s = Scheduler(cfg, _roofline())
    peak = 0

    def hook(sch: Scheduler, out: StepOutput) -> None:
        nonlocal peak
        peak = max(peak, len(sch.running), out.num_scheduled_seqs)

    run_virtual(s, [(0.0, SimRequest(i, 20, 10)) for i in range(10)], on_step=hook)
    assert peak == 3


def test_prefix_caching_reuses_full_blocks_of_a_shared_prefix() -> None:
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=4096, num_blocks=100, block_size=16
    )
    words_a = ["sys"] * 64 + ["a"] * 10
    words_b = ["sys"] * 64 + ["b"] * 10
    s = Scheduler(cfg, _roofline())
    s.add(SimRequest(0, 74, 1, _hashes(words_a, 16)))
    first = s.step()
    assert first.num_scheduled_tokens == 74
    s.add(SimRequest(1, 74, 1, _hashes(words_b, 16)))
    second = s.step()
    assert second.num_scheduled_tokens == 74 - 64  # four 16-token blocks came from the cache
    # Without prefix caching the second prompt is computed in full.
    s2 = Scheduler(dataclasses.replace(cfg, prefix_caching=False), _roofline())
    s2.add(SimRequest(0, 74, 1, _hashes(words_a, 16)))
    s2.step()
    s2.add(SimRequest(1, 74, 1, _hashes(words_b, 16)))
    assert s2.step().num_scheduled_tokens == 74


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=4096, num_blocks=100, block_size=16
    )
    words = ["same"] * 32
    s = Scheduler(cfg, _roofline())
    s.add(SimRequest(0, 32, 1, _hashes(words, 16)))
    s.step()
    s.add(SimRequest(1, 32, 1, _hashes(words, 16)))
    out = s.step()
    assert out.num_scheduled_tokens == 16  # vLLM recomputes the last block to get logits
    assert out.emitted.tolist() == [1]


def test_abort_frees_blocks_and_slot() -> None:
    cfg = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=512, num_blocks=50, block_size=16)
    s = Scheduler(cfg, _roofline())
    s.add(SimRequest(0, 100, 50))
    s.add(SimRequest(1, 100, 50))
    s.add(SimRequest(2, 100, 50))
    s.step()
    assert s.abort(0) and s.abort(2)  # one running, one waiting
    assert not s.abort(0)
    assert s.num_running == 1 and s.num_waiting == 0
    while not s.idle:
        s.step()
    assert s.pool.private_used == 0


def test_static_batch_runs_until_its_longest_member_finishes() -> None:
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=4096, num_blocks=1000, block_size=16, static=True
    )
    s = Scheduler(cfg, _roofline())
    outs = [2, 3, 50, 4]
    reqs = [SimRequest(i, 10, o) for i, o in enumerate(outs)] + [SimRequest(9, 10, 2)]
    run = run_virtual(s, [(0.0, r) for r in reqs], on_step=InvariantChecker(cfg))
    # The fifth request waits for the whole first batch, whose short members finished early.
    assert run.times[9].admitted_s == pytest.approx(run.times[2].token_s[-1])
    assert run.times[0].token_s[-1] < run.times[2].token_s[-1]
    _check_finished(run, reqs, s)


# ---- anchors ----------------------------------------------------------------------------


def test_anchor_llama_8b_on_h100_decodes_one_stream_as_published() -> None:
    # the published single-stream TPOT p50 of Llama-3.1-8B on one H100 (the validation set:
    # one user, short prompts), within 20 %
    import tomllib

    from harness.sim.validation.errors import ERRORS

    doc = tomllib.loads((ERRORS.parent / "published.toml").read_text())
    published = [
        p["tpot_p50_ms"]
        for p in doc["point"]
        if p["model"] == "Llama-3.1-8B-Instruct"
        and p["gpu"] == "H100-SXM"
        and p.get("max_concurrency") == 1
        and "tpot_p50_ms" in p
    ]
    assert published
    s = _scheduler()
    run = run_virtual(s, [(0.0, SimRequest(0, 128, 500))])
    itl_ms = float(run.all_itl_s().mean() * 1e3)
    assert itl_ms == pytest.approx(published[0], rel=0.20)


def test_anchor_qwen_7b_on_h200_is_faster_than_llama_8b_on_h100() -> None:
    fast = run_virtual(
        _scheduler(gpu="H200", model="Qwen2.5-7B-Instruct"), [(0.0, SimRequest(0, 128, 200))]
    )
    slow = run_virtual(_scheduler(), [(0.0, SimRequest(0, 128, 200))])
    assert fast.all_itl_s().mean() < slow.all_itl_s().mean()


def _closed_batch(n: int, outputs: np.ndarray, **kw: object) -> VirtualRun:
    s = _scheduler(**kw)
    return run_virtual(s, [(0.0, SimRequest(i, 512, int(outputs[i]))) for i in range(n)])


def test_anchor_throughput_and_itl_rise_with_max_num_seqs() -> None:
    outputs = np.full(512, 128)
    tput, itl = [], []
    for mns in (8, 32, 128, 512):
        run = _closed_batch(512, outputs, max_num_seqs=mns)
        tput.append(run.output_tokens_per_s())
        itl.append(float(np.median(run.all_itl_s())))
    assert tput == sorted(tput) and tput[-1] > 4 * tput[0]
    assert itl == sorted(itl) and itl[-1] > 2 * itl[0]


def test_anchor_throughput_stops_rising_when_the_kv_cache_binds() -> None:
    # 640 tokens per request at the end; 2,000 blocks of 16 hold ~50 such requests.
    outputs = np.full(400, 128)
    small = _closed_batch(400, outputs, max_num_seqs=256, num_gpu_blocks=2000)
    large = _closed_batch(400, outputs, max_num_seqs=1024, num_gpu_blocks=2000)
    free = _closed_batch(400, outputs, max_num_seqs=256)
    assert large.output_tokens_per_s() == pytest.approx(small.output_tokens_per_s(), rel=0.1)
    # ~1.5x with the fitted coefficients (a prefill-heavy step is compute-bound on them)
    assert free.output_tokens_per_s() > 1.4 * small.output_tokens_per_s()


def test_anchor_continuous_batching_beats_static_by_a_wide_factor() -> None:
    rng = np.random.default_rng(3)
    outputs = np.exp(rng.uniform(np.log(8), np.log(1024), 256)).astype(int)  # log-uniform
    cont = _closed_batch(256, outputs, max_num_seqs=32)
    stat = _closed_batch(256, outputs, max_num_seqs=32, batching="static")
    assert cont.output_tokens_per_s() > 2.0 * stat.output_tokens_per_s()


def test_jitter_is_seeded() -> None:
    a = run_virtual(_scheduler(seed=1), [(0.0, SimRequest(0, 64, 50))])
    b = run_virtual(_scheduler(seed=1), [(0.0, SimRequest(0, 64, 50))])
    c = run_virtual(_scheduler(seed=2), [(0.0, SimRequest(0, 64, 50))])
    assert a.times[0].token_s == b.times[0].token_s != c.times[0].token_s
