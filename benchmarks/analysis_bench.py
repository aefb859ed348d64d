"""Analysis speed: a journal holding N million token stamps, read and summarised into a result.

    /tmp/venv/bin/python benchmarks/analysis_bench.py [--stamps 10_000_000] [--per-request 250]
        [--journal-version 2|1]

Writes a synthetic journal (version 2: stamp deltas as base64 int32 arrays; version 1: JSON
lists) (one phase, requests of `--per-request` one-token chunks with
jittered 20 ms gaps) to a temporary file, then times `read_journal` and `build_result`
separately (best of `--repeat`). Goal (issue 8): 10 M stamps in < 2 s in total.
`peak_rss_growth_mib`: how far reading and building raised the process's peak resident memory
(Linux `VmHWM`) above its peak before (the plan size limit's cost per request and per stamp:
docs/reliability.md, "Plan size limit").
"""

from __future__ import annotations

import argparse
import binascii
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.record.journal import read_journal  # noqa: E402


def write_journal(
    path: Path, stamps: int, per_request: int, seed: int = 1, version: int = 2
) -> int:
    rng = np.random.default_rng(seed)
    n = stamps // per_request
    header = {
        "t": "header",
        "version": version,
        "scenario": {},
        "scenario_name": "bench",
        "target": {"kind": "http"},
        "environment": {},
        "started_at": "2025-01-01T00:00:00Z",
        "phases": [
            {
                "name": "main",
                "warmup": False,
                "closed": False,
                "max_concurrency": None,
                "arrival": "Poisson",
                "planned_duration_s": 600.0,
                "planned_requests": n,
            }
        ],
        "slo": [],
        "plan": {},
        "options": {},
    }
    with open(path, "wb") as f:
        f.write(orjson.dumps(header) + b"\n")
        intended = np.sort(rng.uniform(0, 600e9, n)).astype(np.int64)
        for i in range(n):
            gaps = rng.normal(20e6, 2e6, per_request).astype(np.int64)
            gaps[0] = 50_000_000
            i0 = int(intended[i])
            d = {
                "t": "rec",
                "seq": i,
                "ph": 0,
                "i": i0,
                "s": i0 + 1000,
                "h": i0 + 40_000_000,
                "e": i0 + int(gaps.sum()),
                "st": 200,
                "pt": 100,
                "ot": per_request,
                "ppt": 100,
                "pot": per_request,
                "u": 1,
            }
            if version == 1:
                d["c"] = gaps.tolist()
            else:
                d["c4"] = binascii.b2a_base64(gaps.astype("<i4").tobytes(), newline=False).decode()
            f.write(orjson.dumps(d) + b"\n")
        f.write(
            orjson.dumps(
                {
                    "t": "end",
                    "end_ns": 610_000_000_000,
                    "complete": True,
                    "stop_reason": None,
                    "phase_starts_ns": [0],
                    "phase_ends_ns": [600_000_000_000],
                    "cpu_s": 1.0,
                    "loop_lag_ns": [1000] * 100,
                    "t0_wall_s": 0.0,
                }
            )
            + b"\n"
        )
    return n * per_request


def peak_rss_mib() -> float | None:
    """The process's peak resident memory (Linux /proc VmHWM), None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--stamps", type=lambda s: int(s.replace("_", "")), default=10_000_000)
    p.add_argument("--per-request", type=int, default=250)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--journal-version", type=int, choices=(1, 2), default=2)
    a = p.parse_args()
    from harness.analysis.result import build_result

    with tempfile.TemporaryDirectory() as td:
        path = Path(td) / "bench.journal.jsonl"
        total = write_journal(path, a.stamps, a.per_request, version=a.journal_version)
        hwm_before = peak_rss_mib()
        best_read = best_build = float("inf")
        for _ in range(a.repeat):
            t = time.perf_counter()
            j = read_journal(path)
            t1 = time.perf_counter()
            r = build_result(j, str(path))
            t2 = time.perf_counter()
            best_read, best_build = min(best_read, t1 - t), min(best_build, t2 - t1)
            del j
        hwm_after = peak_rss_mib()
        out = {
            "journal_version": a.journal_version,
            "stamps": total,
            "requests": total // a.per_request,
            "journal_mb": path.stat().st_size / 1e6,
            "read_journal_s": best_read,
            "build_result_s": best_build,
            "total_s": best_read + best_build,
            "itl_count": r["summary"]["latency_ms"]["itl"]["count"],
            "peak_rss_growth_mib": None
            if hwm_before is None or hwm_after is None
            else round(hwm_after - hwm_before, 1),
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main()
