"""The README's max_num_seqs table on the simulator's virtual clock (no HTTP, no sleeping).

Replays `scenarios/max_num_seqs.toml`'s load phase (Poisson arrivals, lognormal prompts,
uniform outputs, drawn here with numpy from the scenario's numbers and seed) straight into the
scheduler and reports what the model does: the figures `python -m harness run` measures over
HTTP, minus the client's and the event loop's own noise. Seconds, not minutes, per row.

    python benchmarks/sim_max_num_seqs_table.py [--seqs 16 32 64 128 256]
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest  # noqa: E402
from harness.sim.settings import SimSettings  # noqa: E402
from harness.sim.virtual import run_virtual  # noqa: E402
from harness.units import parse_duration_s  # noqa: E402


def row(scenario: dict, max_num_seqs: int, batching: str) -> dict[str, float]:
    w = scenario["workload"]
    load = scenario["phases"][-1]
    rate = float(load["arrival"]["rate"])
    duration = parse_duration_s(load["duration"])
    rng = np.random.default_rng(scenario["seed"])
    n = int(rng.poisson(rate * duration))
    t = np.sort(rng.uniform(0, duration, n))
    p, o = w["prompt_tokens"], w["output_tokens"]
    mu = np.log(p["mean"]) - p["sigma"] ** 2 / 2  # lognormal with the given mean
    prompts = np.clip(rng.lognormal(mu, p["sigma"], n), p["min"], p["max"]).astype(int)
    outputs = rng.integers(o["min"], o["max"] + 1, n)
    sim = {**scenario["sim"], "max_num_seqs": max_num_seqs, "batching": batching}
    r = SimSettings.from_mapping(sim, "scenario").resolved()
    s = Scheduler(SchedulerConfig.from_resolved(r), r.roofline)
    arrivals = [(float(t[i]), SimRequest(i, int(prompts[i]), int(outputs[i]))) for i in range(n)]
    run = run_virtual(s, arrivals)
    ttft = np.array([v.ttft_s for v in run.times.values()])
    tokens = sum(len(v.token_s) for v in run.times.values())
    return {
        "tok_s": tokens / run.end_s,
        "itl_p50_ms": float(np.percentile(run.all_itl_s(), 50)) * 1e3,
        "itl_p99_ms": float(np.percentile(run.all_itl_s(), 99)) * 1e3,
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "preemptions": float(s.num_preemptions),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "max_num_seqs.toml"))
    ap.add_argument("--seqs", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    a = ap.parse_args()
    scenario = tomllib.loads(Path(a.scenario).read_text())
    print("| batching | max_num_seqs | output tok/s | ITL p50 | ITL p99 | TTFT p50 | TTFT p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = [("continuous", n) for n in a.seqs] + [("static", max(a.seqs))]
    for batching, n in rows:
        m = row(scenario, n, batching)
        print(
            f"| {batching} | {n} | {m['tok_s']:,.0f} | {m['itl_p50_ms']:.1f} ms "
            f"| {m['itl_p99_ms']:.1f} ms | {m['ttft_p50_s']:.2f} s | {m['ttft_p99_s']:.2f} s |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
