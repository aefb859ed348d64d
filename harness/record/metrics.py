"""Metric definitions, written once: Records in, percentiles, throughput and SLO verdicts out.

All per-token work is vectorised over one columnar table (`Columns`), never a Python loop per
token. Definitions (times from the engine's monotonic clock):

- TTFT                = first token - sent;  TTFT from schedule = first token - intended
- ITL                 = gaps between consecutive token events, per token: a chunk of D tokens
                        after a gap g contributes D samples of g/D
- inter-chunk latency = the raw gaps between consecutive token events
- TPOT (per request)  = (last token - first token) / (output tokens - 1), for >= 2 tokens
- E2E                 = last token - sent;   E2E from schedule = last token - intended
- send lag            = sent - intended of a request's first attempt (includes waiting for a
                        max_concurrency slot; a retry's wait is not the client's lateness)
- TTFO                = first *answer* token - sent (equals TTFT for a model that does not
                        reason); TTFT tool = first tool-call token - sent
- ITL per channel     = ITL over the gaps between consecutive token events of one request that
                        are both of that channel (`itl_answer`, `itl_reasoning`, `itl_tool`); the
                        gap where the channel changes (reasoning -> answer) is in `itl` only
- channel tokens      = the tokens the events of each channel carried, beside the server's
                        usage.completion_tokens_details.reasoning_tokens where it sent them

Latencies use successful requests; send lag uses every request that was sent. Throughput and
token counts are harness.record.counts'; the table is harness.record.columns. Goodput counts
only requests that met every per-request SLO (`[slo] ttft`, `tpot`, `e2e`, `ttfo`, ...); a
success without the metric meets its limit only where `exempt_from_limit` says so (no TPOT for one token, no TTFT tool without a
call, no TTFO for a turn that ended in a tool call; a success that only reasoned misses TTFO).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from harness.catalogue import BY_NAME, METRICS_WITH_PERCENTILES, SloLimit
from harness.record import hist
from harness.record.columns import NONE as _NONE
from harness.record.columns import Columns as Columns

# Named here too, where every caller has imported them from: the counts (harness.record.counts).
from harness.record.counts import output_lengths as output_lengths
from harness.record.counts import request_counts as request_counts
from harness.record.counts import timeseries as timeseries
from harness.record.counts import token_counting as token_counting
from harness.record.counts import token_summary as token_summary
from harness.record.counts import token_weights as token_weights
from harness.record.counts import window_throughput as window_throughput
from harness.record.records import CHANNEL_NAMES, Channel

LATENCY_METRICS = METRICS_WITH_PERCENTILES  # names and order: the metric catalogue


def first_attempts(c: Columns) -> np.ndarray:
    """Bool per row: the request's first attempt (rows are in (seq, attempt) order). Send lag is
    measured there: a retry's later send is the server's Retry-After or the backoff, not the
    client being late."""
    out = np.ones(c.n, dtype=bool)
    if c.n > 1:
        out[1:] = c.seq[1:] != c.seq[:-1]
    return out


def per_request_values_ns(c: Columns) -> dict[str, np.ndarray]:
    """Per-request metric values (float ns, NaN where undefined), aligned with the rows of c."""
    first, last = c.first().astype(np.float64), c.last().astype(np.float64)
    has = (c.n_chunks > 0) & c.ok
    nan = np.full(c.n, np.nan)
    sent = c.sent.astype(np.float64)
    intended = c.intended.astype(np.float64)
    out = {
        "ttft": np.where(has, first - sent, nan),
        "ttft_from_schedule": np.where(has, first - intended, nan),
        "e2e": np.where(has, last - sent, nan),
        "e2e_from_schedule": np.where(has, last - intended, nan),
        "send_lag": np.where((c.sent >= 0) & first_attempts(c), sent - intended, nan),
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = (last - first) / (c.output_tokens - 1)
    out["tpot"] = np.where(has & (c.output_tokens >= 2), tpot, nan)
    answer = first_of_channel(c, Channel.ANSWER).astype(np.float64)
    tool = first_of_channel(c, Channel.TOOL).astype(np.float64)
    out["ttfo"] = np.where(c.ok & (answer >= 0), answer - sent, nan)
    out["ttft_tool"] = np.where(c.ok & (tool >= 0), tool - sent, nan)
    return out


def first_of_channel(c: Columns, channel: Channel) -> np.ndarray:
    """Per request, the stamp of its first token event of `channel` (-1 where none)."""
    if c.channel is None:
        return c.first() if channel is Channel.ANSWER else np.full(c.n, _NONE, dtype=np.int64)
    out = np.full(c.n, _NONE, dtype=np.int64)
    idx = np.flatnonzero(c.channel == channel)
    if len(idx):
        owners = c.owner()[idx]  # non-decreasing: each owner's first position is its first event
        req, at = np.unique(owners, return_index=True)
        out[req] = c.stamps[idx[at]]
    return out


def channel_gaps_ns(
    c: Columns, rows: np.ndarray, gaps: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """ITL samples per channel (`itl_answer`, ...) for the successful `rows`: the gaps between
    consecutive token events of one request that are both of the channel, per token. Without
    channels every event is an answer: `itl_answer` is the ITL samples themselves (`gaps`)."""
    names = tuple(f"itl_{n}" for n in CHANNEL_NAMES)
    if c.channel is None:
        itl = (gaps if gaps is not None else token_gaps_ns(c, rows))[0]
        return {n: itl if n == "itl_answer" else np.zeros(0) for n in names}
    if len(c.stamps) < 2:
        return {n: np.zeros(0) for n in names}
    keep = np.repeat(rows & c.ok, c.n_chunks)[1:]
    firsts = c.chunk_start[c.n_chunks > 0]
    keep[firsts[firsts > 0] - 1] = False
    gaps_ns = np.diff(c.stamps).astype(np.float64)
    k = np.maximum(c.tokens[1:], 1)
    same = c.channel[1:] == c.channel[:-1]
    out = {}
    for ch, name in zip(Channel, names, strict=True):
        sel = keep & same & (c.channel[1:] == ch)
        g, kk = gaps_ns[sel], k[sel]
        out[name] = g if (kk == 1).all() else np.repeat(g / kk, kk)
    return out


def token_gaps_ns(c: Columns, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ITL samples, inter-chunk gaps) for the successful requests selected by `rows` (bool)."""
    if len(c.stamps) < 2:
        return np.zeros(0), np.zeros(0)
    keep = np.repeat(rows & c.ok, c.n_chunks)[1:]  # stamp i+1 belongs to a kept request
    firsts = c.chunk_start[c.n_chunks > 0]  # a request's first stamp has no gap
    keep[firsts[firsts > 0] - 1] = False
    gaps = np.diff(c.stamps).astype(np.float64)
    sel = keep
    g = gaps[sel]
    k = c.tokens[1:][sel]
    if (k == 1).all():  # one token per chunk: ITL samples are the gaps themselves
        return g, g
    itl = np.repeat(g / np.maximum(k, 1), np.maximum(k, 1))
    return itl, g


def latency_histograms(
    c: Columns,
    rows: np.ndarray,
    gaps: tuple[np.ndarray, np.ndarray] | None = None,
    by_channel: dict[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """One HDR histogram (microseconds) per latency metric for the selected rows.
    `gaps`: token_gaps_ns(c, rows), `by_channel`: channel_gaps_ns(c, rows), when the caller has
    them already."""
    vals = per_request_values_ns(c)
    itl, inter = gaps if gaps is not None else token_gaps_ns(c, rows)
    chans = by_channel if by_channel is not None else channel_gaps_ns(c, rows, (itl, inter))
    out: dict[str, HdrHistogram] = {}
    for name in LATENCY_METRICS:
        if name == "itl":
            v = itl
        elif name == "inter_chunk" or name in chans:
            v = inter if name == "inter_chunk" else chans[name]
            if v is itl:  # the same samples (one token per chunk; all answers): histogrammed once
                out[name] = out["itl"]
                continue
        else:
            v = vals[name][rows]
            v = v[~np.isnan(v)]
        out[name] = hist.histogram_of(np.asarray(v) / 1e3)
    return out


def exact_stats_ms(values_ns: np.ndarray) -> dict[str, float | int | None]:
    """count, mean, p50..p99.9, max in ms; percentiles are the smallest value with at least that
    share of samples at or below it (the HDR definition), computed exactly."""
    v = values_ns[~np.isnan(values_ns)] if values_ns.dtype.kind == "f" else values_ns
    if len(v) == 0:
        return hist.empty_stats()
    q = np.percentile(v, [50, 90, 95, 99, 99.9], method="inverted_cdf") / 1e6
    return {
        "count": int(len(v)),
        "mean": float(v.mean() / 1e6),
        "p50": float(q[0]),
        "p90": float(q[1]),
        "p95": float(q[2]),
        "p99": float(q[3]),
        "p999": float(q[4]),
        "max": float(v.max() / 1e6),
    }


def latency_stats(
    c: Columns,
    rows: np.ndarray,
    gaps: tuple[np.ndarray, np.ndarray] | None = None,
    by_channel: dict[str, np.ndarray] | None = None,
) -> dict[str, dict[str, float | int | None]]:
    vals = per_request_values_ns(c)
    itl, inter = gaps if gaps is not None else token_gaps_ns(c, rows)
    chans = by_channel if by_channel is not None else channel_gaps_ns(c, rows, (itl, inter))
    out = {}
    for name in LATENCY_METRICS:
        if name == "itl":
            out[name] = exact_stats_ms(itl)
        elif name == "inter_chunk" or name in chans:
            v = inter if name == "inter_chunk" else chans[name]
            out[name] = dict(out["itl"]) if v is itl else exact_stats_ms(v)
        else:
            out[name] = exact_stats_ms(vals[name][rows])
    return out


def exempt_from_limit(c: Columns, metric: str, v: np.ndarray) -> np.ndarray:
    """Bool per request: a success without a value of `metric` (`v` NaN) that a per-request
    limit on it does not apply to, so it meets the limit and is left out of its attainment.

    A metric every success has (TTFT, E2E): none is exempt (a success without a token misses).
    An optional one: every request without it (one token: no TPOT; no tool call: no TTFT tool).
    TTFO: a request without an answer token is exempt only where it called a tool -- its output
    was the call, which a `ttft_tool` limit holds; one that only reasoned (max_tokens spent
    thinking) gave its user no output and misses a TTFO limit, as a failed request does."""
    missing: np.ndarray = c.ok & np.isnan(v)
    if not BY_NAME[metric].optional:
        return np.zeros(c.n, dtype=bool)
    if metric == "ttfo":
        called: np.ndarray = first_of_channel(c, Channel.TOOL) >= 0
        out: np.ndarray = missing & called
        return out
    return missing


def meets_per_request_slos(c: Columns, slos: Sequence[SloLimit]) -> np.ndarray:
    """Bool per request: succeeded and met every per-request SLO limit (`exempt_from_limit`
    says which successes without the metric meet it)."""
    good = c.ok.copy()
    if not slos:
        return good
    vals = per_request_values_ns(c)
    for s in slos:
        v = vals[s.metric]
        with np.errstate(invalid="ignore"):
            good &= np.where(np.isnan(v), exempt_from_limit(c, s.metric, v), v <= s.limit_s * 1e9)
    return good


def slo_verdicts(
    c: Columns, rows: np.ndarray, stats: dict[str, dict[str, Any]], slos: Sequence[SloLimit]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    vals = per_request_values_ns(c)
    for s in slos:
        limit_ms = s.limit_s * 1e3
        if s.stat is None:
            # over the successes the limit applies to; one without the value misses it
            full = vals[s.metric]
            v = full[rows & c.ok & ~exempt_from_limit(c, s.metric, full)]
            with np.errstate(invalid="ignore"):
                share = float((v <= s.limit_s * 1e9).mean()) if len(v) else None
            out.append(
                {
                    "name": s.name,
                    "limit_ms": limit_ms,
                    "kind": "per_request",
                    "attainment": share,
                    "pass": None,
                }
            )
        else:
            value = stats[s.metric][s.stat]
            out.append(
                {
                    "name": s.name,
                    "limit_ms": limit_ms,
                    "kind": "aggregate",
                    "value_ms": value,
                    "pass": None if value is None else bool(value <= limit_ms),
                }
            )
    return out
