"""Multi-turn sessions in the result: sessions counted apart from requests, and TTFT by turn index.

`session_block(c, rows)` reads the `session` and `turn` columns of the records (the journal's
`sid`/`ti`; single-turn runs have none, and their result has no `sessions` key). Per turn index:
how many requests, TTFT (first token - sent) of the successful ones, their mean prompt tokens as
the server counted them, and the median over requests of TTFT per 1,000 prompt tokens (a median:
one slow request does not move it) -- with prefix caching, later turns' long prompts are mostly
found in the cache, so that figure falls turn after turn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.record.metrics import Columns, exact_stats_ms

PER_PROMPT_TOKENS = 1000  # TTFT is given per this many prompt tokens


def session_block(c: Columns, rows: np.ndarray) -> dict[str, Any] | None:
    """The `sessions` entry of a result block (None when its rows hold no session)."""
    if c.session is None or c.turn is None:
        return None
    final = rows & ~c.retried & (c.session >= 0)
    if not final.any():
        return None
    sid, turn = c.session[final], c.turn[final]
    ok = c.ok[final]
    ids, inverse = np.unique(sid, return_inverse=True)
    failed_sessions = np.zeros(len(ids), dtype=bool)
    np.logical_or.at(failed_sessions, inverse, ~ok)
    turns_sent = np.bincount(inverse, minlength=len(ids))
    first = c.first()[final]
    ttft = np.where(ok & (first >= 0), first - c.sent[final], -1)
    by_turn = []
    for t in np.unique(turn).tolist():
        at = turn == t
        good = at & (ttft >= 0)
        stats = exact_stats_ms(ttft[good].astype(np.float64))
        prompt = c.prompt_tokens[final][good]
        per_token = ttft[good][prompt > 0] / prompt[prompt > 0] * PER_PROMPT_TOKENS / 1e6
        by_turn.append(
            {
                "turn_index": int(t),
                "requests": int(at.sum()),
                "completed": int((at & ok).sum()),
                "ttft_ms": {k: stats[k] for k in ("count", "mean", "p50", "p90", "p99", "max")},
                "prompt_tokens_mean": float(prompt.mean()) if len(prompt) else None,
                "ttft_ms_per_1k_prompt_tokens_p50": (
                    float(np.percentile(per_token, 50, method="inverted_cdf"))
                    if len(per_token)
                    else None
                ),
            }
        )
    return {
        "sessions": int(len(ids)),
        "requests": int(final.sum()),
        "sessions_with_a_failed_turn": int(failed_sessions.sum()),
        "turns_per_session_mean": float(turns_sent.mean()),
        "turns_per_session_max": int(turns_sent.max()),
        "ttft_by_turn": by_turn,
    }
