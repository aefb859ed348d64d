"""Benchmark: CPU seconds of the validation recompute on the virtual clock (the scheduler's step
is its inner loop: tests/orchestrate/test_validation.py, the capacity knees, compare's error
rates and the planner all run it), and a digest of the table it produced, so that a faster
scheduler is seen to compute the same figures.

    python benchmarks/bench_virtual_validation.py [--every N] [--repeat R] [--plan] [--few K]

`--every N` recomputes every Nth published point (default 4: 13 of 50); each repeat reports
its CPU seconds, then the median. `--plan` adds `plan`'s capacity at the operating points (the
other half of the validation test), timed apart. `--few K` runs the scheduler's Python-ints step
up to K running requests (`FEW_SEQUENCES`; 0: the numpy step always). Compare two commits or
two settings in one session (the machine is shared and its speed drifts): run both at once, one
per core, and report the ratio per pair.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.orchestrate import validation as v  # noqa: E402
from harness.sim import scheduler  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--few", type=int, default=None)
    a = ap.parse_args()
    if a.few is not None:
        scheduler.FEW_SEQUENCES = a.few
    points, _ = v.load_points()
    sub = points[:: max(1, a.every)]
    times = []
    for _ in range(a.repeat):
        t = time.process_time()
        rows = v.validate(sub)
        times.append(time.process_time() - t)
        digest = hashlib.sha1(v.markdown(rows).encode()).hexdigest()[:12]
        print(f"{len(sub)} of {len(points)} points: {times[-1]:.2f} CPU-s, table {digest}")
        if a.plan:
            t = time.process_time()
            rows = v.plan_rows(sub)
            digest = hashlib.sha1(v.markdown(rows).encode()).hexdigest()[:12]
            print(f"  plan's capacity: {time.process_time() - t:.2f} CPU-s, table {digest}")
    print(f"median {statistics.median(times):.2f} CPU-s")


if __name__ == "__main__":
    main()
