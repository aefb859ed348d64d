"""compare's verdict of one row, from its change, interval and threshold, and what would decide
an undecided one: about how many requests, and how many runs, per side.

Labels, in the worse direction (> 0 is worse), for an interval [lo, hi] and a threshold T:

- gated: `REGRESSION` when the change is past T and lo > 0; INCONCLUSIVE when hi > T (an
  interval that is unbounded, or crosses the threshold on the worse side); otherwise a pass:
  `worse (within threshold)` (lo > 0), `better` (hi < 0), `same` (the interval inside
  [-T, T]) or `not worse` (it reaches past -T: no worse than T, but too wide to call same).
- ungated: `worse (not gated)` (lo > 0), `better` (hi < 0), `same` only when the interval lies
  inside [-T, T] with T the metric's default threshold (10 % on latency figures, 5 % on
  throughput), and `not judged` otherwise: an unbounded or wide interval says nothing.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from harness.analysis import compare_stats as stats

PASSES = ("same", "better", "worse (within threshold)", "not worse")
MAX_REQUESTS = 10**9  # an estimate past this is "more than a run can hold"
MAX_RUNS = 1000


def judge(worse: float, w_lo: float, w_hi: float, limit: float | None, reference: float) -> str:
    """The row's label (module docstring); `reference`: the threshold an ungated metric's
    `same` is held to."""
    if limit is not None:
        if worse > limit and w_lo > 0:
            return "REGRESSION"
        if not w_hi <= limit:  # NaN or unbounded too
            return "INCONCLUSIVE"
        if w_lo > 0:
            return "worse (within threshold)"
        if w_hi < 0:
            return "better"
        return "same" if w_lo >= -limit else "not worse"
    if w_lo > 0:
        return "worse (not gated)"
    if w_hi < 0:
        return "better"
    return "same" if -reference <= w_lo and w_hi <= reference else "not judged"


def kind(verdict: str) -> str:
    """regression, pass or undecided: what a verdict means to the gate."""
    if verdict == "REGRESSION":
        return "regression"
    return "pass" if verdict in PASSES else "undecided"


def _room(worse: float, limit: float) -> float:
    """The half-width (in the change) that would decide: past the limit the interval must leave
    zero; within it, its worse end must stay within the limit."""
    return worse if worse > limit else max(limit - worse, 0.25 * limit)


def requests_needed(
    n: int,
    worse: float,
    lo: float,
    hi: float,
    limit: float,
    bounded_at: int,
) -> int:
    """About how many requests per side would decide this gated metric: the interval narrows as
    1/sqrt(requests). `bounded_at`: where an interval unbounded now is first bounded."""
    n = max(n, 1)
    if not (math.isfinite(hi) and math.isfinite(lo)):
        return min(MAX_REQUESTS, max(n + 1, bounded_at))
    half, room = (hi - lo) / 2, _room(worse, limit)
    if not (room > 0 and half > 0):
        return n
    log_need = math.log(n) + 2 * (math.log(half) - math.log(room))  # no overflow on any input
    if log_need >= math.log(MAX_REQUESTS):
        return MAX_REQUESTS
    return max(n + 1, math.ceil(math.exp(log_need)))


def _t(p: float, df: int) -> float:
    """Student's t quantile; a normal's with the first-order correction past 30 degrees of
    freedom (within 0.1 % there, and cheap in the search over runs)."""
    if df <= 30:
        return stats.t_quantile(p, df)
    z = NormalDist().inv_cdf(p)
    return z + (z**3 + z) / (4 * df)


def _log_half(lo: float, hi: float) -> float:
    if not (lo > -1 and math.isfinite(hi)):
        return math.inf
    return (math.log1p(hi) - math.log1p(lo)) / 2


def runs_needed(
    worse: float,
    limit: float,
    within: tuple[float, float],
    between: tuple[float, float] | None,
    runs: tuple[int, int],
    requests_per_run: float,
    need_requests: int,
    confidence: float,
) -> int:
    """About how many runs per side (of the length these runs had) would decide a gated metric:
    the within-run interval narrows as 1/sqrt(requests); the spread between runs, measured with
    two runs or more on a side, narrows as t(2R - 2) sqrt(2 / R). With one run per side that
    spread is unmeasured: the runs that hold the requests needed, and at least 3."""
    now = max(runs)
    if between is None:
        by_requests = math.ceil(need_requests / max(requests_per_run, 1.0))
        return int(min(MAX_RUNS, max(3, now + 1, by_requests)))
    if worse > limit:
        room = math.log1p(worse)  # the interval must leave zero
    else:  # its worse end must stay within the limit
        room = math.log1p(worse + _room(worse, limit)) - math.log1p(worse) if worse > -1 else 0.0
    if not room > 0:
        return MAX_RUNS
    df_now = runs[0] + runs[1] - 2
    t_now = _t((1 + confidence) / 2, df_now)
    spread = _log_half(*between) / (t_now * math.sqrt(1 / runs[0] + 1 / runs[1]))
    w_half = _log_half(*within)
    n_now = requests_per_run * (runs[0] + runs[1]) / 2
    for r in range(max(now + 1, 2), MAX_RUNS + 1):
        t = _t((1 + confidence) / 2, 2 * r - 2)
        within_ok = (
            w_half * math.sqrt(n_now / (requests_per_run * r)) <= room
            if math.isfinite(w_half)
            else requests_per_run * r >= need_requests
        )
        if within_ok and t * spread * math.sqrt(2 / r) <= room:
            return r
    return MAX_RUNS


__all__ = ["PASSES", "judge", "kind", "requests_needed", "runs_needed"]
