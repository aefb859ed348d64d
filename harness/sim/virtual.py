"""Drive the scheduler on a virtual clock: no event loop, no sleeping, exact model times.

Used by the tests (invariants, anchors), the step benchmark, the deployment planner and
anyone who wants to ask "what would the simulator do with these arrivals" in milliseconds of
CPU. A request arriving at t enters the API server's intake then (scheduler.py, "The API
server"); a step that starts at t admits what the intake released by t, ends at t + duration and
its tokens are delivered at `StepOutput.delivered_s` (that end plus the API server's streaming).

`run_virtual` keeps per-request token times in Python lists (handy for small tests);
`run_virtual_steps` keeps one row per step and the emitted request ids as one array, so that
runs of millions of tokens stay cheap (the planner turns them into records with numpy).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.sim.scheduler import Scheduler, SimRequest, StepOutput


@dataclass(slots=True)
class VirtualTimes:
    """Model times (seconds) of one request."""

    arrival_s: float
    admitted_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    preemptions: int = 0

    @property
    def ttft_s(self) -> float:
        return self.token_s[0] - self.arrival_s

    @property
    def itl_s(self) -> np.ndarray:
        return np.diff(np.asarray(self.token_s))

    @property
    def e2e_s(self) -> float:
        return self.token_s[-1] - self.arrival_s


@dataclass(slots=True)
class VirtualRun:
    times: dict[int, VirtualTimes]
    end_s: float
    steps: int

    def output_tokens_per_s(self, start_s: float = 0.0) -> float:
        total = sum(len(t.token_s) for t in self.times.values())
        return total / (self.end_s - start_s)

    def all_itl_s(self) -> np.ndarray:
        parts = [t.itl_s for t in self.times.values() if len(t.token_s) > 1]
        return np.concatenate(parts) if parts else np.zeros(0)


StepHook = Callable[[Scheduler, StepOutput], None]


@dataclass(frozen=True, slots=True)
class VirtualSteps:
    """A virtual run, one row per step that did work. Times in model seconds."""

    start_s: np.ndarray  # float64, when each step began
    end_s: np.ndarray  # float64, when it ended
    delivered_s: np.ndarray  # float64, when its tokens were out of the API server (>= end_s)
    emitted_count: np.ndarray  # int64, tokens emitted by each step
    emitted_rid: np.ndarray  # int64, the rids of every emitted token, step after step
    num_waiting: np.ndarray  # int64, requests waiting after the step: arrived by its start and not
    #                          admitted by it (in the API server's intake or the waiting queue),
    #                          plus any it preempted (read after scheduler.step())
    num_running: np.ndarray  # int64, requests running after the step
    steps: int

    @property
    def token_end_s(self) -> np.ndarray:
        """The model time every emitted token was delivered, aligned with `emitted_rid`."""
        return np.repeat(self.delivered_s, self.emitted_count)


# A client that answers finished requests with new ones (a closed loop, a concurrency cap):
# called with the rids that finished in a step and the time the client saw them end (the
# step's delivery); returns (arrival time, request) pairs, each no earlier than that time.
FollowUp = Callable[[list[int], float], list[tuple[float, SimRequest]]]


def _drive(
    scheduler: Scheduler,
    arrivals: Sequence[tuple[float, SimRequest]],
    on_step: Callable[[float, StepOutput], None],
    max_steps: int,
    follow: FollowUp | None = None,
) -> tuple[float, int]:
    """The virtual clock itself: add what arrived, step, advance. Returns (end time, steps):
    the end is the last step's end or its delivery, whichever is later. `follow` adds arrivals
    as requests finish."""
    order = [(t, k, r) for k, (t, r) in enumerate(arrivals)]
    heapq.heapify(order)
    tie = len(order)
    t = 0.0
    steps = 0
    last_delivery = 0.0
    while True:
        if scheduler.idle:
            if not order:
                break
            t = max(t, order[0][0])
        while order and order[0][0] <= t:
            at, _, req = heapq.heappop(order)
            scheduler.add(req, at)
        out = scheduler.step(t)
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"no progress after {max_steps} steps")
        on_step(t, out)
        if out.duration_s > 0:
            t = out.start_s + out.duration_s  # StepOutput.end_s
            last_delivery = max(last_delivery, out.delivered_s)
        if follow is not None and out.finished:
            for at, req in follow(out.finished, out.delivered_s):
                heapq.heappush(order, (at, tie, req))
                tie += 1
        if out.duration_s <= 0:  # nothing could run: on to the next arrival or intake completion
            nexts = [order[0][0]] if order else []
            if scheduler.next_intake_s is not None:
                nexts.append(scheduler.next_intake_s)
            t = max(t, min(nexts)) if nexts else t
    return max(t, last_delivery), steps


def run_virtual_steps(
    scheduler: Scheduler,
    arrivals: Sequence[tuple[float, SimRequest]],
    max_steps: int = 10_000_000,
    follow: FollowUp | None = None,
) -> VirtualSteps:
    """Run `arrivals` (time in seconds, request) until every request ends, keeping one row per
    step; `follow` adds requests as others finish (closed loops, concurrency caps). Raises
    RuntimeError if `max_steps` is exceeded (a scheduler that stopped progressing)."""
    start: list[float] = []
    end: list[float] = []
    delivered: list[float] = []
    count: list[int] = []
    rids: list[np.ndarray] = []
    waiting: list[int] = []
    running: list[int] = []

    static = scheduler.config.static

    def keep(t: float, out: StepOutput) -> None:
        if out.duration_s <= 0:
            return
        start.append(out.start_s)
        end.append(out.start_s + out.duration_s)  # StepOutput.end_s
        delivered.append(out.delivered_s)
        count.append(len(out.emitted))
        rids.append(out.emitted)
        # num_waiting + num_intake, and num_running (a static batch's: `Scheduler.num_running`)
        waiting.append(len(scheduler.waiting) + len(scheduler.api))
        running.append(scheduler.num_running if static else len(scheduler.running))

    _, steps = _drive(scheduler, arrivals, keep, max_steps, follow)
    return VirtualSteps(
        start_s=np.asarray(start, np.float64),
        end_s=np.asarray(end, np.float64),
        delivered_s=np.asarray(delivered, np.float64),
        emitted_count=np.asarray(count, np.int64),
        emitted_rid=np.concatenate(rids).astype(np.int64) if rids else np.zeros(0, np.int64),
        num_waiting=np.asarray(waiting, np.int64),
        num_running=np.asarray(running, np.int64),
        steps=steps,
    )


def run_virtual(
    scheduler: Scheduler,
    arrivals: Sequence[tuple[float, SimRequest]],
    on_step: StepHook | None = None,
    max_steps: int = 10_000_000,
) -> VirtualRun:
    """Run `arrivals` (time in seconds, request), sorted by time, until every request ends.

    Returns the per-request model times. Raises RuntimeError if `max_steps` is exceeded
    (a scheduler that stopped making progress).
    """
    times = {req.rid: VirtualTimes(arrival_s=t) for t, req in arrivals}

    def keep(t: float, out: StepOutput) -> None:
        for rid in out.admitted:
            times[rid].admitted_s = out.start_s
        for rid in out.preempted:
            times[rid].preemptions += 1
        t_end = out.delivered_s
        for rid in out.emitted.tolist():
            times[rid].token_s.append(t_end)
        if on_step is not None:
            on_step(scheduler, out)

    end_s, steps = _drive(scheduler, arrivals, keep, max_steps)
    return VirtualRun(times=times, end_s=end_s, steps=steps)
