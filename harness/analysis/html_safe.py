"""What an HTML page may hold: chart series bounded in points, and text with no control characters.

- `bounded_points`: a chart series of more than MAX_SERIES_POINTS points is downsampled to the
  minimum and the maximum of each of MAX_SERIES_POINTS / 2 bins of consecutive points (so peaks
  and dips survive), and the chart says so. A run with 3 M-point time series makes a page of a
  few hundred KB, not 369 MB.
- `html_text` / `safe_strings`: the one escaping of text for every HTML view (result, compare,
  sweep, capacity, plan: all go through `harness.analysis.html.page`). Control characters, bidi
  overrides and isolates (U+202E and kin) and line separators are replaced by their `\\uXXXX`
  escape exactly as `harness.termtext.terminal_safe` does for the terminal, so a model, scenario
  or phase name reads the same in both and cannot reorder what a line of the page says.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.analysis.numbers import finite
from harness.termtext import terminal_safe

MAX_SERIES_POINTS = 2000  # per series: 1,000 bins of (min, max), finer than a chart's pixels


def html_text(text: str) -> str:
    """`text` as a page shows it: every control, bidi and separator character escaped."""
    return terminal_safe(text)


def safe_strings(obj: Any) -> Any:
    """`obj` (JSON-like: dicts, lists, tuples, strings, numbers) with `html_text` applied to every
    string, keys included. Numbers and numpy arrays are returned as they are."""
    if isinstance(obj, str):
        return html_text(obj)
    if isinstance(obj, dict):
        return {
            (html_text(k) if isinstance(k, str) else k): safe_strings(v) for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [safe_strings(v) for v in obj]
    return obj


def series_xy(values: Any, step: float, per: float, first: float = 1.0) -> Any:
    """A result time series (one value per step) as chart points [(i + first) * step, v / per]:
    an (n, 2) array when the values are numbers (no Python list per point), else a list."""
    try:
        ys = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return [
            [(i + first) * step, v / per] for i, v in enumerate(values) if finite(v) is not None
        ]
    if ys.ndim != 1:
        return []
    return np.column_stack([(np.arange(len(ys)) + first) * step, ys / per])


def _as_xy(points: Any, xlog: bool, ylog: bool) -> np.ndarray:
    """The drawable points as an (n, 2) float array: both finite, positive on a log axis."""
    arr: np.ndarray | None = None
    if isinstance(points, np.ndarray):
        arr = points.astype(np.float64, copy=False).reshape(-1, 2)
    else:
        rows = [
            (fx, fy)
            for x, y in points
            if (fx := finite(x)) is not None and (fy := finite(y)) is not None
        ]
        arr = np.array(rows, dtype=np.float64).reshape(-1, 2)
    keep = np.isfinite(arr).all(axis=1)
    if xlog:
        keep &= arr[:, 0] > 0
    if ylog:
        keep &= arr[:, 1] > 0
    return arr if keep.all() else arr[keep]


def _min_max_bins(xy: np.ndarray, max_points: int) -> np.ndarray:
    """At most `max_points` rows of `xy`: the first and the last (the x span stays whole) and,
    per bin of consecutive rows, the rows holding the bin's least and greatest y, in order."""
    n, bins = len(xy), max(1, (max_points - 2) // 2)
    width = -(-n // bins)  # ceil
    bins = -(-n // width)
    pad = bins * width - n
    y = xy[:, 1]
    lo = np.concatenate([y, np.full(pad, np.inf)]).reshape(bins, width).argmin(axis=1)
    hi = np.concatenate([y, np.full(pad, -np.inf)]).reshape(bins, width).argmax(axis=1)
    base = np.arange(bins) * width
    idx = np.unique(np.concatenate([[0, n - 1], base + lo, base + hi]))  # sorted: in order
    out: np.ndarray = xy[idx]
    return out


def bounded_points(
    points: Any, *, xlog: bool = False, ylog: bool = False, max_points: int = MAX_SERIES_POINTS
) -> tuple[list[list[float]], int]:
    """(the points to draw, how many drawable points there were). More than `max_points`
    drawable points are reduced to the min and max of each bin (see the module docstring)."""
    xy = _as_xy(points, xlog, ylog)
    n = len(xy)
    if n > max_points:
        xy = _min_max_bins(xy, max_points)
    shown: list[list[float]] = xy.tolist()
    return shown, n


def downsample_note(drawn: int, total: int) -> str:
    """What a chart says when its series were downsampled."""
    return (
        f"downsampled: {drawn:,} of {total:,} points drawn, the lowest and highest of each bin "
        f"of consecutive points, so peaks and dips are kept"
    )
