"""Counts over a run's `Columns`: requests by outcome, tokens (by channel, per chunk, against
the plan), throughput inside time windows, and the per-second time series.

Throughput is counted inside a time window: output tokens whose events arrived in it,
requests whose last token arrived in it, divided by its length. A token event carries the
tokens the server's per-chunk usage gave it; where a server reports only the final usage and
it exceeds the count of events (a gateway that coalesces tokens into chunks), the request's
tokens are spread evenly over its events (`token_weights`), and ITL is per chunk
(`token_counting` says which).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.record.columns import Columns, chunk_token_sums
from harness.record.records import CHANNEL_NAMES, Channel
from harness.record.usage import flag_reasons


def window_throughput(
    c: Columns, windows: Sequence[tuple[int, int]], good: np.ndarray
) -> dict[str, float]:
    """Rates inside the union of [start, end) windows (ns)."""
    dur_s = sum(max(e - s, 0) for s, e in windows) / 1e9
    if dur_s <= 0:
        return {
            "window_s": 0.0,
            "requests_per_s": 0.0,
            "output_tokens_per_s": 0.0,
            "total_tokens_per_s": 0.0,
            "goodput_requests_per_s": 0.0,
        }

    def inside(t: np.ndarray) -> np.ndarray:
        m = np.zeros(len(t), dtype=bool)
        for s, e in windows:
            m |= (t >= s) & (t < e)
        return m

    done = c.ok & inside(c.end)
    weights = token_weights(c)
    out_tokens = weights[inside(c.stamps)].sum()
    out_tokens = int(out_tokens) if weights.dtype.kind == "i" else float(out_tokens)
    prompt_tokens = int(c.prompt_tokens[done].sum())
    return {
        "window_s": dur_s,
        "requests_per_s": float(done.sum()) / dur_s,
        "output_tokens_per_s": out_tokens / dur_s,
        "total_tokens_per_s": (out_tokens + prompt_tokens) / dur_s,
        "goodput_requests_per_s": float((done & good).sum()) / dur_s,
    }


def request_counts(c: Columns, rows: np.ndarray) -> tuple[dict[str, int], dict[str, int]]:
    final = rows & ~c.retried
    errors = Counter(c.error_class[i] for i in np.flatnonzero(final & ~c.ok))
    retried = int((rows & c.retried).sum())
    not_sent = errors.get("not_sent", 0)
    counts = {
        "planned_or_due": int(final.sum()),
        "sent": int((final & (c.sent >= 0)).sum()),
        "completed": int((final & c.ok).sum()),
        "failed": int((final & ~c.ok).sum()) - not_sent,
        "not_sent": not_sent,
        "retried_attempts": retried,
    }
    return counts, dict(sorted((k, v) for k, v in errors.items() if k is not None))


def token_summary(c: Columns, rows: np.ndarray) -> dict[str, Any]:
    ok = rows & c.ok
    n_ok = int(ok.sum())
    out: dict[str, Any] = {
        "prompt_total": int(c.prompt_tokens[ok].sum()),
        "output_total": int(c.output_tokens[ok].sum()),
        "per_chunk_usage": bool(c.usage_per_chunk[ok].any()) if n_ok else None,
    }
    chunks = int(c.n_chunks[ok].sum())
    out["tokens_per_chunk_mean"] = (float(c.output_tokens[ok].sum()) / chunks) if chunks else None
    reported = ok & (c.prompt_tokens > 0) & (c.planned_prompt > 0)
    if reported.any():
        rel = (c.prompt_tokens[reported] - c.planned_prompt[reported]) / c.planned_prompt[reported]
        out["prompt_synthesis_error"] = {
            "mean": float(np.mean(np.abs(rel))),
            "p99": float(np.percentile(np.abs(rel), 99)),
            "mean_signed": float(np.mean(rel)),
        }
    else:
        out["prompt_synthesis_error"] = None
    if n_ok:
        out["output_matches_requested_share"] = float(
            (c.output_tokens[ok] == c.planned_output[ok]).mean()
        )
    out["usage_rejected"] = usage_rejected(c, rows)
    out["channels"] = channel_tokens(c, rows)
    # every attempt, as for usage_rejected: a failed one's tokens count in throughput too
    out["past_max_tokens_requests"] = int(
        (rows & (c.planned_output > 0) & (c.output_tokens > c.planned_output)).sum()
    )
    return out


def channel_tokens(c: Columns, rows: np.ndarray) -> dict[str, Any]:
    """The output tokens of the successful `rows` by channel (`answer_tokens`, ...: the tokens
    their events carried), the requests with any event of each channel, and the reasoning count
    checked against the server's usage.completion_tokens_details.reasoning_tokens:
    `usage_reasoning_tokens` (None: no request sent it) and `reasoning_disagree_requests`, the
    requests whose usage said another count than their reasoning events carried."""
    ok = rows & c.ok
    owner_ok = np.repeat(ok, c.n_chunks)
    chan = c.channel if c.channel is not None else np.zeros(len(c.stamps), dtype=np.int8)
    out: dict[str, Any] = {}
    per_req = {}
    for ch, name in zip(Channel, CHANNEL_NAMES, strict=True):
        m = owner_ok & (chan == ch)
        out[f"{name}_tokens"] = int(c.tokens[m].sum())
        per_req[ch] = np.bincount(c.owner()[m], weights=c.tokens[m], minlength=c.n).astype(np.int64)
        out[f"{name}_requests"] = int((per_req[ch] > 0).sum())
    u = c.usage_reasoning
    sent = ok & (u >= 0) if u is not None else np.zeros(c.n, dtype=bool)
    out["usage_reasoning_tokens"] = int(u[sent].sum()) if u is not None and sent.any() else None
    out["reasoning_disagree_requests"] = (
        int((sent & (u != per_req[Channel.REASONING])).sum()) if u is not None else 0
    )
    return out


def usage_rejected(c: Columns, rows: np.ndarray) -> dict[str, Any]:
    """The attempts among `rows` whose server-reported counts were not believed
    (harness.record.usage), and how many for each reason; their figures are the client's own
    (one token per token event; no prompt count)."""
    reasons: Counter[str] = Counter()
    flags = c.usage_flag
    if not flags or not any(flags):
        return {"requests": 0, "reasons": {}}
    hit = np.flatnonzero(rows & np.fromiter(map(bool, flags), dtype=bool, count=c.n))
    for i in hit.tolist():
        reasons.update(set(flag_reasons(flags[i])))
    return {"requests": len(hit), "reasons": dict(sorted(reasons.items()))}


def timeseries(
    c: Columns, end_ns: int, step_ns: int = 1_000_000_000
) -> dict[str, list[int] | float]:
    """Per-second counts over the run: offered (intended), sent, completed, errors, in flight
    (at each second's end) and output tokens."""
    bins = max(int(np.ceil(end_ns / step_ns)), 1)

    def count(t: np.ndarray, w: np.ndarray | None = None) -> list[int]:
        keep = (t >= 0) & (t < bins * step_ns)
        idx = (t[keep] // step_ns).astype(np.int64)
        weights = None if w is None else w[keep]
        counts: list[int] = (
            np.bincount(idx, weights=weights, minlength=bins)[:bins].astype(np.int64).tolist()
        )
        return counts

    final = ~c.retried
    edges = (np.arange(bins) + 1) * step_ns
    sent = np.sort(c.sent[c.sent >= 0])
    ended = np.sort(np.where(c.end >= 0, c.end, np.iinfo(np.int64).max)[c.sent >= 0])
    in_flight = np.searchsorted(sent, edges, side="right") - np.searchsorted(
        ended, edges, side="right"
    )
    return {
        "step_s": step_ns / 1e9,
        "offered": count(c.intended[final]),
        "sent": count(c.sent),
        "completed": count(c.end[c.ok]),
        "errors": count(c.end[~c.ok & final]),
        "in_flight": in_flight.astype(np.int64).tolist(),
        "output_tokens": count(c.stamps, token_weights(c)),
    }


def _final_usage_only(c: Columns) -> np.ndarray:
    """Successful requests whose server reported a final usage larger than the tokens its events
    were counted as: chunks that carried several tokens, and no per-chunk usage to say which."""
    cand: np.ndarray = c.ok & ~c.usage_per_chunk & (c.n_chunks > 0)
    if not cand.any():  # per-chunk usage everywhere (vLLM): nothing to look at per token
        return cand
    out: np.ndarray = cand & (c.output_tokens > chunk_token_sums(c))
    return out


def token_weights(c: Columns) -> np.ndarray:
    """Tokens per token event for throughput: the event's own count (per-chunk usage, or one per
    event), except for `_final_usage_only` requests, whose final usage is spread evenly over
    their events. Integers when nothing is spread."""
    spread = _final_usage_only(c)
    if not spread.any():
        return c.tokens
    per_event = np.where(spread, c.output_tokens / np.maximum(c.n_chunks, 1), 0.0)
    return np.where(np.repeat(spread, c.n_chunks), np.repeat(per_event, c.n_chunks), c.tokens)


def token_counting(c: Columns, rows: np.ndarray) -> dict[str, str | None]:
    """How the output tokens of the successful `rows` were counted, and what ITL is made of.

    `output_count_source`: "usage_per_chunk" (every chunk's usage), "usage" (the final usage
    only), "chunks" (no usage: one token per content chunk), "mixed", None (no success).
    `itl_per`: "token" where every request's per-token gaps are known (per-chunk usage, or a
    final usage equal to its count of chunks), else "chunk" (the gaps between chunks that may
    carry several tokens, or an unknown number)."""
    ok = rows & c.ok
    if not ok.any():
        return {"output_count_source": None, "itl_per": None}
    source = np.where(c.usage_per_chunk, 0, np.where(c.prompt_tokens > 0, 1, 2))[ok]
    names = ("usage_per_chunk", "usage", "chunks")
    kinds = set(source.tolist())
    several = ok & (c.n_chunks > 1)
    per_token = bool(c.usage_per_chunk[several].all())
    if not per_token:
        exact = c.usage_per_chunk | (
            (c.prompt_tokens > 0) & (c.output_tokens == chunk_token_sums(c))
        )
        per_token = bool(exact[several].all())
    return {
        "output_count_source": names[kinds.pop()] if len(kinds) == 1 else "mixed",
        "itl_per": "token" if per_token else "chunk",
    }


def _length_stats(v: np.ndarray) -> dict[str, float | int]:
    q = np.percentile(v, [50, 90, 99], method="inverted_cdf")
    return {
        "count": int(len(v)),
        "mean": float(v.mean()),
        "min": int(v.min()),
        "p50": int(q[0]),
        "p90": int(q[1]),
        "p99": int(q[2]),
        "max": int(v.max()),
    }


def output_lengths(c: Columns, rows: np.ndarray) -> dict[str, Any] | None:
    """Planned (max_tokens sent) against actual (usage) output lengths of the successful `rows`,
    in tokens, and the share that reached the planned length. None without a success."""
    ok = rows & c.ok
    if not ok.any():
        return None
    planned, actual = c.planned_output[ok], c.output_tokens[ok]
    return {
        "planned_tokens": _length_stats(planned),
        "actual_tokens": _length_stats(actual),
        "reached_planned_share": float((actual >= planned).mean()),
    }
