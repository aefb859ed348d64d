"""Shards: the one rule that splits a plan among N workers, running one shard, and merging
the shards' outcomes and counters. The engine, worker processes (`harness.client.workers`) and
Ray actors (`harness.client.raycluster`) all use it.

The rule: open-loop request k of a phase belongs to shard k mod N (round-robin keeps the arrival
shape: every shard sees the same rate curve, 1/N as dense); closed-loop user slot u belongs to
shard u mod N, and with a request count, request k goes with user slot k mod users, so no shard
idles while another still has its users' work. Sequence numbers, prompts and lengths are the
plan's, so the union of the shards is exactly the single-process run's set of requests.

A shard is `(index, count)`; `(0, 1)` is the whole plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict
from typing import Any

import orjson

from harness.client.state import Counters, RunOutcome
from harness.record.journal import encode_record
from harness.record.records import Record
from harness.workload.plan import Plan

Shard = tuple[int, int]
WHOLE: Shard = (0, 1)
FLUSH_INTERVAL_S = 0.2  # a shard ships its records at least this often


def in_shard(k: int, shard: Shard) -> bool:
    """Open-loop request k of a phase belongs to shard[0] of shard[1]."""
    return k % shard[1] == shard[0]


def owned_below(k: int, shard: Shard) -> int:
    """How many of the indices 0..k-1 belong to the shard (i % N == index)."""
    return max(0, -(-(k - shard[0]) // shard[1]))


def closed_users(users: int, shard: Shard) -> list[int]:
    """The closed-loop user slots (0..users-1) a shard runs: u % N == index, so none is idle."""
    return [u for u in range(users) if in_shard(u, shard)]


def closed_request_in_shard(k: int, users: int, shard: Shard) -> bool:
    """Closed-loop request k (of a phase with a request count) goes with user slot k mod users."""
    return in_shard(k % users, shard)


def closed_requests_of_shard(limit: int | None, users: int, shard: Shard) -> Iterator[int]:
    """This shard's closed-loop request indices, in order, up to `limit` (None: without end):
    those whose user slot (k mod users) it runs, so a shard with more user slots takes
    proportionally more requests."""
    k = 0
    while limit is None or k < limit:
        if shard[1] == 1 or closed_request_in_shard(k, users, shard):
            yield k
        k += 1


PRECONNECT_WINDOW_S = 1.0  # the pool is warmed for the first phase's first second ...
PRECONNECT_MAX = 1024  # ... up to this many (servers and gateways cap connections) ...
PRECONNECT_BUDGET_S = 5.0  # ... opened within this long before t0


def preconnect_count(plan: Plan, shard: Shard) -> int:
    """Connections this shard needs at once at the start: the first phase's closed-loop user
    slots, or its open-loop requests intended in the first PRECONNECT_WINDOW_S (capped by
    max_concurrency), at most PRECONNECT_MAX."""
    if not plan.phases:
        return 0
    p = plan.phases[0]
    if p.closed:
        n = len(closed_users(p.users, shard))
    else:
        k = int((p.offsets_s < PRECONNECT_WINDOW_S).sum())
        n = owned_below(k, shard)
        if p.max_concurrency:
            n = min(n, -(-p.max_concurrency // shard[1]))
    return min(n, PRECONNECT_MAX)


class LineSink:
    """The engine's sink in a shard: Records encoded as journal lines, shipped in batches."""

    def __init__(self) -> None:
        self.buf: list[bytes] = []

    def __call__(self, r: Record) -> None:
        self.buf.append(orjson.dumps(encode_record(r)) + b"\n")

    def event(self, d: dict[str, Any]) -> None:
        """A journal line other than a record (the engine's `events`: a `suspect` line)."""
        self.buf.append(orjson.dumps(d) + b"\n")

    def take(self) -> bytes:
        data = b"".join(self.buf)
        self.buf.clear()
        return data


CPU_PEAK_WINDOW_S = 1.0  # a shard's CPU peak: its busiest second (the progress line's beat)


class CpuPeak:
    """A process's busiest stretch of CPU_PEAK_WINDOW_S: fed (wall s, process CPU s) samples in
    time order, `peak` is the largest CPU share of one core over the spans from each sample back
    to the newest sample at least a window before it (over the whole run while it is shorter
    than a window; None before two samples)."""

    def __init__(self, window_s: float = CPU_PEAK_WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, float]] = deque()
        self.full: float | None = None  # the peak over spans of at least a window
        self.short: float | None = None  # the share since the first sample, under a window

    def sample(self, wall_s: float, cpu_s: float) -> None:
        self.samples.append((wall_s, cpu_s))
        while len(self.samples) > 2 and wall_s - self.samples[1][0] >= self.window_s:
            self.samples.popleft()
        w0, c0 = self.samples[0]
        if wall_s <= w0:
            return
        share = (cpu_s - c0) / (wall_s - w0)
        if wall_s - w0 >= self.window_s:
            self.full = share if self.full is None else max(self.full, share)
        else:
            self.short = share

    @property
    def peak(self) -> float | None:
        return self.full if self.full is not None else self.short


async def sample_cpu(peak: CpuPeak, interval_s: float = FLUSH_INTERVAL_S) -> None:
    """Feed `peak` this process's CPU time every interval_s, until cancelled (a task beside the
    engine: in each shard, and in a one-process run)."""
    while True:
        peak.sample(time.monotonic(), time.process_time())
        await asyncio.sleep(interval_s)


def note_cpu(outcome: RunOutcome, peak: CpuPeak) -> None:
    """A last sample, then the engine's own CPU figures in its account (one per engine): its
    `cpu_s` and `cpu_peak_share`, which merging the shards' outcomes would otherwise add up or
    lose (harness.analysis.scale_out reads them)."""
    peak.sample(time.monotonic(), time.process_time())
    for a in outcome.accounts:
        a["cpu_s"] = outcome.cpu_s
        a["cpu_peak_share"] = peak.peak


def counters_snapshot(c: Counters) -> dict[str, Any]:
    return asdict(c)


def outcome_dict(o: RunOutcome) -> dict[str, Any]:
    return asdict(o)


async def run_shard(
    run: Callable[[LineSink, Counters], Awaitable[RunOutcome]],
    ship: Callable[[bytes, dict[str, Any]], None],
) -> RunOutcome:
    """Run one shard: `run(sink, counters)` executes it (an Engine over the shard's config), and
    ship(lines, counters) is called every FLUSH_INTERVAL_S and once at the end. Shared by
    worker processes and Ray actors. The outcome's account (one, this shard's) gains the
    shard's own `cpu_s` and `cpu_peak_share` (its busiest second: note_cpu)."""
    sink = LineSink()
    counters = Counters()
    cpu = CpuPeak()

    async def shipper() -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            ship(sink.take(), counters_snapshot(counters))

    tasks = [asyncio.create_task(shipper()), asyncio.create_task(sample_cpu(cpu))]
    try:
        outcome = await run(sink, counters)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    note_cpu(outcome, cpu)
    ship(sink.take(), counters_snapshot(counters))
    return outcome


def merge_outcomes(outcomes: list[dict[str, Any]], t0_ns: int, t0_wall_s: float) -> RunOutcome:
    """One RunOutcome for all shards: the run ends with the last shard, a phase starts with
    its earliest shard and ends with its latest, CPU adds up, loop-lag samples are pooled, and
    each shard's account of its requests is kept."""
    n_phases = max((len(o["phase_starts_ns"]) for o in outcomes), default=0)
    starts = [
        min(o["phase_starts_ns"][i] for o in outcomes if len(o["phase_starts_ns"]) > i)
        for i in range(n_phases)
    ]
    ends = [
        max(o["phase_ends_ns"][i] for o in outcomes if len(o["phase_ends_ns"]) > i)
        for i in range(n_phases)
    ]
    reasons = [o["stop_reason"] for o in outcomes if o["stop_reason"]]
    return RunOutcome(
        t0_ns,
        t0_wall_s,
        max(o["end_ns"] for o in outcomes),
        starts,
        ends,
        all(o["complete"] for o in outcomes),
        reasons[0] if reasons else None,
        sum(o["cpu_s"] for o in outcomes),
        sorted(x for o in outcomes for x in o["loop_lag_ns"]),
        [a for o in outcomes for a in o.get("accounts", [])],
    )


def combined_counters(shards: list[dict[str, Any]]) -> Counters:
    """The shards' counter snapshots added up (the phase: the last one named)."""
    c = Counters()
    for w in shards:
        c.sent += w.get("sent", 0)
        c.in_flight += w.get("in_flight", 0)
        c.completed += w.get("completed", 0)
        c.failed += w.get("failed", 0)
        c.output_tokens += w.get("output_tokens", 0)
        c.phase = w.get("phase") or c.phase
    return c


__all__ = [
    "CPU_PEAK_WINDOW_S",
    "FLUSH_INTERVAL_S",
    "CpuPeak",
    "WHOLE",
    "LineSink",
    "Shard",
    "closed_request_in_shard",
    "closed_users",
    "combined_counters",
    "counters_snapshot",
    "in_shard",
    "merge_outcomes",
    "note_cpu",
    "outcome_dict",
    "owned_below",
    "preconnect_count",
    "run_shard",
    "sample_cpu",
]
