"""The prefix cache per request, in the result: how much of each prompt the server found cached,
and TTFT against that share.

A server that sends `usage.prompt_tokens_details.cached_tokens` (vLLM with
`--enable-prompt-tokens-details`, OpenAI, the simulator) says per request how many prompt tokens
it did not compute again (`Record.cached_tokens`, vetted by harness.record.usage). The *hit share*
of a request is cached / prompt tokens, both as the server counted them.

`prefix_cache_block(c, rows, reported)` is the `prefix_cache` entry of a result block, over the
successful requests of `rows` that have a prompt count:

- `requests`, `requests_with_hits` (hit share > 0), `prompt_tokens`, `cached_tokens` and
  `token_hit_share` (cached / prompt tokens over the block, the figure /metrics' hit rate
  approximates);
- `hit_share`: the per-request distribution (mean, p10, p50, p90, max);
- `ttft_by_hit_share`: TTFT (first token - sent) p50/p90 in hit-share bins (SHARE_BINS), with
  the mean of the prompt tokens the server still had to compute (`uncached_prompt_tokens_mean`):
  a request's prefill is that part;
- `by_turn` (multi-turn runs): the hit share by turn index.

`reported` is run-wide: whether any request of the run carried a cached count. Where none did the
entry is None ("not reported") and nothing else changes. Where some did, a successful request
without one counts as 0 cached (`requests_without_details`): older vLLM releases sent
`prompt_tokens_details` only for a hit (`if self.enable_prompt_tokens_details and
num_cached_tokens:` in serving_chat.py), so a miss came without it; vLLM 0.32 sends 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.record.metrics import Columns

# (label, low, high): a share s is in the bin when low < s <= high; the first bin is s == 0.
SHARE_BINS: tuple[tuple[str, float, float], ...] = (
    ("0", 0.0, 0.0),
    ("(0, 0.25]", 0.0, 0.25),
    ("(0.25, 0.5]", 0.25, 0.5),
    ("(0.5, 0.75]", 0.5, 0.75),
    ("(0.75, 1]", 0.75, 1.0),
)


def reports_cached(c: Columns) -> bool:
    """Whether any request of the run carried a (believed) cached count."""
    return c.cached is not None and bool((c.cached >= 0).any())


def _pct(v: np.ndarray, q: float) -> float | None:
    return float(np.percentile(v, q, method="inverted_cdf")) if len(v) else None


def hit_shares(c: Columns, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(selected rows, cached tokens, hit share) for the successful `rows` with a prompt count;
    a request without a cached count counts 0."""
    sel = rows & c.ok & (c.prompt_tokens > 0)
    cached_all = c.cached if c.cached is not None else np.full(c.n, -1, dtype=np.int64)
    cached = np.maximum(cached_all[sel], 0)
    share = cached / c.prompt_tokens[sel]
    return sel, cached, share


def _bin_masks(share: np.ndarray) -> list[np.ndarray]:
    return [
        (share == 0) if high == 0 else ((share > low) & (share <= high))
        for _, low, high in SHARE_BINS
    ]


def prefix_cache_block(c: Columns, rows: np.ndarray, reported: bool) -> dict[str, Any] | None:
    """The `prefix_cache` entry of a result block (module docstring); None: not reported."""
    if not reported:
        return None
    sel, cached, share = hit_shares(c, rows)
    prompt = c.prompt_tokens[sel]
    has_count = (c.cached[sel] >= 0) if c.cached is not None else np.zeros(len(prompt), bool)
    first = c.first()[sel]
    ttft_ms = np.where(first >= 0, (first - c.sent[sel]) / 1e6, np.nan)
    uncached = prompt - cached
    bins = []
    for (label, low, high), m in zip(SHARE_BINS, _bin_masks(share), strict=True):
        t = ttft_ms[m]
        t = t[~np.isnan(t)]
        bins.append(
            {
                "bin": label,
                "low": low,
                "high": high,
                "requests": int(m.sum()),
                "ttft_ms": {"count": int(len(t)), "p50": _pct(t, 50), "p90": _pct(t, 90)},
                "uncached_prompt_tokens_mean": float(uncached[m].mean()) if m.any() else None,
            }
        )
    total_prompt, total_cached = int(prompt.sum()), int(cached.sum())
    out: dict[str, Any] = {
        "requests": int(sel.sum()),
        "requests_without_details": int((~has_count).sum()),
        "requests_with_hits": int((cached > 0).sum()),
        "prompt_tokens": total_prompt,
        "cached_tokens": total_cached,
        "token_hit_share": total_cached / total_prompt if total_prompt else None,
        "hit_share": {
            "mean": float(share.mean()) if len(share) else None,
            "p10": _pct(share, 10),
            "p50": _pct(share, 50),
            "p90": _pct(share, 90),
            "max": float(share.max()) if len(share) else None,
        },
        "ttft_by_hit_share": bins,
    }
    if c.session is not None and c.turn is not None and (c.session[sel] >= 0).any():
        turn = c.turn[sel]
        out["by_turn"] = [
            {
                "turn_index": int(t),
                "requests": int((turn == t).sum()),
                "hit_share_mean": float(share[turn == t].mean()),
                "cached_tokens_mean": float(cached[turn == t].mean()),
            }
            for t in np.unique(turn).tolist()
        ]
    return out
