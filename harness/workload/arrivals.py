"""Arrival processes: when requests are *intended* to be sent, drawn ahead of the run.

Each open-loop process is a small frozen dataclass with one pure method:

    times(rng, duration_s, count) -> np.ndarray
        Intended send times in seconds from the phase start, non-decreasing. Exactly one of
        duration_s (all arrivals in [0, duration_s)) and count (the first `count` arrivals)
        is given.

No clock, no sleep, no global randomness: the generator comes from the scenario's seed.
The schedule is absolute, so a late wake-up in the engine never shifts later arrivals.

- Constant(rate):            t_k = k / rate
- Poisson(rate):             gaps ~ Exponential(mean 1/rate)
- Gamma(rate, burstiness b): gaps ~ Gamma(shape=b, scale=1/(rate*b)); mean gap 1/rate and
                             squared coefficient of variation 1/b: b=1 is Poisson, b<1 burstier
- Ramp(start, end, shape):   a Poisson process whose rate moves from `start` to `end` over the
                             phase, linearly or exponentially; drawn by time rescaling: unit-rate
                             arrivals u_k mapped through the inverse of Lambda(t) = int_0^t rate
- Trace(file, format, ...):  times (and lengths, prefix blocks) replayed from a trace file
                             (harness.workload.trace: formats, windows, scaling)
- Closed(users, think_time): not a schedule: each of N users sends its next request when its
                             last one ends plus think_time; the engine computes intended times
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.config.validate import Table
from harness.workload.trace import Trace as Trace  # an arrival process too: re-exported
from harness.workload.trace import parse_trace

_CHUNK = 4096  # arrivals drawn per batch when filling a duration


def _fill_duration(draw_gaps: Callable[[int], np.ndarray], duration_s: float) -> np.ndarray:
    """Cumulate gaps drawn in batches until the duration is passed."""
    parts: list[np.ndarray] = []
    t0 = 0.0
    while True:
        t = t0 + np.cumsum(draw_gaps(_CHUNK))
        parts.append(t)
        if t[-1] >= duration_s:
            break
        t0 = float(t[-1])
    out = np.concatenate(parts)
    return out[out < duration_s]


def _first_at_zero(gaps: np.ndarray) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(gaps[:-1]))) if len(gaps) else gaps


def _renewal_times(
    draw_gaps: Callable[[int], np.ndarray], duration_s: float | None, count: int | None
) -> np.ndarray:
    """Arrivals of a renewal process with i.i.d. gaps: the first `count` (the first at 0), or all
    before `duration_s`."""
    if count is not None:
        return _first_at_zero(draw_gaps(count))
    assert duration_s is not None
    return _fill_duration(draw_gaps, duration_s)


@dataclass(frozen=True, slots=True)
class Constant:
    rate: float

    def times(
        self, rng: np.random.Generator, duration_s: float | None, count: int | None
    ) -> np.ndarray:
        if count is None:
            assert duration_s is not None
            count = math.ceil(duration_s * self.rate - 1e-9)
        return np.arange(count, dtype=np.float64) / self.rate

    def __str__(self) -> str:
        return f"Constant({self.rate:g}/s)"


@dataclass(frozen=True, slots=True)
class Poisson:
    rate: float

    def times(
        self, rng: np.random.Generator, duration_s: float | None, count: int | None
    ) -> np.ndarray:
        return _renewal_times(lambda n: rng.exponential(1.0 / self.rate, size=n), duration_s, count)

    def __str__(self) -> str:
        return f"Poisson({self.rate:g}/s)"


@dataclass(frozen=True, slots=True)
class Gamma:
    rate: float
    burstiness: float

    def _gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.gamma(self.burstiness, 1.0 / (self.rate * self.burstiness), size=n)

    def times(
        self, rng: np.random.Generator, duration_s: float | None, count: int | None
    ) -> np.ndarray:
        return _renewal_times(lambda n: self._gaps(rng, n), duration_s, count)

    def __str__(self) -> str:
        return f"Gamma({self.rate:g}/s, burstiness={self.burstiness:g})"


@dataclass(frozen=True, slots=True)
class Ramp:
    start: float
    end: float
    shape: str  # "linear" | "exponential"
    duration_s: float

    def cumulative(self, t: np.ndarray) -> np.ndarray:
        """Lambda(t): expected arrivals by time t."""
        d, a, b = self.duration_s, self.start, self.end
        if self.shape == "linear" or a == b:
            return a * t + (b - a) * t * t / (2 * d)
        k = math.log(b / a) / d
        return a * np.expm1(k * t) / k

    def inverse_cumulative(self, y: np.ndarray) -> np.ndarray:
        d, a, b = self.duration_s, self.start, self.end
        if a == b:
            return y / a
        if self.shape == "linear":
            c = (b - a) / (2 * d)
            return (-a + np.sqrt(a * a + 4 * c * y)) / (2 * c)
        k = math.log(b / a) / d
        return np.log1p(y * k / a) / k

    def rate_at(self, t: float) -> float:
        f = t / self.duration_s
        if self.shape == "linear":
            return self.start + (self.end - self.start) * f
        return self.start * (self.end / self.start) ** f

    def times(
        self, rng: np.random.Generator, duration_s: float | None, count: int | None
    ) -> np.ndarray:
        total = float(self.cumulative(np.array([self.duration_s]))[0])
        u = _fill_duration(lambda n: rng.exponential(1.0, size=n), total)
        t = self.inverse_cumulative(u)
        return t[:count] if count is not None else t

    def __str__(self) -> str:
        return f"Ramp({self.start:g}->{self.end:g}/s {self.shape} over {self.duration_s:g}s)"


@dataclass(frozen=True, slots=True)
class Closed:
    users: int
    think_time_s: float

    def __str__(self) -> str:
        return f"Closed({self.users} users, think {self.think_time_s:g}s)"


OpenLoop = Constant | Poisson | Gamma | Ramp | Trace
Arrival = OpenLoop | Closed
PROCESS_NAMES = ("constant", "poisson", "gamma", "ramp", "closed", "trace")


def parse_arrival(
    t: Table, duration_s: float | None, base_dir: Path, max_rows: int | None = None
) -> Arrival:
    """Build an arrival process from a phase's `arrival` table; raises ConfigError. `max_rows`:
    the plan's size limit, which a trace's window may not pass (harness.workload.trace)."""
    process = t.str("process", choices=PROCESS_NAMES)
    result: Arrival
    if process == "constant":
        result = Constant(t.rate_per_s("rate"))
    elif process == "poisson":
        result = Poisson(t.rate_per_s("rate"))
    elif process == "gamma":
        result = Gamma(
            t.rate_per_s("rate"), t.float("burstiness", 1.0, min=0.0, exclusive_min=True)
        )
    elif process == "ramp":
        start, end = t.rate_per_s("start"), t.rate_per_s("end")
        shape = t.str("shape", "linear", choices=("linear", "exponential"))
        if duration_s is None:
            t.fail(
                "process", "a ramp needs the phase to have a `duration` (it ramps over that time)"
            )
        result = Ramp(start, end, shape, duration_s)
    elif process == "closed":
        result = Closed(t.int("users", min=1, max=1_000_000), t.duration_s("think_time", 0.0))
    else:
        result = parse_trace(t, base_dir, max_rows)
    t.finish()
    return result
