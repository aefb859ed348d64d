"""When to send a failed request again: the server's Retry-After, else exponential backoff.

Pure functions; the engine reads the clock and sleeps. A scenario's `[retry]` says which
failures are retried (`on`), how often (`max`), and the backoff: without a Retry-After the
n-th retry (n = 0, 1, ...) waits d = min(max_wait, backoff * 2**n) with "equal jitter", a
uniform draw in [d/2, d], so that requests refused together do not all come back together.
A Retry-After (whole or fractional seconds, an HTTP date, or OpenAI's `retry-after-ms`) is
honoured as given, capped at `max_wait`. The jitter is drawn from (seed, seq, attempt), so a
rerun with the same seed waits the same.
"""

from __future__ import annotations

import math
import random
from email.utils import parsedate_to_datetime

RETRY_AFTER = "retry_after"  # the wait came from the server's Retry-After
BACKOFF = "backoff"  # the wait came from the backoff


def parse_retry_after(
    value: str | None, value_ms: str | None = None, now_wall_s: float | None = None
) -> float | None:
    """Seconds to wait from a `Retry-After` header (delay-seconds or an HTTP date, RFC 9110
    10.2.3) or OpenAI's `retry-after-ms` (preferred when both are valid). None when absent or
    unreadable; a date in the past is 0. `now_wall_s`: time.time(), needed for a date."""
    if value_ms is not None:
        try:
            ms = float(value_ms)
            if math.isfinite(ms) and ms >= 0:
                return ms / 1000.0
        except ValueError:
            pass
    if value is None:
        return None
    text = value.strip()
    try:
        s = float(text)
        return s if math.isfinite(s) and s >= 0 else None
    except ValueError:
        pass
    if now_wall_s is None:
        return None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        return None
    return max(when.timestamp() - now_wall_s, 0.0)


def jitter_u(seed: int, seq: int, attempt: int) -> float:
    """A uniform draw in [0, 1) fixed by (seed, seq, attempt)."""
    return random.Random(f"{seed}:{seq}:{attempt}").random()


def backoff_s(attempt: int, base_s: float, cap_s: float, u: float) -> float:
    """Equal-jitter exponential backoff for retry number `attempt` (0 for the first retry)."""
    d = min(cap_s, base_s * 2.0 ** min(attempt, 60))
    return d / 2 + u * d / 2


def retry_wait_s(
    retry_after_s: float | None, attempt: int, base_s: float, cap_s: float, u: float
) -> tuple[float, str]:
    """(seconds to wait before retry number `attempt`, RETRY_AFTER or BACKOFF)."""
    if retry_after_s is not None:
        return min(retry_after_s, cap_s), RETRY_AFTER
    return backoff_s(attempt, base_s, cap_s, u), BACKOFF
