"""How the views write a number: one formatter for the text, sweep, compare and HTML reports.

Significant digits follow the size, so a column of latencies reads evenly:
1234.5 -> "1,234"; 123.45 -> "123.5"; 12.345 -> "12.35"; 0.12345 -> "0.123".
An int, and zero, are written as integers: 4 -> "4", 0.0 -> "0" (`fmt_count` writes any whole
float as one too: a count read back from JSON). None, NaN, infinities and non-numbers are "-".

`text_table` lays out a text table with each column as wide as its widest cell, so cells never
run together, and `plural` picks a noun's form for a count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

COLUMN_GAP = 2  # spaces between two columns of a text table


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
    if isinstance(v, int) or x == 0:
        return f"{int(x):,}"
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


def fmt_count(v: Any) -> str:
    """A count: a whole number as an integer (4.0 -> "4", 12000.0 -> "12,000"), a fraction
    (a mean over repeats) as `fmt_number` writes it."""
    x = finite(v)
    if x is not None and x.is_integer():
        return f"{int(x):,}"
    return fmt_number(v)


def plural(n: float, word: str, many: str | None = None) -> str:
    """`n` and the noun in the form it asks: 1 phase, 2 phases, 0 phases (`many`: an irregular
    plural)."""
    return f"{fmt_count(n)} {word if n == 1 else (many or word + 's')}"


def text_table(
    head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1, indent: str = "  "
) -> list[str]:
    """Lines of a table: the first `left` columns aligned left, the others right, each as wide
    as its widest cell (head included) and COLUMN_GAP spaces apart."""
    n = len(head)
    widths = [max([len(head[i]), *(len(r[i]) for r in rows if i < len(r))]) for i in range(n)]
    gap = " " * COLUMN_GAP

    def line(cells: Sequence[str]) -> str:
        padded = [
            (c.ljust(w) if i < left else c.rjust(w))
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ]
        return (indent + gap.join(padded)).rstrip()

    return [line(head), *(line(r) for r in rows)]


__all__ = ["finite", "fmt_count", "fmt_number", "plural", "text_table"]
