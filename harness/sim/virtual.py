"""Drive the scheduler on a virtual clock: no event loop, no sleeping, exact model times.

Used by the tests (invariants, anchors), the step benchmark and anyone who wants to ask
"what would the simulator do with these arrivals" in milliseconds of CPU. A step that
starts at t admits what arrived by t and emits its tokens at t + duration.
"""

from __future__ import annotations

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
    order = sorted(arrivals, key=lambda a: a[0])
    times = {req.rid: VirtualTimes(arrival_s=t) for t, req in order}
    t = 0.0
    i = 0
    steps = 0
    while i < len(order) or not scheduler.idle:
        if scheduler.idle and i < len(order):
            t = max(t, order[i][0])
        while i < len(order) and order[i][0] <= t:
            scheduler.add(order[i][1])
            i += 1
        out = scheduler.step()
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"no progress after {max_steps} steps")
        for rid in out.admitted:
            times[rid].admitted_s = t
        for rid in out.preempted:
            times[rid].preemptions += 1
        t_end = t + out.duration_s
        for rid in out.emitted.tolist():
            times[rid].token_s.append(t_end)
        if on_step is not None:
            on_step(scheduler, out)
        t = t_end if out.duration_s > 0 else (order[i][0] if i < len(order) else t)
    return VirtualRun(times=times, end_s=t, steps=steps)
