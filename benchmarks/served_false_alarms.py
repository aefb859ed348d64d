"""How often the served check calls a stable server "not kept up": seeded virtual runs of one
scenario at one rate, judged by `steady_part` with the exact in-flight allowance and with the
normal approximation it replaced (3 sqrt(2 L cv^2)).

    python benchmarks/served_false_alarms.py [--rate 0.5] [--duration 320] [--seeds 400]

The scenario is the one whose plan failed in a full run of 2026-12-03 (docs/testing.md):
tests/integration/test_llamacpp.py's plan scenario (prompts 24-48 tokens, 48-token answers,
Poisson arrivals), on the preset that run's `sim calibrate` fitted (benchmarks/data/fitted_llamacpp_ci.toml, its
capacity 1.32 req/s per replica on the virtual clock).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.analysis import steady  # noqa: E402
from harness.orchestrate.virtual_capacity import run_at  # noqa: E402
from tests.integration import test_llamacpp as it  # noqa: E402

PRESET = Path(__file__).resolve().parent / "data" / "fitted_llamacpp_ci.toml"


def scenario() -> str:
    """The plan scenario of tests/integration/test_llamacpp.py, on the preset above."""
    closed = f'requests = {it.REQUESTS}\narrival = {{ process = "closed", users = {it.USERS} }}'
    poisson = 'duration = "20s"\narrival = { process = "poisson", rate = 1.0 }'
    assert closed in it.SCENARIO
    sim = f'[sim]\ngpu = "my-gpu"\nmodel = "gemma-3-270m-q4_k_m"\npreset_file = "{PRESET}"\n'
    return it.SCENARIO.replace(closed, poisson) + sim


def normal_noise(mean: float) -> float:
    return steady.NOISE_Z * math.sqrt(2 * mean)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=0.5)
    ap.add_argument("--duration", type=float, default=320.0)
    ap.add_argument("--seeds", type=int, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.toml"
        path.write_text(scenario(), encoding="utf-8")
        runs = []
        t0 = time.perf_counter()
        for seed in range(args.seeds):
            _, vp = run_at(str(path), [f"seed={seed}"], args.rate, args.duration)
            runs.append(vp)
        print(f"{args.seeds} virtual runs at {args.rate:g} req/s for {args.duration:g} s "
              f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    exact = steady.in_flight_noise
    for name, noise in (("exact tail", exact), ("normal approximation", normal_noise)):
        steady.in_flight_noise = noise  # type: ignore[assignment]
        failed = []
        for seed, vp in enumerate(runs):
            part = steady.steady_part(vp.columns, vp.span_ns, vp.measured)
            if not part.served_ok:
                failed.append(
                    f"seed {seed}: short by {part.served_deficit_requests:.0f}, "
                    f"allowance {part.served_allowance_requests:.2f}"
                )
        print(f"{name}: {len(failed)} of {len(runs)} stable runs failed the served check")
        for line in failed:
            print("   ", line)
    steady.in_flight_noise = exact


if __name__ == "__main__":
    main()
