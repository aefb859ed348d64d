"""Injected faults: which request gets which misbehaviour, and the constants that shape them.

Each request draws at most one fault, in arrival order from a generator seeded with the
simulator's seed, so a run with the same seed and arrival order fails the same requests.
Rates are fractions of requests (0..1) and add up to at most 1.

    http429       answer 429 with `Retry-After` before doing any work
    http500       answer 500 before doing any work
    disconnect    cut the connection halfway through the answer (no [DONE], no last chunk)
    stall         stop writing halfway through for STALL_S (model seconds), then go on
    malformed     send one `data:` event that is not JSON halfway through, then go on
    slow_headers  hold the response headers back for SLOW_HEADERS_S (model seconds)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from harness.sim.settings import FAULT_KINDS

STALL_S = 60.0  # longer than a typical client idle/read timeout (30 s)
SLOW_HEADERS_S = 5.0  # long enough to show in time-to-headers, short of any timeout
RETRY_AFTER_S = 1  # the 429's Retry-After header
MALFORMED_EVENT = b'data: {"id": "broken", "choices": [{"delta": \n\n'


class FaultPicker:
    """Draws one fault kind (or None) per request."""

    def __init__(self, rates: Mapping[str, float], seed: int) -> None:
        self.kinds = [k for k in FAULT_KINDS if rates.get(k, 0.0) > 0]
        self.edges = np.cumsum([rates[k] for k in self.kinds]) if self.kinds else np.zeros(0)
        self._rng = np.random.default_rng([seed, 0xFA017])

    def pick(self) -> str | None:
        if not self.kinds:
            return None
        u = float(self._rng.random())
        i = int(np.searchsorted(self.edges, u, side="right"))
        return self.kinds[i] if i < len(self.kinds) else None


def midpoint(target_tokens: int) -> int:
    """After how many written tokens a mid-stream fault strikes (at least one is written)."""
    return max(1, target_tokens // 2)
