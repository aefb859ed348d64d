"""Runaway queues: decide, while a capacity probe runs, that its queue grows without bound.

Pure: `runaway_evidence(samples, offered_rate_per_s)` looks at a series of samples taken
during the probe and returns the evidence (numbers) or None. The live monitor
(`harness.orchestrate.probe_monitor`) feeds it counters sampled four times a second;
`series_of` builds the same series from a finished run's records, which is how the tests
sweep healthy loads of every shape on the simulator's virtual clock.

Theory of operation
-------------------
A healthy server that starts taking `lambda` requests/s *fills up*: for about one E2E, the
number in flight climbs towards Little's `lambda x E2E` while completions lag arrivals by one
E2E. A queue that runs away does the same, and then never stops. Telling the two apart takes
time measured in E2Es, so growth is only judged over a window that starts after the fill-up
and is no shorter than the time scale of that fill-up. Two rules, either of which stops a
probe; every condition of a rule must hold at once:

A. From the client alone (any server):
   1. fill-up over: the window starts FILL_E2E_FACTOR x the longest E2E seen after the probe
      began, and lasts at least WINDOW_E2E_FACTOR x that E2E (and MIN_WINDOW_S);
   2. served below offered over the window: the number in flight grew by at least
      DEFICIT_SHARE of the window's arrivals and by NOISE_Z standard deviations of arrivals
      minus departures (both Poisson-like, widened by the dispersion of the arrivals sampled);
   3. Little's law broken: more in flight than LITTLE_FACTOR x the rate x the mean E2E of the
      requests finished so far (a filling server stays below it: its E2E is what it is);
   4. growing now: the TTFT from schedule of the requests that finished in the window's second
      half is TREND_SHARE (and TREND_MIN_S) above that of its first half.
B. By the server's own account, where it exposes its waiting queue on /metrics (vLLM's
   `num_requests_waiting`). A queue that runs away builds up *there*; the running set turns
   over once per decode time (E2E - TTFT), which does not grow with the queue, so the window
   is measured in decode times instead of E2Es:
   1. the window starts FILL_E2E_FACTOR x the longest decode time seen after the probe began
      and lasts WINDOW_E2E_FACTOR x that (and MIN_WINDOW_S);
   2. from the last time the waiting queue was empty (or the fill-up's end, if later), it grew
      by DEFICIT_SHARE of the window's arrivals and by NOISE_Z standard deviations of their
      count, and the number in flight grew as much;
   3. it is still growing: its mean over the window's second half is above its first half's by
      half that margin (the rise 2. requires / 2). That is what a steady climb by the margin
      over the window gives (the half-means of a linear ramp differ by half its rise), while a
      queue that jumped early in the window and then stayed flat shows almost no difference.

Too few observations (finished requests, arrivals in the window) mean no stop: an early stop
only saves time, so the detector lets an overloaded probe run to its end (where its steady
part fails) rather than stop a healthy one. The evidence is kept as numbers.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.record.metrics import Columns, per_request_values_ns

FILL_E2E_FACTOR = 1.0  # the fill-up takes one E2E (rule B: one decode time) ...
WINDOW_E2E_FACTOR = 1.0  # ... and growth is judged over at least one more
MIN_WINDOW_S = 1.0  # never judge over less than this
MIN_DONE = 5  # finished requests before any E2E is trusted
MIN_WINDOW_ARRIVALS = 10  # arrivals in the window before a deficit means anything
DEFICIT_SHARE = 0.10  # in flight (or waiting) grew by at least this share of the arrivals
NOISE_Z = 3.0  # ... and by this many standard deviations of their count
LITTLE_FACTOR = 1.5  # in flight above this many times rate x mean E2E
TREND_SHARE = 0.2  # TTFT from schedule rose by this share ...
TREND_MIN_S = 0.05  # ... and by at least this much
MIN_HALF_DONE = 3  # finished requests in each half-window to compare their TTFTs


@dataclass(frozen=True, slots=True)
class Sample:
    """The probe at one instant; counts and sums are cumulative since the measured span began."""

    t_s: float  # seconds since the measured span began
    sent: int  # measured requests sent
    in_flight: int  # requests in flight now (any phase)
    done: int  # measured requests that finished with a last token
    e2e_sum_s: float  # their E2E (from sent), summed
    e2e_max_s: float  # ... the longest
    decode_max_s: float  # ... the longest decode time (E2E - TTFT)
    ttft_sched_sum_s: float  # their TTFT from schedule, summed
    waiting: float | None = None  # the server's num_requests_waiting gauge (None: not scraped)


@dataclass(frozen=True, slots=True)
class Evidence:
    """Why a probe was stopped, in numbers."""

    rule: str  # "client" (A) or "server" (B)
    t_s: float
    window_s: float
    scale_s: float  # the fill-up's time scale: longest E2E (A) or decode time (B)
    e2e_mean_s: float
    in_flight_from: int
    in_flight_to: int
    arrivals: int
    little_in_flight: float
    ttft_sched_s: tuple[float, float] | None  # mean over the window's first and second half
    waiting: tuple[float, float] | None  # the server's waiting queue at the window's ends

    @property
    def served_per_s(self) -> float:
        return (self.arrivals - (self.in_flight_to - self.in_flight_from)) / self.window_s

    @property
    def offered_per_s(self) -> float:
        return self.arrivals / self.window_s

    def describe(self) -> str:
        scale = "longest E2E" if self.rule == "client" else "longest decode time"
        parts = [
            f"queue grows without bound: in flight {self.in_flight_from} -> {self.in_flight_to} over the "
            f"last {self.window_s:.1f}s (after {self.t_s - self.window_s:.1f}s of fill-up; {scale} "
            f"{self.scale_s:.2f}s)",
            f"served {self.served_per_s:.1f} req/s of {self.offered_per_s:.1f} offered",
            f"Little's law expects {self.little_in_flight:.1f} in flight (offered x mean E2E "
            f"{self.e2e_mean_s:.2f}s)",
        ]
        if self.waiting is not None:
            parts.append(f"server waiting queue {self.waiting[0]:.0f} -> {self.waiting[1]:.0f}")
        if self.ttft_sched_s is not None:
            parts.append(
                f"TTFT from schedule {self.ttft_sched_s[0]:.2f}s -> {self.ttft_sched_s[1]:.2f}s"
            )
        return "; ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "t_s": self.t_s,
            "window_s": self.window_s,
            "scale_s": self.scale_s,
            "e2e_mean_s": self.e2e_mean_s,
            "in_flight_from": self.in_flight_from,
            "in_flight_to": self.in_flight_to,
            "arrivals": self.arrivals,
            "served_requests_per_s": self.served_per_s,
            "offered_requests_per_s": self.offered_per_s,
            "little_in_flight": self.little_in_flight,
            "ttft_from_schedule_s": None if self.ttft_sched_s is None else list(self.ttft_sched_s),
            "server_waiting": None if self.waiting is None else list(self.waiting),
        }


def _window(samples: Sequence[Sample], scale_s: float) -> int | None:
    """Index of the window's first sample: the first after the fill-up, provided the window
    from it to now is long enough; None when not yet."""
    now = samples[-1]
    fill = FILL_E2E_FACTOR * scale_s
    if now.t_s - fill < max(WINDOW_E2E_FACTOR * scale_s, MIN_WINDOW_S):
        return None
    j = bisect.bisect_left([x.t_s for x in samples], fill)
    return j if j < len(samples) - 2 else None


def _threshold(samples: Sequence[Sample], j: int) -> tuple[int, float]:
    """(arrivals in the window, the growth that counts as a deficit): DEFICIT_SHARE of the
    arrivals, and NOISE_Z standard deviations of arrivals minus departures, both counted as
    Poisson-like (departures vary with the work each request brings), widened by the
    dispersion of the arrivals sampled."""
    arrivals = samples[-1].sent - samples[j].sent
    steps = np.diff(np.asarray([x.sent for x in samples[j:]], dtype=np.float64))
    dispersion = float(steps.var() / steps.mean()) if len(steps) > 1 and steps.mean() > 0 else 1.0
    return arrivals, max(
        DEFICIT_SHARE * arrivals, NOISE_Z * math.sqrt(2 * arrivals * max(1.0, dispersion))
    )


def _mean_ttft(a: Sample, b: Sample) -> float | None:
    n = b.done - a.done
    return (b.ttft_sched_sum_s - a.ttft_sched_sum_s) / n if n >= MIN_HALF_DONE else None


def _client_rule(samples: Sequence[Sample], rate: float) -> Evidence | None:
    now = samples[-1]
    j = _window(samples, now.e2e_max_s)
    if j is None:
        return None
    first = samples[j]
    arrivals, need = _threshold(samples, j)
    growth = now.in_flight - first.in_flight
    if arrivals < MIN_WINDOW_ARRIVALS or growth < need:
        return None
    e2e_mean = now.e2e_sum_s / now.done
    little = rate * e2e_mean
    if now.in_flight <= LITTLE_FACTOR * little:
        return None
    mid = samples[j + (len(samples) - 1 - j) // 2]
    t1, t2 = _mean_ttft(first, mid), _mean_ttft(mid, now)
    if t1 is None or t2 is None or t2 < t1 * (1 + TREND_SHARE) or t2 - t1 < TREND_MIN_S:
        return None
    waiting = (
        (first.waiting, now.waiting)
        if first.waiting is not None and now.waiting is not None
        else None
    )
    return Evidence(
        "client",
        now.t_s,
        now.t_s - first.t_s,
        now.e2e_max_s,
        e2e_mean,
        first.in_flight,
        now.in_flight,
        arrivals,
        little,
        (t1, t2),
        waiting,
    )


def _server_rule(samples: Sequence[Sample], rate: float) -> Evidence | None:
    now = samples[-1]
    j = _window(samples, now.decode_max_s)
    if j is None:
        return None
    for k in range(len(samples) - 1, j - 1, -1):  # the window starts when the queue last emptied
        w = samples[k].waiting
        if w is None or w <= 0:
            j = k + 1
            break
    if j >= len(samples) - 2 or now.t_s - samples[j].t_s < max(
        WINDOW_E2E_FACTOR * now.decode_max_s, MIN_WINDOW_S
    ):
        return None
    # all set from j on: the loop above stopped at the last unscraped or empty queue
    waits = [float(w) for x in samples[j:] if (w := x.waiting) is not None]
    first = samples[j]
    arrivals, need = _threshold(samples, j)
    rise = waits[-1] - waits[0]
    if arrivals < MIN_WINDOW_ARRIVALS or rise < need or now.in_flight - first.in_flight < need:
        return None
    half = len(waits) // 2
    if sum(waits[half:]) / (len(waits) - half) - sum(waits[:half]) / half < need / 2:
        return None
    mid = samples[j + half]
    t1, t2 = _mean_ttft(first, mid), _mean_ttft(mid, now)
    e2e_mean = now.e2e_sum_s / now.done
    return Evidence(
        "server",
        now.t_s,
        now.t_s - first.t_s,
        now.decode_max_s,
        e2e_mean,
        first.in_flight,
        now.in_flight,
        arrivals,
        rate * e2e_mean,
        (t1, t2) if t1 is not None and t2 is not None else None,
        (waits[0], waits[-1]),
    )


def runaway_evidence(samples: Sequence[Sample], offered_rate_per_s: float) -> Evidence | None:
    """Judge the last sample (module docstring): the evidence of a runaway queue, or None."""
    if len(samples) < 3 or samples[-1].done < MIN_DONE:
        return None
    return _server_rule(samples, offered_rate_per_s) or _client_rule(samples, offered_rate_per_s)


def series_of(
    c: Columns,
    measured_phases: Sequence[int],
    span_start_ns: int,
    end_ns: int,
    step_s: float,
    waiting: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[Sample]:
    """The samples a live monitor would have taken every `step_s` from the span's start to
    `end_ns`, rebuilt from a run's records. `waiting`: (times in ns, gauge values) of the
    server's waiting queue, each sample seeing the last value at or before it."""
    measured = np.isin(c.phase, np.asarray(list(measured_phases), dtype=np.int64)) & ~c.retried
    sent = np.sort(c.sent[measured & (c.sent >= 0)])
    every_sent = np.sort(c.sent[(c.sent >= 0) & ~c.retried])
    ended = np.sort(np.where(c.end >= 0, c.end, np.iinfo(np.int64).max)[(c.sent >= 0) & ~c.retried])
    vals = per_request_values_ns(c)
    fin = measured & c.ok & ~np.isnan(vals["e2e"])
    order = np.argsort(c.end[fin], kind="stable")
    fin_end = c.end[fin][order]
    e2e = (vals["e2e"][fin][order]) / 1e9
    ttft = (vals["ttft_from_schedule"][fin][order]) / 1e9
    decode = e2e - vals["ttft"][fin][order] / 1e9
    e2e_cum, ttft_cum = np.cumsum(e2e), np.cumsum(ttft)
    e2e_runmax = np.maximum.accumulate(e2e) if len(e2e) else e2e
    decode_runmax = np.maximum.accumulate(decode) if len(decode) else decode
    out: list[Sample] = []
    step_ns = int(step_s * 1e9)
    for t in range(span_start_ns + step_ns, end_ns + 1, step_ns):
        n_sent = int(
            np.searchsorted(sent, t, side="right")
            - np.searchsorted(sent, span_start_ns, side="left")
        )
        in_flight = int(
            np.searchsorted(every_sent, t, side="right") - np.searchsorted(ended, t, side="right")
        )
        k = int(np.searchsorted(fin_end, t, side="right"))
        w = None
        if waiting is not None and len(waiting[0]):
            i = int(np.searchsorted(waiting[0], t, side="right")) - 1
            w = float(waiting[1][i]) if i >= 0 else 0.0
        out.append(
            Sample(
                t_s=(t - span_start_ns) / 1e9,
                sent=n_sent,
                in_flight=in_flight,
                done=k,
                e2e_sum_s=float(e2e_cum[k - 1]) if k else 0.0,
                e2e_max_s=float(e2e_runmax[k - 1]) if k else 0.0,
                decode_max_s=float(decode_runmax[k - 1]) if k else 0.0,
                ttft_sched_sum_s=float(ttft_cum[k - 1]) if k else 0.0,
                waiting=w,
            )
        )
    return out


def first_stop(samples: Sequence[Sample], offered_rate_per_s: float) -> Evidence | None:
    """The first sample at which the detector would have stopped the probe (None: never)."""
    for i in range(3, len(samples) + 1):
        ev = runaway_evidence(samples[:i], offered_rate_per_s)
        if ev is not None:
            return ev
    return None
