"""Arrival-rate curves and length histograms: the shapes the workload views draw.

Pure numpy, shared by the plan (a trace's own curve, kept in `plan.workload.traces`) and the
result builder (what was offered and sent, `harness.analysis.workload_view`), so both bin alike.
"""

from __future__ import annotations

import numpy as np

MAX_BINS = 120  # points per curve: one chart width, and a result that stays small
# Bins of at least a second: finer ones show single arrivals as spikes, not a rate
NICE_BINS_S = (1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
LENGTH_BINS = 24  # bars of a length histogram


def bin_width_s(span_s: float) -> float:
    """The smallest of NICE_BINS_S that covers `span_s` in at most MAX_BINS bins."""
    for b in NICE_BINS_S:
        if span_s <= b * MAX_BINS:
            return b
    return float(np.ceil(span_s / MAX_BINS))


def counts_per_bin(times_s: np.ndarray, bin_s: float, span_s: float) -> np.ndarray:
    """How many times fall in each consecutive bin of `bin_s` from 0 to `span_s` (int64; times
    outside are left out)."""
    n = max(int(np.ceil(span_s / bin_s - 1e-9)), 1)
    t = np.asarray(times_s, dtype=np.float64)
    t = t[(t >= 0) & (t < n * bin_s)]
    return np.bincount((t // bin_s).astype(np.int64), minlength=n)[:n].astype(np.int64)


def rate_curve(times_s: np.ndarray, bin_s: float, span_s: float) -> list[float]:
    """Requests per second in consecutive bins of `bin_s` from 0 to `span_s`."""
    return (counts_per_bin(times_s, bin_s, span_s) / bin_s).tolist()


LOG_SPREAD = 50  # max/min beyond this: geometric bins, so a long tail does not lump the body


def length_edges(values: np.ndarray) -> np.ndarray:
    """Integer bin edges spanning `values`: one per value when there are at most LENGTH_BINS
    values, else LENGTH_BINS equal bins, or geometric ones when max/min exceeds LOG_SPREAD."""
    v = np.asarray(values, dtype=np.int64)
    if not len(v):
        return np.zeros(0, dtype=np.int64)
    lo, hi = max(int(v.min()), 1), int(v.max()) + 1
    if hi - lo <= LENGTH_BINS:
        return np.arange(lo, hi + 1, dtype=np.int64)
    if hi / lo > LOG_SPREAD:
        return np.unique(np.round(np.geomspace(lo, hi, LENGTH_BINS + 1)).astype(np.int64))
    step = int(np.ceil((hi - lo) / LENGTH_BINS))
    return np.arange(lo, lo + step * LENGTH_BINS + 1, step, dtype=np.int64)


def length_counts(values: np.ndarray, edges: np.ndarray) -> list[int]:
    """How many values fall in each [edges[i], edges[i + 1]) (the last bin closed)."""
    if len(edges) < 2:
        return []
    counts, _ = np.histogram(np.asarray(values, dtype=np.int64), bins=edges)
    return counts.astype(np.int64).tolist()
