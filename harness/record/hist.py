"""HDR histograms: microseconds, 1 us .. 1 h, 3 significant digits, one per metric per phase.

Recording is vectorised (bucket indices computed with numpy, added with bincount), so ten
million token gaps are histogrammed in well under a second; `encode`/`decode` use the HdrHistogram
compressed, base64 wire format, so histograms from worker processes or machines merge exactly.
"""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # 1 hour
SIGNIFICANT_DIGITS = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_many(h: HdrHistogram, values_us: np.ndarray) -> None:
    """Record many values (microseconds; clipped to [0, 1 h]) exactly as `record_value` would."""
    if len(values_us) == 0:
        return
    v = np.clip(np.rint(np.asarray(values_us, dtype=np.float64)), 0, HIGHEST_US).astype(np.int64)
    _, exponent = np.frexp((v | h.sub_bucket_mask).astype(np.float64))
    bucket = exponent.astype(np.int64) - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub = v >> (bucket + h.unit_magnitude)
    idx = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + sub - h.sub_bucket_half_count
    counts = np.bincount(idx, minlength=h.counts_len)[: h.counts_len]
    nz = np.flatnonzero(counts)
    for i in nz.tolist():  # only occupied buckets: at most a few thousand
        h.counts[i] += int(counts[i])
    h.total_count += int(len(v))
    h.min_value = min(h.min_value, int(v.min()))
    h.max_value = max(h.max_value, int(v.max()))


def histogram_of(values_us: np.ndarray) -> HdrHistogram:
    h = new_histogram()
    record_many(h, values_us)
    return h


def encode(h: HdrHistogram) -> str:
    return h.encode().decode("ascii")


def decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text.encode("ascii"))


def merge(encoded: list[str]) -> HdrHistogram:
    """One histogram holding every value of the given encoded histograms."""
    out = new_histogram()
    for e in encoded:
        out.add(decode(e))
    return out


def stats_ms(h: HdrHistogram) -> dict[str, float | int | None]:
    """count/mean/percentiles/max in milliseconds, read from a histogram."""
    n = h.get_total_count()
    if n == 0:
        return empty_stats()
    pct = h.get_percentile_to_value_dict([50, 90, 95, 99, 99.9])
    return {
        "count": int(n),
        "mean": h.get_mean_value() / 1e3,
        "p50": pct[50] / 1e3,
        "p90": pct[90] / 1e3,
        "p95": pct[95] / 1e3,
        "p99": pct[99] / 1e3,
        "p999": pct[99.9] / 1e3,
        "max": h.get_max_value() / 1e3,
    }


def empty_stats() -> dict[str, float | int | None]:
    return {
        "count": 0,
        "mean": None,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
        "p999": None,
        "max": None,
    }
