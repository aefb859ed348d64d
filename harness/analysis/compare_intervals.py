"""compare's intervals within runs: the figure on bootstrap replicates drawn by time blocks
(or request by request), the order-statistic interval of a per-request percentile, and the
wider of the two (harness.analysis.compare, "Theory of operation")."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from harness.analysis import compare_stats as stats
from harness.analysis.compare_sides import Side
from harness.analysis.compare_specs import (
    _CHUNK_CELLS,
    MIN_TAIL_SAMPLES,
    PER_REQUEST,
    TOKEN_METRICS,
    MetricSpec,
)


def _weights(block: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    """(b+1) x n: how often each of n requests is drawn in each replicate; row 0 is the data.

    A Poisson bootstrap over time blocks (`time_blocks`): each block's weight is Poisson(1),
    and its requests take it. The number of requests varies from replicate to replicate as
    the number of arrivals of an open-loop run does; with a fixed count, throughput of
    equal-sized requests would get a zero-width interval."""
    n = len(block)
    w = np.ones((b + 1, n), dtype=np.float64)
    if n == 0 or b == 0:
        return w
    k = int(block.max()) + 1
    w[1:] = rng.poisson(1.0, size=(b, k))[:, block]
    return w


def _weighted_percentile(
    values: np.ndarray, owner: np.ndarray, w: np.ndarray, q: float, window: bool = True
) -> np.ndarray:
    """Per replicate (row of w): the smallest value with at least q % of the weight at or below
    it (numpy's inverted_cdf, as the result computes percentiles). NaN where no weight."""
    keep = ~np.isnan(values)
    values, owner = values[keep], owner[keep]
    out = np.full(w.shape[0], np.nan)
    if len(values) == 0:
        return out
    order = np.argsort(values, kind="stable")
    sv, so = values[order], owner[order]
    # Fast path: the replicates' percentiles lie near the data's, so the cumulative weight is
    # summed in a window of sorted positions (its start by one product); rows whose answer
    # falls outside the window take the full sum below, so the result is the same.
    n, m = len(sv), max(1.0, len(sv) / max(1, w.shape[1]))
    half = int(5 * np.sqrt(n * m * (q / 100) * (1 - q / 100))) + 64
    center = int(np.ceil(q / 100 * n)) - 1
    lo, hi = max(0, center - half), min(n, center + half)
    todo = np.arange(w.shape[0])
    if window and hi - lo < n // 2:
        below = np.bincount(so[:lo], minlength=w.shape[1]).astype(np.float64)
        every = np.bincount(so, minlength=w.shape[1]).astype(np.float64)
        left = []
        step = max(1, _CHUNK_CELLS // (hi - lo))
        for a in range(0, w.shape[0], step):
            wa = w[a : a + step]
            before, total = wa @ below, wa @ every
            cw = before[:, None] + np.cumsum(wa[:, so[lo:hi]], axis=1)
            target = total * (q / 100.0) - 1e-9
            inside = (total > 0) & (before < target) & (cw[:, -1] >= target)
            pos = lo + (cw < target[:, None]).sum(axis=1)
            out[a : a + step][inside] = sv[np.minimum(pos[inside], n - 1)]
            left.append(a + np.flatnonzero(~inside & (total > 0)))
        todo = np.concatenate(left)
    rows = max(1, _CHUNK_CELLS // max(len(sv), 1))
    for a in range(0, len(todo), rows):
        idx = todo[a : a + rows]
        cw = np.cumsum(w[idx][:, so], axis=1)
        total = cw[:, -1]
        target = total * (q / 100.0)
        pos = np.minimum((cw < target[:, None] - 1e-9).sum(axis=1), len(sv) - 1)
        out[idx] = np.where(total > 0, sv[pos], np.nan)
    return out


def _hist_replicates(
    v: np.ndarray, n: np.ndarray, b: int, rng: np.random.Generator, stat: str
) -> np.ndarray:
    total = int(n.sum())
    out = np.full(b + 1, np.nan)
    if total == 0:
        return out
    counts = np.vstack([n[None, :], rng.multinomial(total, n / total, size=b)]).astype(np.float64)
    if stat == "mean":
        means: np.ndarray = (counts @ v) / counts.sum(axis=1)
        return means
    q = float(stat[1:]) if stat != "p999" else 99.9
    cw = np.cumsum(counts, axis=1)
    pos = np.minimum((cw < (cw[:, -1] * q / 100.0)[:, None] - 1e-9).sum(axis=1), len(v) - 1)
    quantiles: np.ndarray = v[pos]
    return quantiles


def replicates(
    side: Side, spec: MetricSpec, b: int, rng: np.random.Generator, blocks: bool = True
) -> np.ndarray:
    """The figure on the data (index 0) and on b bootstrap replicates (1..b): drawn by time
    blocks, or (`blocks` False) request by request."""
    if side.source == "histogram":
        if spec.metric == "throughput":
            return np.full(b + 1, np.nan)
        v, n = side.hists.get(spec.metric, (np.zeros(0), np.zeros(0, dtype=np.int64)))
        return _hist_replicates(v, n, b, rng, spec.stat)
    by_block = blocks and len(side.block) == side.n
    w = _weights(side.block if by_block else np.arange(side.n), b, rng)
    if spec.metric == "throughput":
        col = {
            "output_tokens_per_s": side.tokens_in_window,
            "requests_per_s": side.done_in_window,
            "goodput_requests_per_s": side.good_in_window,
        }[spec.stat]
        return (w @ col) / side.window_s if side.window_s > 0 else np.full(b + 1, np.nan)
    if spec.metric in TOKEN_METRICS:
        values, owner = side.token_samples(spec.metric)
    else:
        values, owner = side.values[spec.metric], np.arange(side.n)
    if spec.stat == "mean":
        has = ~np.isnan(values)
        sums = np.bincount(owner[has], weights=values[has], minlength=side.n)
        cnt = np.bincount(owner[has], minlength=side.n).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (w @ sums) / (w @ cnt)
    return _weighted_percentile(values, owner, w, float(spec.stat[1:]))


def sample_count(side: Side, spec: MetricSpec) -> int:
    """Samples behind a figure (tokens for ITL, requests otherwise)."""
    if spec.metric == "throughput":
        return side.n
    if side.source == "histogram":
        return int(side.hists.get(spec.metric, (None, np.zeros(0)))[1].sum())
    v = (
        side.token_samples(spec.metric)[0]
        if spec.metric in TOKEN_METRICS
        else side.values[spec.metric]
    )
    return int((~np.isnan(v)).sum())


def reported(result: dict[str, Any], spec: MetricSpec) -> float | None:
    s = result["summary"]
    block = s["throughput"] if spec.metric == "throughput" else s["latency_ms"][spec.metric]
    value: float | None = block[spec.stat]  # the result document's figure (None: no samples)
    return value


def _order_statistics_apply(side: Side, spec: MetricSpec) -> bool:
    """Percentiles of samples that are one per request (TTFT, TPOT, E2E), or of histogram
    samples (whose owners are unknown anyway), get order-statistic intervals (exact for
    independent requests); ITL's per-token gaps, clustered within requests, means and
    throughput get the bootstrap over time blocks only."""
    if not spec.stat.startswith("p") or spec.metric == "throughput":
        return False
    return spec.metric in PER_REQUEST or side.source == "histogram"


def _samples(side: Side, spec: MetricSpec) -> np.ndarray:
    if side.source == "histogram":
        v, n = side.hists.get(spec.metric, (np.zeros(0), np.zeros(0, dtype=np.int64)))
        return np.repeat(v, n)
    return (
        side.token_samples(spec.metric)[0]
        if spec.metric in TOKEN_METRICS
        else side.values[spec.metric]
    )


BOOTSTRAP = "bootstrap over time blocks"


def _bootstrap_interval(
    rb: np.ndarray, rc: np.ndarray, base: Side, cand: Side, spec: MetricSpec, confidence: float
) -> tuple[float, float] | None:
    """The change's interval from the replicates; None where they cannot give one (too few
    samples in the percentile's tail, or too few usable replicates)."""
    tail = 1.0 if not spec.stat.startswith("p") else 1 - float(spec.stat[1:]) / 100
    if min(sample_count(base, spec), sample_count(cand, spec)) * tail < MIN_TAIL_SAMPLES:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = rc[1:] / rb[1:] - 1
    ratios = ratios[np.isfinite(ratios)]
    if len(ratios) < 20:
        return None
    lo_q, hi_q = (1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [lo_q, hi_q])
    return float(lo), float(hi)


def _within_interval(
    base: Side, cand: Side, spec: MetricSpec, b: int, rng: np.random.Generator, confidence: float
) -> tuple[float, float, float, float, str]:
    """(baseline figure, candidate figure, low, high) of the change within runs, and the method.
    high = inf where the data bound it on one side only; NaN bounds where there is no figure.

    A per-request percentile takes the wider of the order-statistic interval (exact when
    requests are independent) and the bootstrap over time blocks (which sees requests that
    shared the server's steps move together), the latter where its tail has samples enough."""
    order = _order_statistics_apply(base, spec)
    boot = base.source == "journal" and cand.source == "journal"
    rb = replicates(base, spec, b if boot else 0, rng)
    rc = replicates(cand, spec, b if boot else 0, rng)
    bv, cv = float(rb[0]), float(rc[0])
    if np.isnan(bv) or np.isnan(cv) or bv == 0:
        return (bv, cv, math.nan, math.nan, "")
    by_blocks = _bootstrap_interval(rb, rc, base, cand, spec, confidence) if boot else None
    if not order:
        if by_blocks is None:
            return (bv, cv, -1.0, math.inf, BOOTSTRAP)
        return (bv, cv, by_blocks[0], by_blocks[1], BOOTSTRAP)
    ci = stats.percentile_ratio_interval(
        _samples(base, spec), _samples(cand, spec), float(spec.stat[1:]) / 100, confidence
    )
    if ci is None:
        return (bv, cv, -1.0, math.inf, "order statistics")
    lo, hi = ci[0] - 1, ci[1] - 1
    if by_blocks is not None:
        return (
            bv,
            cv,
            min(lo, by_blocks[0]),
            max(hi, by_blocks[1]),
            f"order statistics, {BOOTSTRAP}",
        )
    if not boot:
        return (bv, cv, lo, hi, "order statistics")
    # Too few samples in the tail for the bootstrap: the order-statistic interval, widened by
    # the clustering the bootstrap sees nearer the middle (`_clustering`).
    k = _clustering(base, cand, spec, b, rng, confidence)
    if k == 1.0:
        return (bv, cv, lo, hi, "order statistics")
    change = cv / bv

    def widen(x: float) -> float:
        return change * ((1 + x) / change) ** k - 1 if math.isfinite(x) else x

    return (bv, cv, widen(lo), widen(hi), f"order statistics, widened x{k:.2f} for clustering")


def _clustering(
    base: Side, cand: Side, spec: MetricSpec, b: int, rng: np.random.Generator, confidence: float
) -> float:
    """How much wider the change's interval is when drawn by time blocks than request by
    request (>= 1), measured at the metric's p90 (its median where p90's tail is too thin),
    the nearest to the tail where both have samples enough: the design effect that
    independent-request intervals miss. 1 where it cannot be measured."""
    if len(base.block) != base.n or len(cand.block) != cand.n:
        return 1.0  # no time blocks: the same draws either way
    near = "p90" if min(base.n, cand.n) * 0.1 >= 2 * MIN_TAIL_SAMPLES else "p50"
    nearer = MetricSpec(spec.key, spec.label, spec.better, spec.metric, near)
    widths = []
    for blocks in (True, False):
        rb = replicates(base, nearer, b, rng, blocks)
        rc = replicates(cand, nearer, b, rng, blocks)
        ci = _bootstrap_interval(rb, rc, base, cand, nearer, confidence)
        if ci is None or ci[0] <= -1:  # no interval, or one reaching a zero figure (no log)
            return 1.0
        widths.append(math.log1p(ci[1]) - math.log1p(ci[0]))
    return max(1.0, widths[0] / widths[1]) if widths[1] > 0 else 1.0


def _bounded_at(spec: MetricSpec, n: int, confidence: float) -> int:
    """Requests per side from which an interval unbounded now is bounded: where order
    statistics bound a per-request percentile, 5 samples above a bootstrapped one."""
    if not spec.stat.startswith("p"):
        return n + 1
    q = float(spec.stat[1:]) / 100
    if spec.metric in PER_REQUEST:
        return max(n + 1, stats.bounded_requests(q, confidence))
    return max(n + 1, math.ceil(MIN_TAIL_SAMPLES / (1 - q)))
