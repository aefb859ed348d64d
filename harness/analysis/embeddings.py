"""An embeddings run's figures: latency and throughput of answers that are not streamed.

An embeddings answer comes whole (harness.client.embeddings): its record carries no token stamps,
so TTFT, TPOT and ITL do not exist. What a phase (or the summary) gets instead, as its
`embeddings` block: the latency of each successful request, sent -> the read that completed its
answer (`e2e`) and intended -> that read (`e2e_from_schedule`, free of coordinated omission), and
the rates over the phase's window -- requests, inputs (requests x `workload.batch`) and input
tokens (the server's `usage.prompt_tokens`) per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.record.metrics import Columns, exact_stats_ms

NO_STREAMING = (
    "no streaming: an embeddings answer comes whole, so there is no TTFT, TPOT or ITL; "
    "latency is the whole answer's"
)


def embeddings_block(
    c: Columns, rows: np.ndarray, windows: Sequence[tuple[int, int]], batch: int
) -> dict[str, Any]:
    """The `embeddings` block of the rows (one phase, or the measured ones) over `windows`."""
    ok = rows & c.ok & ~c.retried & (c.sent >= 0) & (c.end >= 0)
    dur_s = sum(max(e - s, 0) for s, e in windows) / 1e9
    inside = np.zeros(c.n, dtype=bool)
    for s, e in windows:
        inside |= (c.end >= s) & (c.end < e)
    done = ok & inside
    n_done = int(done.sum())
    tokens = int(c.prompt_tokens[done].sum())
    rate = (lambda v: v / dur_s) if dur_s > 0 else (lambda v: 0.0)
    return {
        "streaming": False,
        "note": NO_STREAMING,
        "batch": batch,
        "latency_ms": {
            "e2e": exact_stats_ms((c.end - c.sent)[ok]),
            "e2e_from_schedule": exact_stats_ms((c.end - c.intended)[ok]),
        },
        "window_s": dur_s,
        "requests_per_s": rate(float(n_done)),
        "inputs_per_s": rate(float(n_done * batch)),
        "input_tokens_per_s": rate(float(tokens)),
        "input_tokens_per_request": tokens / n_done if n_done else None,
    }


__all__ = ["NO_STREAMING", "embeddings_block"]
