"""Capacity planning, the pure part: SLO checks on probe results, the rate search, early stop
and replica counts. `harness.commands.capacity` runs the probes; everything here is testable
without a server.

Theory of operation
-------------------
`RateSearch` holds the highest rate that met every SLO (`lo`) and the lowest that did not
(`hi`). Without a failure yet it doubles the rate; once both exist it bisects geometrically
(sqrt(lo * hi)) until hi / lo - 1 <= the tolerance, or the probe budget runs out. The answer
is then confirmed by longer runs at `lo`; a failed confirmation makes it the new `hi` and the
search goes on below it. A probe stops early when the queue clearly grows without bound
(`QueueWatch`), which breaks any latency SLO measured from the schedule, so overloaded probes
cost seconds, not the full duration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.config.scenario import METRICS_WITH_PERCENTILES, STATS
from harness.errors import UsageError
from harness.units import parse_duration_s, parse_rate_per_s

DEFAULT_TOLERANCE = 0.05         # stop bisecting when hi/lo - 1 is at most this
DEFAULT_MAX_PROBES = 20          # doubling from 1 to 1000 req/s, then bisecting to 5 %: ~15
DEFAULT_HEADROOM = 0.2           # plan replicas to run at most 80 % of their capacity
QUEUE_MIN_OBSERVED_S = 1.0       # look at a probe this long before judging its queue
QUEUE_GROWTH_SAMPLES = 6         # in-flight rose (or held) over this many samples in a row
QUEUE_GROWTH_FACTOR = 2.0        # ... and ended at least this many times where it was


@dataclass(frozen=True, slots=True)
class Slo:
    name: str        # e.g. ttft_p99
    metric: str
    stat: str
    limit_ms: float


def parse_slo(text: str) -> Slo:
    """'ttft_p99=2s' -> Slo. Raises UsageError naming --slo and what is allowed."""
    name, sep, value = text.partition("=")
    name = name.strip()
    metric, _, stat = name.rpartition("_")
    if not sep or metric not in METRICS_WITH_PERCENTILES or stat not in STATS:
        raise UsageError(f"--slo {text!r}: expected METRIC_STAT=DURATION such as ttft_p99=2s, with METRIC in "
                         f"{', '.join(METRICS_WITH_PERCENTILES)} and STAT in {', '.join(STATS)}")
    try:
        limit = parse_duration_s(value.strip(), allow_zero=False)
    except ValueError as exc:
        raise UsageError(f"--slo {name}: {exc}") from None
    return Slo(name, metric, stat, limit * 1e3)


def parse_target_load(text: str) -> float:
    try:
        return parse_rate_per_s(text)
    except ValueError as exc:
        raise UsageError(f"--target-load: {exc}") from None


@dataclass
class Verdict:
    passed: bool
    values_ms: dict[str, float | None]
    ratios: dict[str, float]          # value / limit: above 1 breaks the SLO
    binding: str                      # the SLO closest to (or furthest past) its limit
    reason: str = ""


def judge(result: dict[str, Any], slos: list[Slo], max_error_share: float = 0.01) -> Verdict:
    """Did this probe meet every SLO? Errors above max_error_share and an incomplete run fail it."""
    s = result["summary"]
    values, ratios = {}, {}
    for slo in slos:
        v = s["latency_ms"][slo.metric][slo.stat]
        values[slo.name] = v
        ratios[slo.name] = math.inf if v is None else v / slo.limit_ms
    binding = max(ratios, key=lambda k: ratios[k]) if ratios else ""
    due = s["requests"]["planned_or_due"] or 1
    err = (s["requests"]["failed"] + s["requests"].get("not_sent", 0)) / due
    reason = ""
    if not result.get("complete"):
        reason = f"stopped: {result.get('stop_reason')}"
    elif err > max_error_share:
        reason = f"errors {err:.1%} > {max_error_share:.0%}"
    elif ratios and ratios[binding] > 1:
        reason = f"{binding} {values[binding]:.1f} ms > {next(x.limit_ms for x in slos if x.name == binding):g} ms"
    return Verdict(not reason, values, ratios, binding, reason)


@dataclass
class RateSearch:
    start_rate: float
    max_rate: float
    tolerance: float = DEFAULT_TOLERANCE
    max_probes: int = DEFAULT_MAX_PROBES
    lo: float | None = None           # highest rate that passed
    hi: float | None = None           # lowest rate that failed
    probes: int = 0
    history: list[tuple[float, bool]] = field(default_factory=list)

    def record(self, rate: float, passed: bool) -> None:
        self.probes += 1
        self.history.append((rate, passed))
        if passed:
            if self.hi is None or rate < self.hi:   # a noisy pass above a failure is not trusted
                self.lo = rate if self.lo is None else max(self.lo, rate)
        else:
            self.hi = rate if self.hi is None else min(self.hi, rate)
            if self.lo is not None and self.lo >= self.hi:
                below = [r for r, p in self.history if p and r < self.hi]
                self.lo = max(below) if below else None

    def converged(self) -> bool:
        return self.lo is not None and self.hi is not None and self.hi / self.lo - 1 <= self.tolerance

    def next_rate(self) -> float | None:
        """The next rate to probe, or None when done (converged, out of probes, or at a bound)."""
        if self.probes >= self.max_probes or self.converged():
            return None
        if self.hi is None:
            if self.lo is None:
                return self.start_rate if self.probes == 0 else None
            nxt = min(self.lo * 2, self.max_rate)
            return None if nxt <= self.lo else nxt
        if self.lo is None:
            nxt = self.hi / 4
            return nxt if nxt >= self.start_rate / 1024 else None
        return math.sqrt(self.lo * self.hi)


def replicas_needed(target_rate: float, capacity_rate: float, headroom: float = DEFAULT_HEADROOM) -> int:
    """Replicas so that each runs at most (1 - headroom) of its measured capacity."""
    if capacity_rate <= 0:
        raise ValueError("capacity must be > 0")
    return max(1, math.ceil(target_rate / (capacity_rate * (1 - headroom)) - 1e-9))


class QueueWatch:
    """Decides, from the live counters sampled during a probe, that its queue grows without bound."""

    def __init__(self, offered_rate: float) -> None:
        self.offered_rate = offered_rate
        self.samples: list[tuple[float, int, int]] = []   # (t_s, completed, in_flight)

    def add(self, t_s: float, completed: int, in_flight: int) -> str | None:
        self.samples.append((t_s, completed, in_flight))
        s = self.samples
        if t_s < QUEUE_MIN_OBSERVED_S or len(s) < QUEUE_GROWTH_SAMPLES + 1:
            return None
        recent = s[-(QUEUE_GROWTH_SAMPLES + 1):]
        rising = all(b[2] >= a[2] for a, b in zip(recent, recent[1:], strict=False))
        start = max(recent[0][2], 1)
        grew = recent[-1][2] >= QUEUE_GROWTH_FACTOR * start and recent[-1][2] > recent[0][2] + 2
        dt = recent[-1][0] - recent[0][0]
        served = (recent[-1][1] - recent[0][1]) / dt if dt > 0 else 0.0
        if rising and grew and served < 0.9 * self.offered_rate:
            return (f"queue grows without bound: {recent[-1][2]} requests in flight, up from "
                    f"{recent[0][2]} {dt:.1f}s earlier; served {served:.1f} req/s of {self.offered_rate:.1f} offered")
        return None
