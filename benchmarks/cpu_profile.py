"""Measure this CPU's matrix rate and memory bandwidth, for the simulator's CPU hardware profile.

Two numbers, the two sides of a roofline:
  - matmul GFLOP/s: numpy float32 square matmul (BLAS, all cores), 2*n^3 flops per product;
  - copy GB/s: numpy copy of an array far larger than the last-level cache, counted as
    bytes read + bytes written.
Each is the best of several repeats (the machine's capability, not its average under load);
the load average is printed with them because other processes on a shared machine lower both.

    /tmp/venv/bin/python benchmarks/cpu_profile.py [--json out.json]

These are upper bounds of what a numpy program gets; llama.cpp's quantized kernels reach a
different fraction of each (Q4_K matmuls are int8 dot products, not float32 FMAs), which is
what the simulator's efficiency factors absorb.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np


def best_seconds(fn: object, repeats: int) -> float:
    assert callable(fn)
    fn()  # warm-up: page faults, BLAS thread start
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_gflops(n: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    s = best_seconds(lambda: np.matmul(a, b, out=out), repeats)
    return 2.0 * n**3 / s / 1e9


def matvec_gflops(n: int, repeats: int) -> float:
    """float32 matrix-vector product: the batch-1 decode shape (bandwidth-bound)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n), dtype=np.float32)
    x = rng.standard_normal(n, dtype=np.float32)
    s = best_seconds(lambda: a @ x, repeats)
    return 2.0 * n * n / s / 1e9


def copy_gbs(mib: int, repeats: int) -> float:
    src = np.ones(mib * 1024 * 1024 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    s = best_seconds(lambda: np.copyto(dst, src), repeats)
    return 2.0 * src.nbytes / s / 1e9


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048, help="matmul size")
    ap.add_argument("--copy-mib", type=int, default=512, help="copy array size (MiB)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    load_before = os.getloadavg()[0]
    result = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "numpy": np.__version__,
        "matmul_f32_gflops": round(matmul_gflops(args.n, args.repeats), 1),
        "matvec_f32_gflops": round(matvec_gflops(4096, args.repeats * 3), 2),
        "copy_gbs": round(copy_gbs(args.copy_mib, args.repeats), 2),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }
    for k, v in result.items():
        print(f"{k:22s} {v}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
