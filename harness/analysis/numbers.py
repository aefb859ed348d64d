"""How the views write a number: one formatter for the text, sweep, compare and HTML reports.

Significant digits follow the size, so a column of latencies reads evenly:
1234.5 -> "1,234"; 123.45 -> "123.5"; 12.345 -> "12.35"; 0.12345 -> "0.123".
None, NaN, infinities and non-numbers are written "-".
"""

from __future__ import annotations

import math
from typing import Any


def finite(v: Any) -> float | None:
    """v as a float when it is a finite int or float (not a bool), else None."""
    return (
        float(v)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        else None
    )


def fmt_number(v: Any) -> str:
    """The report form of a number (see the module docstring)."""
    x = finite(v)
    if x is None:
        return "-"
    a = abs(x)
    return (
        f"{x:,.0f}"
        if a >= 1000
        else f"{x:.1f}"
        if a >= 100
        else f"{x:.2f}"
        if a >= 1
        else f"{x:.3f}"
    )


__all__ = ["finite", "fmt_number"]
