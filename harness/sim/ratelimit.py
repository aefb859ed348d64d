"""Request and token rate limits, as a gateway enforces them: token buckets, 429, Retry-After.

Pure (the caller passes the clock reading). Limits are per minute of wall-clock time, the
client's clock: `--speedup` makes the model faster, not the limits looser. Like OpenAI, which
quantises its per-minute limits ("60,000 requests/minute may be enforced as 1,000
requests/second"), each bucket holds `burst_s` seconds of its limit and refills continuously
at limit / 60 per second. A request is admitted when every bucket holds its cost -- or is
full, so that one request larger than a bucket is not refused for ever; it then leaves that
bucket in debt. A token request costs its prompt tokens plus its max_tokens, as OpenAI counts.

Headers are OpenAI's: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` on every answer,
and on a 429 `Retry-After` (whole seconds, rounded up) and `retry-after-ms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SECONDS_PER_MINUTE = 60.0


@dataclass(slots=True)
class Bucket:
    """One limit: `capacity` units, refilled at `rate_per_s`; `level` may go below 0 (debt)."""

    limit_per_min: int
    capacity: float
    rate_per_s: float
    level: float
    t_s: float

    @classmethod
    def of(cls, limit_per_min: int, burst_s: float, now_s: float) -> Bucket:
        rate = limit_per_min / SECONDS_PER_MINUTE
        capacity = max(rate * burst_s, 1.0)
        return cls(limit_per_min, capacity, rate, capacity, now_s)

    def refill(self, now_s: float) -> None:
        if now_s > self.t_s:
            self.level = min(self.capacity, self.level + (now_s - self.t_s) * self.rate_per_s)
            self.t_s = now_s

    def wait_s(self, cost: float) -> float:
        """0 when `cost` may go now, else how long until it may."""
        if self.level >= cost or self.level >= self.capacity:
            return 0.0
        need = min(cost, self.capacity)
        return (need - self.level) / self.rate_per_s

    def reset_s(self) -> float:
        """Seconds until the bucket is full again (OpenAI's x-ratelimit-reset-*)."""
        return max(self.capacity - self.level, 0.0) / self.rate_per_s


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    retry_after_s: float  # 0 when admitted
    limit: str  # "requests" or "tokens" when refused, else ""
    headers: dict[str, str]
    message: str = ""


def duration_text(s: float) -> str:
    """OpenAI's reset format: "20ms", "1s", "6m0s"."""
    if s < 1:
        return f"{max(math.ceil(s * 1000), 0)}ms"
    if s < 60:
        return f"{s:.3g}s"
    return f"{int(s // 60)}m{int(s % 60)}s"


class RateLimiter:
    """RPM and TPM buckets (either may be None)."""

    def __init__(self, rpm: int | None, tpm: int | None, burst_s: float, now_s: float) -> None:
        self.requests = Bucket.of(rpm, burst_s, now_s) if rpm else None
        self.tokens = Bucket.of(tpm, burst_s, now_s) if tpm else None

    @property
    def active(self) -> bool:
        return self.requests is not None or self.tokens is not None

    def admit(self, cost_tokens: int, model: str, now_s: float) -> Verdict:
        """Admit one request costing `cost_tokens` now, or say how long to wait."""
        waits: list[tuple[float, str, Bucket, float]] = []
        for name, bucket, cost in (
            ("requests", self.requests, 1.0),
            ("tokens", self.tokens, float(cost_tokens)),
        ):
            if bucket is None:
                continue
            bucket.refill(now_s)
            waits.append((bucket.wait_s(cost), name, bucket, cost))
        refused = [w for w in waits if w[0] > 0]
        if not refused:
            for _, _, bucket, cost in waits:
                bucket.level -= cost
            return Verdict(True, 0.0, "", self.headers())
        wait, name, bucket, cost = max(refused, key=lambda w: w[0])
        unit = "requests per min (RPM)" if name == "requests" else "tokens per min (TPM)"
        used = int(max(bucket.capacity - bucket.level, 0))
        message = (
            f"Rate limit reached for {model} in organization org-harness-sim on {unit}: Limit "
            f"{bucket.limit_per_min}, Used {used}, Requested {int(cost)}. Please try again in "
            f"{duration_text(wait)}. Visit https://platform.openai.com/account/rate-limits to "
            "learn more."
        )
        headers = self.headers()
        headers["Retry-After"] = str(max(math.ceil(wait), 1))
        headers["retry-after-ms"] = str(max(math.ceil(wait * 1000), 1))
        return Verdict(False, wait, name, headers, message)

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is not None:
                out[f"x-ratelimit-limit-{name}"] = str(bucket.limit_per_min)
                out[f"x-ratelimit-remaining-{name}"] = str(max(int(bucket.level), 0))
                out[f"x-ratelimit-reset-{name}"] = duration_text(bucket.reset_s())
        return out
