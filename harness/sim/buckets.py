"""vLLM's histogram bucket bounds and the numpy bucket counter that files observations into them.

One place for both Prometheus faces that speak vLLM's buckets: the simulator's `/metrics`
(harness.sim.metrics, vLLM's names and bounds) and the client's live endpoint
(harness.orchestrate.live_metrics, vLLM's bounds plus finer ones below vLLM's lowest), so
that client and server quantiles line up. Counts are filed a whole array at a time (one
`np.searchsorted` and one `np.bincount` per batch), never one locked `observe` per value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# Bucket edges copied from vllm/v1/metrics/loggers.py (vLLM 0.32's vllm/v1/metrics/buckets.py),
# kept in rows as there so that they read against vLLM's source.
# fmt: off
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
REQUEST_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
# fmt: on
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class BucketCounts:
    """Per-bucket counts (the last: above every edge, +Inf) and the sum of what was filed."""

    def __init__(self, edges: Sequence[float]) -> None:
        self.edges = np.asarray(edges, dtype=float)
        self.counts = np.zeros(len(edges) + 1, np.int64)
        self.sum = 0.0

    def observe(
        self, values: np.ndarray | Sequence[float], weights: np.ndarray | None = None
    ) -> None:
        """File `values`; `weights[i]` counts values[i] that many times (1 each without)."""
        v = np.asarray(values, dtype=float)
        if v.size == 0:
            return
        idx = np.searchsorted(self.edges, v, side="left")  # le: a value on an edge counts in it
        per = np.bincount(idx, weights=weights, minlength=self.counts.size)
        self.counts += per if weights is None else per.astype(np.int64)
        self.sum += float(v.sum() if weights is None else np.dot(v, weights))

    def cumulative(self, label: Callable[[float], str]) -> list[tuple[str, int]]:
        """Prometheus' `le` buckets: (label(edge), count at or below it), then ("+Inf", all)."""
        cum = np.cumsum(self.counts)
        out = [(label(e), int(c)) for e, c in zip(self.edges, cum[:-1], strict=True)]
        out.append(("+Inf", int(cum[-1])))
        return out
