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

What is left is the machine: the server's speed changes during a command by more than any
probe's noise (one CI run: the search passed 19 req/s, the verification at 19 then fell behind
serving 14.9; in the next command the search's probe at 20.7 fell behind serving 18.4 and the
verification at 22.7 served all of it). Running the command again until one verifies is the
retry issue 21 rules out, and it did not help: both commands of that CI run failed. The command
now says so itself (`speed_change`, an `UNSTABLE SERVER` line), and `check_verified` takes that
answer only when the runs it names show it: one offered as much or more served at least
SPEED_CHANGE x what another served while it fell behind, or met a latency SLO the other broke
with a figure SPEED_CHANGE x lower (llama.cpp's runs hold a dozen requests at ~2 req/s: a 25 %
slower server shows in their TTFT, not beyond their served allowance). Where the runs agree
within SPEED_CHANGE, the verification must hold.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from harness.analysis import capacity as cap
from harness.cli import main


def verified_capacity(argv: list[str], out: Path) -> tuple[int, dict[str, Any], Path]:
    """Run `capacity` (`argv` without `--out`) once, with `--verify`; return its exit status,
    capacity.json and its folder."""
    rc = main([*argv, "--verify", "--out", str(out)])
    return rc, orjson.loads((out / "capacity.json").read_bytes()), out


def _served(run: dict[str, Any]) -> float:
    return float(run["steady"]["served_requests_per_s"])


def check_search(report: dict[str, Any]) -> None:
    """What the search's own records must show, whatever the server did afterwards: each run's
    verdict agrees with its figures, the answer passed a run at it, and it is not above what
    the server served when it fell behind."""
    answer = report["answer_requests_per_s"]
    assert answer is not None, report["probes"]
    for run in report["probes"]:
        steady = run["steady"]
        fell_behind = steady["served_deficit_requests"] > steady["served_allowance_requests"]
        over = {name for name, ratio in run["ratios"].items() if ratio is None or ratio > 1}
        checks = set(run["failed_checks"])
        assert ("served" in checks) == fell_behind, run
        assert checks - {"served", "stopped", "no_requests"} == over, run  # None: infinite
        assert run["passed"] == (not checks), run
    assert any(r["rate"] == answer and r["passed"] for r in report["probes"]), report["probes"]
    cap_rps = report["service_rate_cap_requests_per_s"]  # never above what the server served
    assert cap_rps is None or answer <= cap_rps


def check_verified(rc: int, report: dict[str, Any]) -> None:
    """The search is sound, and a fresh run at the answer meets the SLOs and 1.3x it does not,
    unless the command showed the server's speed change: then the two runs it names show it."""
    check_search(report)
    answer = report["answer_requests_per_s"]
    v = report["verification"]
    assert v is not None
    at, above = v["runs"]
    assert at["rate"] == answer
    assert abs(above["rate"] - 1.3 * answer) < 1e-6 * above["rate"]
    change = report["speed_change"]
    if not v["verified"] and change is not None:
        runs = [*report["probes"], *v["runs"]]
        fast, slow = runs[change["fast"]["run"]], runs[change["slow"]["run"]]
        check = change["check"]
        assert not slow["passed"] and check in slow["failed_checks"], slow  # it failed the check
        assert fast["rate"] >= slow["rate"], (fast, slow)  # offered as much, and did better:
        if check == "served":  # served SPEED_CHANGE x as much
            assert _served(fast) >= cap.SPEED_CHANGE * _served(slow), (fast, slow)
        else:  # met the latency SLO the other broke, with a figure SPEED_CHANGE x lower
            assert check not in fast["failed_checks"] and not slow.get("suspect"), (fast, slow)
            assert slow["values"][check] >= cap.SPEED_CHANGE * fast["values"][check], (fast, slow)
        assert rc == 1  # not verified: the command fails, and says why
        return
    assert at["passed"], at["reason"]  # the answer meets the SLOs ...
    if above["passed"] and (held := held_by_the_cap(report)) is not None:
        # ... and 1.3x it does not, unless the service-rate cap held the answer down: a search
        # probe above the answer passed and was set aside because a probe offered far more
        # (SPEED_CHANGE x or more) served less when it fell behind. A server can serve less the
        # further it is overloaded (capacity_evidence.speed_change), so such an answer is
        # conservative, and the command must say so: not verified, exit 1.
        assert not v["verified"] and rc == 1, (held, above)
        return
    assert not above["passed"], above["values"]  # ... and 1.3x it does not
    assert v["verified"] and rc == 0


def held_by_the_cap(report: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(a search probe above the answer that passed, the fell-behind probe offered at least
    SPEED_CHANGE x its rate whose served rate is the cap below it), or None."""
    answer, cap_rps = report["answer_requests_per_s"], report["service_rate_cap_requests_per_s"]
    if cap_rps is None:
        return None
    probes = report["probes"]
    passed = [p for p in probes if p["passed"] and p["rate"] > answer and p["rate"] > cap_rps]
    behind = [p for p in probes if "served" in p["failed_checks"] and _served(p) <= cap_rps]
    for p in passed:
        for q in behind:
            if q["rate"] >= cap.SPEED_CHANGE * p["rate"] and _served(p) > _served(q):
                return p, q
    return None


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
        with on_cores(self.rest):
            yield


@contextlib.contextmanager
def on_cores(cores: list[int]) -> Iterator[None]:
    """The calling thread (and what it starts meanwhile) held to `cores`, then back."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
