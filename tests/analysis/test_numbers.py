"""One number formatter for every view."""

from __future__ import annotations

import math

import pytest

from harness.analysis.numbers import finite, fmt_count, fmt_number, plural, text_table


@pytest.mark.parametrize(
    ("v", "want"),
    [
        (1234.5, "1,234"),  # >= 1000: thousands separator, no decimals (round half to even)
        (123.45, "123.5"),  # >= 100: one decimal
        (12.345, "12.35"),  # >= 1: two decimals
        (0.12345, "0.123"),  # below 1: three decimals
        (-12.345, "-12.35"),  # the size, not the sign, picks the digits
        (0, "0"),  # zero is written as the integer it is (issue 24: `0.000` counts)
        (0.0, "0"),
        (4, "4"),  # an int is an integer, never `4.00`
        (12000, "12,000"),
        (4.0, "4.00"),  # a float keeps its digits (a latency); counts go through fmt_count
        (None, "-"),  # missing
        (math.nan, "-"),  # not a number
        (math.inf, "-"),
        (True, "-"),  # a bool is not a number here
        ("12", "-"),  # nor is text
    ],
)
def test_fmt_number(v, want):
    assert fmt_number(v) == want


def test_finite():
    assert finite(3) == 3.0 and finite(2.5) == 2.5
    assert finite(math.nan) is None and finite(False) is None and finite(None) is None


def test_fmt_count_and_plural():
    assert fmt_count(4.0) == "4" and fmt_count(12000.0) == "12,000" and fmt_count(0.0) == "0"
    assert fmt_count(4.5) == "4.50"  # a mean over repeats keeps its fraction
    assert plural(1, "phase") == "1 phase" and plural(2, "phase") == "2 phases"
    assert plural(1.0, "replica") == "1 replica" and plural(0, "point") == "0 points"


def test_text_table_columns_never_run_together():
    """Issue 24: `9,932 [5000-10000]14,470 [10000-15000]` in fixed 20-wide columns."""
    rows = [["TTFT server", "16,191", "9,932 [5000-10000]", "14,470 [10000-15000]"]]
    head = ["latency (ms)", "mean", "p50", "p99"]
    lines = text_table(head, rows)
    assert "]14,470" not in lines[1] and "16,191  9,932 [5000-10000]  14,470" in lines[1]
    # every column is as wide as its widest cell: the right edges line up
    assert len(lines[0]) == len(lines[1])
