"""The steady part of a load run: what is left after the fill-up, and what it served.

Capacity judges a probe here, and so does the deployment planner on the simulator's virtual
clock: the same rows, the same window, the same metric code (`harness.record.metrics`), so a
probe over HTTP and a virtual one can only differ by what the server did.

Theory of operation
-------------------
A run that starts at a rate `lambda` against an idle server *fills up*: for about one E2E,
requests arrive while none has finished yet, so completions lag arrivals and the number in
flight climbs towards Little's `lambda * E2E`. Latencies measured then are too good (the batch
is still small) and throughput too low; neither is what the server does at that rate.

- The fill-up is taken to last the p99 E2E (from sent) of the measured requests that
  finished, at most half the measured span (so a runaway queue, whose E2E grows without
  bound, still leaves its worst half to judge). The p99, not the median: with long-tailed
  answers the longest requests take that long to reach their steady number in flight, and
  until they do, completions lag.
- The steady part is every measured request whose intended send time lies in the rest of the
  span; its latencies come from `latency_stats` over those rows, its error share from
  `request_counts`.
- *Served* counts successful requests that ended inside the steady window; *offered* counts
  those intended inside it. In a stable server the two differ only by the noise in how many
  requests are in flight at the window's two ends: in-flight counts are about Poisson with
  mean L = offered rate x the time a request spends in service (Little), spread wider by
  bursty arrivals (the squared coefficient of variation of the gaps, cv^2), so the allowance
  is max(SERVED_TOLERANCE x offered, N) requests, N the shortfall that the difference of two
  Poisson counts of mean L max(1, cv^2) exceeds with probability FALSE_ALARM, the one-sided
  tail of NOISE_Z standard deviations (`in_flight_noise`). A larger shortfall means the server
  did not keep up: its queue grew. N is counted exactly while L is small, where the normal
  approximation NOISE_Z sqrt(2 L) is too tight: a few requests in flight have a heavier tail
  (at L = 1.16 a stable server fell short by more than 4.57 in 0.26 % of windows, not 0.135 %,
  and a deployment plan called a replica at 38 % of its capacity not keeping up).
  The time in service is the mean decode time (E2E - TTFT) of the steady requests plus the p10
  TTFT of all measured ones (the first requests of a probe wait behind no queue), not the mean
  E2E: a queue that runs away makes every E2E longer, and an allowance that grew with it would
  forgive the runaway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.record.metrics import Columns, latency_stats, per_request_values_ns, request_counts

FILL_E2E_QUANTILE = 99  # the fill-up lasts this percentile of E2E ...
FILL_MAX_SHARE = 0.5  # ... but never more than this share of the span
SERVED_TOLERANCE = 0.02  # served may fall this far below offered (no queue is that exact)
NOISE_Z = 3.0  # ... or this many standard deviations of in-flight noise ...
FALSE_ALARM = 0.00135  # ... the one-sided tail of NOISE_Z standard deviations of a normal
EXACT_NOISE_MAX_MEAN = 100.0  # above this mean in flight, the normal approximation holds
SERVICE_TTFT_PERCENTILE = 10  # the in-flight noise is counted without queueing: decode + this TTFT
SERVED_PRECISION = 0.10  # a probe runs long enough to resolve a shortfall of 10 % (3 sigma)


@dataclass(frozen=True, slots=True)
class SteadyPart:
    """One run's steady part. Times in ns since the run's start, like the records."""

    span_ns: tuple[int, int]  # the measured phases, start to planned (or stopped) end
    window_ns: tuple[int, int]  # the steady window: span start + fill-up, span end
    fill_s: float
    rows: np.ndarray  # bool over the Columns: the steady requests
    requests: int  # steady requests (final attempts)
    offered_requests_per_s: float
    served_requests_per_s: float
    served_deficit_requests: float  # offered - served, counted over the window
    served_allowance_requests: float  # the noise a stable server shows (module docstring)
    little_in_flight: float  # offered rate x mean E2E of the steady requests
    arrival_cv2: float  # squared coefficient of variation of the arrival gaps
    error_share: float  # failed or never sent, of the steady requests
    latency_ms: dict[str, dict[str, Any]]

    @property
    def window_s(self) -> float:
        return (self.window_ns[1] - self.window_ns[0]) / 1e9

    @property
    def served_ok(self) -> bool:
        return self.served_deficit_requests <= self.served_allowance_requests

    @property
    def served_share(self) -> float | None:
        if self.offered_requests_per_s <= 0:
            return None
        return self.served_requests_per_s / self.offered_requests_per_s

    def describe(self) -> dict[str, Any]:
        """The evidence, as capacity.json and the planner's JSON keep it."""
        return {
            "window_s": [self.window_ns[0] / 1e9, self.window_ns[1] / 1e9],
            "fill_s": self.fill_s,
            "requests": self.requests,
            "offered_requests_per_s": self.offered_requests_per_s,
            "served_requests_per_s": self.served_requests_per_s,
            "served_share": self.served_share,
            "served_deficit_requests": self.served_deficit_requests,
            "served_allowance_requests": self.served_allowance_requests,
            "little_in_flight": self.little_in_flight,
            "arrival_cv2": self.arrival_cv2,
            "error_share": self.error_share,
        }


def steady_part(c: Columns, span_ns: tuple[int, int], measured_phases: Sequence[int]) -> SteadyPart:
    """The steady part of the measured span (module docstring). Pure."""
    start, end = int(span_ns[0]), int(span_ns[1])
    measured = np.isin(c.phase, np.asarray(list(measured_phases), dtype=np.int64)) & ~c.retried
    vals = per_request_values_ns(c)
    e2e = vals["e2e"][measured]
    e2e = e2e[~np.isnan(e2e)]
    span = max(end - start, 0)
    cap = FILL_MAX_SHARE * span
    fill = min(float(np.percentile(e2e, FILL_E2E_QUANTILE)), cap) if len(e2e) else cap
    a = start + int(fill)
    win = max(end - a, 1)
    rows = measured & (c.intended >= a) & (c.intended < end)
    stats = latency_stats(c, rows)
    counts, _ = request_counts(c, rows)
    due = counts["planned_or_due"]
    errors = (counts["failed"] + counts["not_sent"]) / due if due else 0.0
    offered_n = int(rows.sum())
    served_n = int((measured & c.ok & (c.end >= a) & (c.end < end)).sum())
    offered_rate = offered_n / (win / 1e9)
    steady_e2e = vals["e2e"][rows & c.ok]
    steady_e2e = steady_e2e[~np.isnan(steady_e2e)]
    mean_e2e_s = float(steady_e2e.mean()) / 1e9 if len(steady_e2e) else fill / 1e9
    little = offered_rate * mean_e2e_s
    gaps = np.diff(np.sort(c.intended[rows])).astype(np.float64)
    cv2 = float(gaps.var() / gaps.mean() ** 2) if len(gaps) > 1 and gaps.mean() > 0 else 1.0
    ttft = vals["ttft"][rows & c.ok]
    ttft = ttft[~np.isnan(ttft)]
    every_ttft = vals["ttft"][measured & c.ok]
    every_ttft = every_ttft[~np.isnan(every_ttft)]
    if len(ttft):  # in service: the decode time plus a prefill that waited behind no queue
        service_s = float(
            (steady_e2e.mean() - ttft.mean() + np.percentile(every_ttft, SERVICE_TTFT_PERCENTILE))
            / 1e9
        )
    else:
        service_s = mean_e2e_s
    noise = in_flight_noise(offered_rate * service_s * max(1.0, cv2))
    allowance = max(SERVED_TOLERANCE * offered_n, noise)
    return SteadyPart(
        span_ns=(start, end),
        window_ns=(a, end),
        fill_s=fill / 1e9,
        rows=rows,
        requests=offered_n,
        offered_requests_per_s=offered_rate,
        served_requests_per_s=served_n / (win / 1e9),
        served_deficit_requests=float(offered_n - served_n),
        served_allowance_requests=allowance,
        little_in_flight=little,
        arrival_cv2=cv2,
        error_share=errors,
        latency_ms=stats,
    )


def in_flight_noise(mean: float) -> float:
    """The shortfall of served under offered that a stable server exceeds with probability
    FALSE_ALARM at most: an upper quantile of X - Y, X and Y independent Poisson counts of this
    mean (the requests in flight at the window's two ends; module docstring). Exact up to
    EXACT_NOISE_MAX_MEAN, NOISE_Z sqrt(2 mean) above it. Pure."""
    if mean <= 0:
        return 0.0
    if mean > EXACT_NOISE_MAX_MEAN:
        return NOISE_Z * math.sqrt(2 * mean)
    k = np.arange(int(mean + 12 * math.sqrt(mean)) + 20, dtype=np.float64)
    pmf = np.exp(k * math.log(mean) - mean - np.array([math.lgamma(x + 1) for x in k]))
    diff = np.convolve(pmf, pmf[::-1])  # P(X - Y = d) at index d + len(k) - 1
    exceeds = np.cumsum(diff[::-1])[::-1][len(k) :]  # exceeds[d] = P(X - Y > d), d >= 0
    return float(np.argmax(exceeds <= FALSE_ALARM))


STEADY_MIN_E2E = 3.0  # a steady window spans at least this many (p99) E2Es


def min_probe_duration_s(
    rate_per_s: float, e2e_p99_s: float, e2e_mean_s: float, arrival_cv2: float = 1.0
) -> float:
    """How long a probe at `rate_per_s` must run for its steady part to say whether the server
    kept up: the fill-up (p99 E2E), then a window of STEADY_MIN_E2E of them that is also long
    enough for the in-flight noise (module docstring; L = rate x mean E2E, widened by bursty
    arrivals' cv^2) to stay below SERVED_PRECISION / NOISE_Z of what was offered."""
    little = rate_per_s * e2e_mean_s
    noise_window = (
        NOISE_Z
        * math.sqrt(2 * max(little, 1.0) * max(1.0, arrival_cv2))
        / (rate_per_s * SERVED_PRECISION)
    )
    return e2e_p99_s + max(STEADY_MIN_E2E * e2e_p99_s, noise_window)
