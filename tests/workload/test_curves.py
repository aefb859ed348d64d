"""Rate curves and length histograms: bins of a second or more, every value counted once."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.workload.curves import (
    LENGTH_BINS,
    MAX_BINS,
    bin_width_s,
    counts_per_bin,
    length_counts,
    length_edges,
    rate_curve,
)


def test_bin_width_covers_the_span_in_at_most_max_bins():
    assert bin_width_s(3.0) == 1.0  # a short run: 1 s bins (finer shows single arrivals)
    assert bin_width_s(MAX_BINS) == 1.0
    assert bin_width_s(MAX_BINS + 1) == 2.0
    assert bin_width_s(3600) == 30.0  # an hour: 120 bins of 30 s
    assert bin_width_s(10 * 86_400) == 7200.0  # beyond the nice widths: whole seconds


def test_rate_curve_counts_per_bin_and_leaves_out_what_lies_outside():
    t = np.array([-0.5, 0.1, 0.2, 1.5, 2.99, 3.0])
    # 3 s in 1 s bins: 2 in the first, 1 in each of the others; -0.5 and 3.0 are outside
    assert counts_per_bin(t, 1.0, 3.0).tolist() == [2, 1, 1]
    # 2 s bins: the last covers 2..4 s, past the span: 3 then 2 requests, per second
    assert rate_curve(t, 2.0, 3.0) == [1.5, 1.0]


@given(st.lists(st.integers(1, 200_000), min_size=1, max_size=300))
def test_length_histogram_counts_every_value_once(values):
    v = np.array(values)
    edges = length_edges(v)
    assert edges[0] <= v.min() and edges[-1] > v.max()
    assert (np.diff(edges) > 0).all() and len(edges) <= LENGTH_BINS + 1
    assert sum(length_counts(v, edges)) == len(v)


def test_length_edges_one_per_value_linear_or_geometric():
    assert length_edges(np.array([3, 4, 4, 7])).tolist() == [3, 4, 5, 6, 7, 8]
    lin = length_edges(np.arange(100, 341))  # 241 values over 100..340: 24 bins of 11
    assert np.diff(lin).tolist() == [11] * LENGTH_BINS
    geo = length_edges(np.array([1, 10, 100, 10_000]))  # a long tail: widths grow
    assert np.diff(geo)[0] < np.diff(geo)[-1]
