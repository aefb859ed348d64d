"""Benchmark: the simulator's own CPU work per step vs the step time it models.

With 1,000 sequences running, one engine step must cost the simulator far less CPU than the
modelled GPU step lasts, or the simulator (not the modelled GPU) sets the pace. Measured:

- scheduler: `Scheduler.step()` alone (schedule, block accounting, roofline, apply);
- + delivery: the step loop's bookkeeping per step as well (`SimEngine._deliver`: bump each
  request's token count, wake its handler, feed the metrics histograms), without sockets.

Two workloads: steady decode (1,000 sequences, none finishing) and churn (outputs of 16-256
tokens, so requests finish and new prompts are admitted and prefilled every few steps).

`--shapes` measures the virtual clock as the tests drive it instead: the capacity tests' shapes
(tests/virtual_shapes.py) for 15 s at their overload rate and at a quarter of it, each a whole
`virtual_at` (plan, client, scheduler, records), in CPU seconds and CPU µs per step.

    python benchmarks/bench_sim_step.py [--steps 300] [--gpu H200] [--model Qwen2.5-7B-Instruct]
    python benchmarks/bench_sim_step.py --shapes
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.sim.engine import SimEngine  # noqa: E402
from harness.sim.metrics import SimMetrics  # noqa: E402
from harness.sim.settings import SimSettings  # noqa: E402
from harness.sim.truth import RequestTruth  # noqa: E402

RUNNING = 1000
PROMPT_TOKENS = 512


def _engine(gpu: str, model: str) -> SimEngine:
    r = SimSettings(gpu=gpu, model=model, max_num_seqs=1024).resolved()
    return SimEngine(r, SimMetrics(model, {}))


def _submit(engine: SimEngine, i: int, output: int) -> None:
    truth = RequestTruth(
        f"r{i}",
        "completions",
        True,
        time.perf_counter_ns(),
        prompt_tokens=PROMPT_TOKENS,
        max_tokens=output,
        target_tokens=output,
        finish_reason="length",
    )
    engine.submit(truth)


def measure(gpu: str, model: str, steps: int, churn: bool) -> dict[str, float]:
    engine = _engine(gpu, model)
    rng = np.random.default_rng(0)
    sched = engine.scheduler
    n = 0

    def top_up() -> None:
        nonlocal n
        while sched.num_running + sched.num_waiting + sched.num_intake < RUNNING:
            _submit(engine, n, int(rng.integers(16, 257)) if churn else 1_000_000)
            n += 1

    top_up()
    while sched.num_waiting:  # prefill everything first: measure the steady state
        out = sched.step()
        engine._deliver(out.emitted, out.finished)
    for _ in range(20):
        out = sched.step()
        engine._deliver(out.emitted, out.finished)
    step_cpu, total_cpu, modelled, running = [], [], [], []
    for _ in range(steps):
        top_up()
        t0 = time.perf_counter()
        out = sched.step()
        t1 = time.perf_counter()
        engine._deliver(out.emitted, out.finished)
        t2 = time.perf_counter()
        step_cpu.append(t1 - t0)
        total_cpu.append(t2 - t0)
        modelled.append(out.duration_s)
        running.append(out.num_scheduled_seqs)
    return {
        "running": statistics.mean(running),
        "scheduler_ms": statistics.median(step_cpu) * 1e3,
        "total_ms": statistics.median(total_cpu) * 1e3,
        "total_p99_ms": float(np.percentile(total_cpu, 99)) * 1e3,
        "modelled_ms": statistics.median(modelled) * 1e3,
    }


def shapes() -> None:
    """The capacity shapes on the virtual clock: CPU seconds and µs per step, each and all."""
    import tempfile

    from tests.virtual_shapes import OVERLOAD, SHAPES, virtual_at, write_shape

    cpu = steps = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in SHAPES:
            path = write_shape(Path(tmp), name, seed=3)
            for share in (1.0, 0.25):
                t = time.process_time()
                vp, _ = virtual_at(path, OVERLOAD[name] * share, 15.0)
                dt = time.process_time() - t
                cpu, steps = cpu + dt, steps + vp.steps
                print(
                    f"{name:<14}{share:>6} steps={vp.steps:>7} cpu={dt:6.2f}s "
                    f"us/step={dt / vp.steps * 1e6:6.1f}"
                )
    print(f"total {cpu:.2f} CPU-s, {steps:.0f} steps, {cpu / steps * 1e6:.1f} us/step")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--gpu", default="H200")
    p.add_argument("--model", default="Qwen2.5-7B-Instruct")
    p.add_argument("--shapes", action="store_true", help="the capacity shapes, virtual clock")
    a = p.parse_args()
    if a.shapes:
        shapes()
        return 0
    print(
        f"{a.model} on {a.gpu}, {RUNNING} sequences, prompts of {PROMPT_TOKENS} tokens, "
        f"median of {a.steps} steps"
    )
    print(
        f"{'workload':<14}{'running':>8}{'scheduler':>11}{'+delivery':>11}{'p99':>9}"
        f"{'modelled step':>15}{'CPU/modelled':>14}"
    )
    for churn in (False, True):
        m = measure(a.gpu, a.model, a.steps, churn)
        name = "churn" if churn else "steady decode"
        print(
            f"{name:<14}{m['running']:>8.0f}{m['scheduler_ms']:>9.3f}ms{m['total_ms']:>9.3f}ms"
            f"{m['total_p99_ms']:>7.3f}ms{m['modelled_ms']:>13.2f}ms"
            f"{m['total_ms'] / m['modelled_ms']:>13.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
