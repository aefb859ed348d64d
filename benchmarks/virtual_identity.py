"""Identity check for the simulator's virtual clock: a fixed set of virtual runs whose every
output (token times, step rows, per-step scheduler output, capacity answers, validation figures)
is written to one file, so that a change meant to make the clock faster is seen to leave the
model's results byte-for-byte unchanged.

    python benchmarks/virtual_identity.py OUT.txt [--quick]

Run it on the tree before a change and after it, with the same physics (the same roofline,
presets and validation points: e.g. two `git worktree`s, PYTHONPATH pointing at each), and
`cmp` the two files. Floats are written exactly (`float.hex`, or a SHA-256 of an array's bytes),
so a reordered floating-point sum that moves a last bit shows. What runs:

- the capacity tests' shapes (tests/virtual_shapes.py) through `virtual_at`, at a moderate
  rate and in overload: every column of the probe's records, its waiting series, its steps;
- the scheduler driven directly (`run_virtual`, with a hook keeping every `StepOutput`, and
  `run_virtual_steps`) in the configurations its two step paths branch on: static batching, no
  chunked prefill, a KV pool small enough to preempt, shared prefix blocks, jitter off, a closed
  loop through `follow`;
- published points through `harness.orchestrate.validation`'s engine (every figure predicted);
- `capacity --virtual` (`virtual_capacity`) on one shape under an SLO: every probe and the answer.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.analysis import capacity as cap  # noqa: E402
from harness.orchestrate import validation as v  # noqa: E402
from harness.orchestrate.virtual_capacity import virtual_capacity  # noqa: E402
from harness.sim.roofline import Roofline  # noqa: E402
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest, StepOutput  # noqa: E402
from harness.sim.settings import SimSettings  # noqa: E402
from harness.sim.virtual import run_virtual, run_virtual_steps  # noqa: E402
from tests.virtual_shapes import OVERLOAD, SHAPES, virtual_at, write_shape  # noqa: E402


def _h(a: Any) -> str:
    """SHA-256 (16 hex digits) of an array's dtype, shape and bytes, or of a list's repr."""
    if a is None:
        return "None"
    if isinstance(a, np.ndarray):
        b = np.ascontiguousarray(a)
        raw = f"{b.dtype.str}{b.shape}".encode() + b.tobytes()
    else:
        raw = repr([x.hex() if isinstance(x, float) else x for x in a]).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def _x(f: float | None) -> str:
    return "None" if f is None else float(f).hex()


def shapes(quick: bool) -> Iterable[str]:
    duration = 8.0 if quick else 15.0
    with tempfile.TemporaryDirectory(prefix="virtual-identity-") as tmp:
        for name in SHAPES:
            path = write_shape(Path(tmp), name, seed=3)
            for share in (0.25, 1.0):
                rate = OVERLOAD[name] * share
                vp, part = virtual_at(path, rate, duration)
                c = vp.columns
                fields = ", ".join(
                    f"{f}={_h(getattr(c, f))}"
                    for f in (
                        "seq",
                        "intended",
                        "sent",
                        "end",
                        "ok",
                        "prompt_tokens",
                        "output_tokens",
                        "n_chunks",
                        "chunk_start",
                        "stamps",
                        "channel",
                    )
                )
                yield (
                    f"shape {name} rate={rate:g}: steps={vp.steps} end_ns={vp.end_ns} "
                    f"waiting={_h(vp.waiting[0])}/{_h(vp.waiting[1])} {fields} "
                    f"served={_x(part.served_requests_per_s)}"
                )


def _requests(
    rng: np.random.Generator, n: int, prompt: tuple[int, int], output: tuple[int, int], bs: int
) -> list[tuple[float, SimRequest]]:
    t = np.cumsum(rng.exponential(1.0 / 40.0, n))
    out = []
    for i in range(n):
        p = int(rng.integers(*prompt))
        o = int(rng.integers(*output))
        group = int(rng.integers(0, 4))  # four shared system prompts of 4 blocks, then own words
        hashes = tuple(hash(("g", group, k)) for k in range(min(4, p // bs))) + tuple(
            hash(("r", i, k)) for k in range(4, p // bs)
        )
        out.append((float(t[i]), SimRequest(i, p, o, hashes)))
    return out


CONFIGS: dict[str, dict[str, Any]] = {
    "continuous": {},
    "few-seqs": {"max_num_seqs": 8},
    "static": {"static": True, "max_num_seqs": 32},
    "no-chunked": {"chunked_prefill": False, "max_num_batched_tokens": 4096},
    "preempting": {"num_blocks": 600},
    "preempting-static": {"num_blocks": 700, "static": True, "max_num_seqs": 64},
    "no-prefix-cache": {"prefix_caching": False, "num_blocks": 900},
    "no-jitter": {"jitter": False},
}


def _config(**over: Any) -> tuple[SchedulerConfig, Roofline]:
    r = SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct", seed=5).resolved()
    base = SchedulerConfig.from_resolved(r)
    fields = {f: getattr(base, f) for f in SchedulerConfig.__dataclass_fields__}
    fields.update(max_num_seqs=256, num_blocks=20_000)
    fields.update(over)
    return SchedulerConfig(**fields), r.roofline


def _step_line(out: StepOutput) -> str:
    return (
        f"{_x(out.start_s)} {_x(out.duration_s)} {_x(out.delivered_s)} "
        f"{out.num_scheduled_tokens} {out.num_scheduled_seqs} {out.emitted.tolist()} "
        f"{out.finished} {out.admitted} {out.preempted}"
    )


def schedulers(quick: bool) -> Iterable[str]:
    n = 150 if quick else 400
    for name, over in CONFIGS.items():
        cfg, roof = _config(**over)
        arrivals = _requests(np.random.default_rng(11), n, (16, 2000), (1, 300), cfg.block_size)
        lines: list[str] = []
        sched = Scheduler(cfg, roof)

        def hook(s: Scheduler, out: StepOutput, lines: list[str] = lines) -> None:
            lines.append(f"{_step_line(out)} {s.num_running} {s.num_waiting} {s.num_intake}")
            lines.append(f"  {_x(s.kv_usage)} {s.pool.cached}")

        run = run_virtual(sched, arrivals, on_step=hook)
        times = [
            (rid, _x(t.arrival_s), _x(t.admitted_s), [x.hex() for x in t.token_s], t.preemptions)
            for rid, t in sorted(run.times.items())
        ]
        yield (
            f"scheduler {name}: steps={run.steps} end={_x(run.end_s)} "
            f"preemptions={sched.num_preemptions} prefix={sched.prefix_cache_queries}/"
            f"{sched.prefix_cache_hits} times={_h(times)} step_outputs={_h(lines)}"
        )
        arrivals = _requests(np.random.default_rng(11), n, (16, 2000), (1, 300), cfg.block_size)
        st = run_virtual_steps(Scheduler(cfg, roof), arrivals)
        yield f"scheduler-steps {name}: {_steps_line(st)}"
    # a closed loop of 24 users through `follow`
    cfg, roof = _config(max_num_seqs=16, num_blocks=3000)
    pool = _requests(np.random.default_rng(12), n, (16, 3000), (1, 200), cfg.block_size)
    first, rest = pool[:24], [r for _, r in pool[24:]]

    def follow(finished: list[int], at_s: float) -> list[tuple[float, SimRequest]]:
        return [(at_s + 0.01 * (rid % 3), rest.pop(0)) for rid in finished if rest]

    st = run_virtual_steps(Scheduler(cfg, roof), [(0.0, r) for _, r in first], follow=follow)
    yield f"scheduler-steps closed-loop: {_steps_line(st)}"


def _steps_line(st: Any) -> str:
    return (
        f"steps={st.steps} start={_h(st.start_s)} end={_h(st.end_s)} "
        f"delivered={_h(st.delivered_s)} count={_h(st.emitted_count)} "
        f"rid={_h(st.emitted_rid)} waiting={_h(st.num_waiting)} running={_h(st.num_running)}"
    )


def published(quick: bool) -> Iterable[str]:
    points, _ = v.load_points()
    sub = points[:: 12 if quick else 5]
    for i, r in enumerate(v.validate(sub)):
        yield (
            f"point {i} {r.point.gpu} {r.figure} published={r.published!r} "
            f"predicted={_x(r.predicted)} {r.note!r}"
        )


def capacity(quick: bool) -> Iterable[str]:
    with tempfile.TemporaryDirectory(prefix="virtual-identity-") as tmp:
        for name in ("steady",) if quick else ("steady", "burst"):
            path = write_shape(Path(tmp), name, seed=2)
            slos = [cap.parse_slo(s) for s in ("ttft_p99=1s", "itl_p99=120ms")]
            found = virtual_capacity(str(path), slos, min_duration_s=10.0, tolerance=0.05)
            for p in found.probes:
                yield (
                    f"capacity {name} probe rate={_x(p.rate)} {p.kind} "
                    f"passed={p.verdict.passed} {p.detail}"
                )
            yield (
                f"capacity {name}: answer={_x(found.answer)} "
                f"cap={_x(found.service_rate_cap)} {found.notes}"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    a = ap.parse_args()
    lines: list[str] = []
    for part in (schedulers, shapes, published, capacity):
        for line in part(a.quick):
            lines.append(line)
            print(line[:150], flush=True)
    a.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
