"""One number formatter for every view."""

from __future__ import annotations

import math

import pytest

from harness.analysis.numbers import finite, fmt_number


@pytest.mark.parametrize(
    ("v", "want"),
    [
        (1234.5, "1,234"),  # >= 1000: thousands separator, no decimals (round half to even)
        (123.45, "123.5"),  # >= 100: one decimal
        (12.345, "12.35"),  # >= 1: two decimals
        (0.12345, "0.123"),  # below 1: three decimals
        (-12.345, "-12.35"),  # the size, not the sign, picks the digits
        (0, "0.000"),
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
