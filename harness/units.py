"""Parsing of human units used in scenario and config files: durations, rates, sizes.

Pure functions; each raises ValueError with a short reason that callers wrap in a
ConfigError naming the file and key.
"""

from __future__ import annotations

import math
import re

_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s|m|min|h)\s*$")
_DURATION_SCALE_S = {
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}

DURATION_HELP = 'a string with a unit, such as "500ms", "30s", "2m" or "1h"'
# The longest duration any setting takes: far beyond a real run, timeout or wait, and far below
# what nanosecond int64 stamps hold (292 years), so sums of phases and retry waits never overflow.
MAX_DURATION_S = 30 * 86_400.0
MAX_DURATION_TEXT = "720h (30 days)"


def parse_duration_s(value: object, *, allow_zero: bool = True) -> float:
    """Return seconds for "500ms", "30s", "2m", "1h" (a bare number is refused: units are required).

    Raises ValueError naming what is allowed; `1e400s` (infinite) and anything above
    MAX_DURATION_S are refused.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"expected {DURATION_HELP}, got {value!r}")
    m = _DURATION_RE.match(value)
    if not m:
        raise ValueError(f"expected {DURATION_HELP}, got {value!r}")
    seconds = float(m.group(1)) * _DURATION_SCALE_S[m.group(2)]
    if not seconds <= MAX_DURATION_S:  # also infinity, from "1e400s"
        raise ValueError(f"expected a duration of at most {MAX_DURATION_TEXT}, got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"expected a duration > 0, got {value!r}")
    return seconds


def format_duration_s(seconds: float) -> str:
    """Short human form: 0.0123 -> '12.3ms', 75 -> '75s'."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g}ms"
    return f"{seconds:.3g}s"


_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(rps|/s|req/s)?\s*$")


def parse_rate_per_s(value: object) -> float:
    """Requests per second from 12, 12.5, "12rps" or "12/s". Raises ValueError if not > 0."""
    if isinstance(value, bool):
        raise ValueError(f"expected requests/s as a number > 0, got {value!r}")
    if isinstance(value, int | float):
        rate = float(value)
    elif isinstance(value, str) and (m := _RATE_RE.match(value)):
        rate = float(m.group(1))
    else:
        raise ValueError(f"expected requests/s as a number > 0 (or '12rps'), got {value!r}")
    if not rate > 0 or rate != rate or rate == float("inf"):
        raise ValueError(f"expected requests/s > 0, got {value!r}")
    return rate


PERCENT_HELP = "a percentage such as '10%' or a fraction such as 0.1"


def parse_percent(value: object) -> float:
    """A fraction from '10%' (-> 0.10), a fraction 0.1 or its text '0.1'. Raises ValueError for
    anything else, NaN and infinities included; callers check the range they need."""
    if isinstance(value, bool):
        raise ValueError(f"expected {PERCENT_HELP}, got {value!r}")
    if isinstance(value, int | float):
        v = float(value)
    elif isinstance(value, str):
        s = value.strip()
        try:
            v = float(s[:-1]) / 100.0 if s.endswith("%") else float(s)
        except ValueError:
            raise ValueError(f"expected {PERCENT_HELP}, got {value!r}") from None
    else:
        raise ValueError(f"expected {PERCENT_HELP}, got {value!r}")
    if not math.isfinite(v):
        raise ValueError(f"expected {PERCENT_HELP}, got {value!r}")
    return v
