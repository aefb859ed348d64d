"""Waits drawn per request: a multi-turn session's think time, an agent's tool time.

`"2s"` (fixed), `{ dist = "fixed", value = "2s" }`, `{ dist = "uniform", min = "1s", max = "5s" }`
or `{ dist = "exponential", mean = "2s" }`; at most MAX_THINK_S.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.config.validate import Table

THINK_DISTS = ("fixed", "uniform", "exponential")
MAX_THINK_S = 3600.0  # an hour between turns: beyond that a run measures nothing


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """Seconds between a turn's last token and the next turn's send: fixed, uniform or exponential."""

    dist: str
    a_s: float  # fixed: the value; uniform: min; exponential: mean
    b_s: float = 0.0  # uniform: max

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n think times in seconds (float64, >= 0)."""
        if self.dist == "fixed":
            return np.full(n, self.a_s, dtype=np.float64)
        if self.dist == "uniform":
            return rng.uniform(self.a_s, self.b_s, size=n)
        return np.minimum(rng.exponential(self.a_s, size=n), MAX_THINK_S)

    def __str__(self) -> str:
        if self.dist == "fixed":
            return f"{self.a_s:g}s"
        if self.dist == "uniform":
            return f"uniform({self.a_s:g}s..{self.b_s:g}s)"
        return f"exponential(mean {self.a_s:g}s)"


def parse_wait(t: Table, key: str = "think_time") -> ThinkTime:
    """A wait drawn per request (`think_time`, an agent's `tool_time`): a duration or a table."""
    raw = t.raw(key, "0s")
    if not isinstance(raw, dict):
        s = t.duration_s(key, 0.0, allow_zero=True)
        if s > MAX_THINK_S:
            t.fail(key, f"expected at most {MAX_THINK_S:g} s, got {s:g} s")
        return ThinkTime("fixed", s)
    tt = t.table(key)
    dist = tt.str("dist", choices=THINK_DISTS)
    if dist == "fixed":
        v = tt.duration_s("value", allow_zero=True)
        out = ThinkTime("fixed", v)
    elif dist == "uniform":
        lo, hi = tt.duration_s("min", allow_zero=True), tt.duration_s("max", allow_zero=True)
        if lo > hi:
            tt.fail("min", f"min ({lo:g} s) must be <= max ({hi:g} s)")
        out = ThinkTime("uniform", lo, hi)
    else:
        out = ThinkTime("exponential", tt.duration_s("mean", allow_zero=False))
    tt.finish()
    if max(out.a_s, out.b_s) > MAX_THINK_S:
        t.fail(key, f"expected at most {MAX_THINK_S:g} s, got {max(out.a_s, out.b_s):g} s")
    return out
