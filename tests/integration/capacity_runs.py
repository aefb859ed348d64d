"""`capacity --verify` against a real server, as the integration tests run it, and the CPU split
that makes it repeatable on a 2-core machine.

The verification asks two fresh runs to agree with the search: the answer meets the SLOs and
1.3x it does not. On a shared 2-core machine two things made that a coin toss (measured, see
docs/testing.md):

- Poisson arrivals near the knee: a 10-15 s probe at 90-120 % of the service rate holds a few
  dozen to a few hundred requests, and its tail latency swings by seconds from one seed to the
  next (vLLM at 32 req/s served 16.4 in one probe and 26.8 in another). The tests' scenarios use
  constant arrivals: the queue stays empty below the service rate and grows linearly above it,
  so the knee is sharp (vLLM, 8 slots, its engine on a core of its own: TTFT p90 42-73 ms at
  20-24 req/s, 0.24-1.2 s at 26).
- The engine and the load generator on the same core: vLLM binds its engine's OpenMP thread to
  one core and leaves the rest to its HTTP server; the test's own client, vLLM's HTTP server and
  the rest of the machine then migrated onto the engine's core. `split_cpus` gives the engine
  (vLLM's OpenMP thread, llama.cpp's one thread) its own core and everything else the others,
  as vLLM's CPU deployment guide does with VLLM_CPU_OMP_THREADS_BIND.

Still not enough to do without a second attempt (issue 21 asks for none): the speed of vLLM's
engine drifts down by ~10 % over a few minutes of a search (served 20.3, 20.2, 18.8 and then
18.4 req/s in one run), so an answer that passed its probe and confirmation can fail its
verification minutes later. Until that drift is understood the command runs again, into a fresh
folder, when its verification did not hold, at most ATTEMPTS times in all. A wrong answer (too
high, or one that 1.3x it still meets) fails every attempt.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from harness.cli import main

ATTEMPTS = 2


def verified_capacity(
    argv: list[str], out: Path, attempts: int = ATTEMPTS
) -> tuple[int, dict[str, Any], Path]:
    """Run `capacity` (`argv` without `--out`) with `--verify`; return the exit status,
    capacity.json and its folder, of the first attempt that verified or of the last one."""
    for attempt in range(1, attempts + 1):
        folder = out / f"attempt-{attempt}"
        rc = main([*argv, "--verify", "--out", str(folder)])
        report = orjson.loads((folder / "capacity.json").read_bytes())
        if (report.get("verification") or {}).get("verified"):
            break
    return rc, report, folder


def check_verified(rc: int, report: dict[str, Any]) -> None:
    """The answer exists, meets the SLOs in a run at it, and 1.3x it does not."""
    assert report["answer_requests_per_s"] is not None, report["probes"]
    v = report["verification"]
    assert v is not None
    at, above = v["runs"]
    assert at["rate"] == report["answer_requests_per_s"]
    assert abs(above["rate"] - 1.3 * report["answer_requests_per_s"]) < 1e-6 * above["rate"]
    assert at["passed"], at["reason"]  # the answer meets the SLOs ...
    assert not above["passed"], above["values"]  # ... and 1.3x it does not
    assert v["verified"] and rc == 0
    cap_rps = report["service_rate_cap_requests_per_s"]  # never above what the server served
    assert cap_rps is None or report["answer_requests_per_s"] <= cap_rps


class CpuSplit:
    """One core for a server's compute thread, the others for everything else (its HTTP side,
    the test's client). `engine` is None where there is nothing to split (one core, or no
    `taskset` to start the server with)."""

    def __init__(self) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        self.taskset = shutil.which("taskset")
        if len(cpus) < 2 or self.taskset is None:
            self.engine: int | None = None
            self.rest: list[int] = cpus
        else:
            self.engine, self.rest = cpus[0], cpus[1:]

    def server_prefix(self, cpus: list[int]) -> list[str]:
        """argv prefix that starts a server on `cpus` (nothing when there is no split)."""
        if self.engine is None or self.taskset is None:
            return []
        return [self.taskset, "--cpu-list", ",".join(map(str, cpus))]

    @contextlib.contextmanager
    def client(self) -> Iterator[None]:
        """The calling thread (the test's event loop) on the non-engine cores meanwhile."""
        if self.engine is None:
            yield
            return
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.rest)
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)
