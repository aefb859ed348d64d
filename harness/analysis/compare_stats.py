"""Distribution-free statistics for `compare`: order-statistic intervals for the change of a
percentile, Student's t for the spread between runs, and how many requests a verdict needs.

Percentiles (theory of operation)
---------------------------------
The baseline's percentile is its order statistic b_(k), k = ceil(q n_b) (numpy's inverted_cdf,
as the result computes it). Let E(r) be the number of candidate requests above r * b_(k). When
the candidate's values divided by r come from the baseline's distribution, F(b_(k)) is
Beta(k, n_b - k + 1) and, given it, E is binomial: E follows the beta-binomial law
BetaBinom(n_c, n_b - k + 1, k) whatever the distribution is (the exceedance test). The 95 %
interval of the ratio r = candidate / baseline is every r this test does not reject; E(r) only
falls as r grows, so its ends are two order statistics of the candidate over b_(k):

    [c_(n_c - e_hi + 1), c_(n_c - e_lo)] / b_(k)

with e_hi, e_lo the upper and lower critical counts. It needs no bootstrap and no assumption on
the shape of the distribution, and it uses the whole candidate sample against the baseline's
percentile, so a large change in p99 is decided on a few hundred requests, where an interval
for each side alone does not exist (a side's p99 has a distribution-free upper bound only from
about 370 requests). Where a critical count does not exist (too few requests above the
percentile) that end is unbounded, and `bounded_requests` says from how many requests per side
it would be bounded.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


def _log_betabinom_pmf(n: int, a: float, b: float) -> np.ndarray:
    """log P(E = e), e = 0..n, for E ~ BetaBinom(n, a, b), by the ratio of successive terms
    (no special functions beyond four lgamma calls), renormalised."""
    log0 = math.lgamma(n + b) + math.lgamma(a + b) - math.lgamma(n + a + b) - math.lgamma(b)
    if n == 0:
        return np.array([0.0])
    e = np.arange(n, dtype=np.float64)  # ratio pmf(e+1)/pmf(e) for e = 0..n-1
    ratio = np.log(n - e) - np.log(e + 1) + np.log(e + a) - np.log(n - e - 1 + b)
    out = log0 + np.concatenate([[0.0], np.cumsum(ratio)])
    top = float(out.max())
    norm: np.ndarray = out - (top + math.log(float(np.exp(out - top).sum())))
    return norm


def critical_counts(n_b: int, k: int, n_c: int, alpha: float) -> tuple[int, int]:
    """(e_lo, e_hi) of the exceedance test at two-sided level alpha: reject when E <= e_lo or
    E >= e_hi. e_lo = -1 when no count is low enough, e_hi = n_c + 1 when none is high enough."""
    pmf = np.exp(_log_betabinom_pmf(n_c, n_b - k + 1, k))
    low = np.cumsum(pmf)  # P(E <= e)
    high = np.cumsum(pmf[::-1])[::-1]  # P(E >= e)
    lo = np.flatnonzero(low <= alpha / 2)
    hi = np.flatnonzero(high <= alpha / 2)
    return (int(lo[-1]) if len(lo) else -1, int(hi[0]) if len(hi) else n_c + 1)


def percentile_ratio_interval(
    base: np.ndarray, cand: np.ndarray, q: float, confidence: float
) -> tuple[float, float] | None:
    """The interval of candidate / baseline for the q-quantile (q in (0, 1)), from the module's
    exceedance test: (low, high), high = inf when unbounded, low = 0 when unbounded below.
    None when a side is empty or the baseline's percentile is 0."""
    b = np.sort(base[~np.isnan(base)])
    c = np.sort(cand[~np.isnan(cand)])
    if len(b) == 0 or len(c) == 0:
        return None
    k = max(1, math.ceil(q * len(b) - 1e-9))
    ref = float(b[k - 1])
    if ref <= 0:
        return None
    e_lo, e_hi = critical_counts(len(b), k, len(c), 1 - confidence)
    low = float(c[len(c) - e_hi]) / ref if e_hi <= len(c) else 0.0
    high = float(c[len(c) - e_lo - 1]) / ref if e_lo >= 0 else math.inf
    return low, high


def bounded_requests(q: float, confidence: float, limit: int = 1_000_000) -> int:
    """The fewest requests per side (equal sides) for which the q-quantile's interval is bounded
    at both ends (both critical counts exist)."""

    def bounded(n: int) -> bool:
        k = max(1, math.ceil(q * n - 1e-9))
        e_lo, e_hi = critical_counts(n, k, n, 1 - confidence)
        return e_lo >= 0 and e_hi <= n

    lo, hi = 1, 16
    while not bounded(hi):
        lo, hi = hi, hi * 2
        if hi > limit:
            return limit
    while hi - lo > 1:  # bounded() grows with n (checked at the powers of two above)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bounded(mid) else (mid, hi)
    return hi


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (p in (0.5, 1)) for df >= 1: exact for 1 and 2, otherwise by
    bisection on the distribution function integrated with Simpson's rule."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float) -> float:
        x = np.linspace(0.0, t, 2001)
        y = c * (1 + x * x / df) ** (-(df + 1) / 2)
        h = t / 2000
        return 0.5 + h / 3 * float(y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())

    lo, hi = 0.0, 4 * NormalDist().inv_cdf(p) + 10
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def between_runs_interval(
    base: list[float], cand: list[float], change: float, confidence: float
) -> tuple[float, float] | None:
    """The interval of the change from the spread of each run's own figure: the per-run figures'
    logarithms, with one variance pooled over both sides (runs of one side vary as those of the
    other), Student's t with (R_b - 1) + (R_c - 1) degrees of freedom, centred on the change of
    the pooled figures. None with one run per side, or a figure <= 0."""
    xb = np.asarray([v for v in base if v is not None and not math.isnan(v)], dtype=np.float64)
    xc = np.asarray([v for v in cand if v is not None and not math.isnan(v)], dtype=np.float64)
    df = (len(xb) - 1) + (len(xc) - 1)
    if len(xb) == 0 or len(xc) == 0 or df < 1 or (xb <= 0).any() or (xc <= 0).any():
        return None
    if change <= -1:
        return None
    lb, lc = np.log(xb), np.log(xc)
    ss = float(((lb - lb.mean()) ** 2).sum() + ((lc - lc.mean()) ** 2).sum())
    se = math.sqrt(ss / df) * math.sqrt(1 / len(xb) + 1 / len(xc))
    t = t_quantile((1 + confidence) / 2, df)
    mid = math.log1p(change)
    return math.exp(mid - t * se) - 1, math.exp(mid + t * se) - 1


__all__ = [
    "between_runs_interval",
    "bounded_requests",
    "critical_counts",
    "percentile_ratio_interval",
    "t_quantile",
]
