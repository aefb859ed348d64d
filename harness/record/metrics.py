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

Latencies use successful requests; send lag uses every request that was sent. Throughput is
counted inside a time window: output tokens whose events arrived in it, requests whose last
token arrived in it, divided by its length. A token event carries the tokens the server's
per-chunk usage gave it; where a server reports only the final usage and it exceeds the count
of events (a gateway that coalesces tokens into chunks), the request's tokens are spread evenly
over its events (`token_weights`), and ITL is per chunk (`token_counting` says which). Goodput counts only requests that met every
per-request SLO (`[slo] ttft`, `tpot`, `e2e`, `ttfo`, ...); a success without the metric meets
its limit only where `exempt_from_limit` says so (no TPOT for one token, no TTFT tool without a
call, no TTFO for a turn that ended in a tool call; a success that only reasoned misses TTFO).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from harness.catalogue import BY_NAME, METRICS_WITH_PERCENTILES, SloLimit
from harness.record import hist
from harness.record.records import CHANNEL_NAMES, Channel, Record
from harness.record.usage import (
    MAX_COUNT,
    PROMPT_TEMPLATE_TOKENS,
    USAGE_MARGIN_TOKENS,
    flag_reasons,
    vet_counts,
)

LATENCY_METRICS = METRICS_WITH_PERCENTILES  # names and order: the metric catalogue
_NONE = -1
_row_key = attrgetter("seq", "attempt")


@dataclass
class Columns:
    """Records as parallel numpy arrays, plus all token stamps concatenated."""

    seq: np.ndarray
    phase: np.ndarray
    intended: np.ndarray
    sent: np.ndarray  # -1 when never sent
    end: np.ndarray  # -1 when unknown
    ok: np.ndarray  # bool
    retried: np.ndarray  # bool: a failed attempt that was retried
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    planned_prompt: np.ndarray
    planned_output: np.ndarray
    usage_per_chunk: np.ndarray
    error_class: list[str | None]
    n_chunks: np.ndarray
    chunk_start: np.ndarray  # offsets into stamps: request i owns [chunk_start[i], +n_chunks[i])
    stamps: np.ndarray  # every token event stamp, request by request
    tokens: np.ndarray  # tokens carried by each event
    session: np.ndarray | None = None  # multi-turn: session id per request (-1: none); None: all -1
    turn: np.ndarray | None = None  # multi-turn: turn index per request; None: all 0
    usage_flag: list[str] | None = None  # the usage counts not believed (harness.record.usage)
    channel: np.ndarray | None = None  # int8 Channel per stamp; None: every event an answer
    usage_reasoning: np.ndarray | None = None  # usage's reasoning_tokens per request (-1: none)
    cached: np.ndarray | None = None  # usage's cached prompt tokens per request (-1: none)

    @property
    def n(self) -> int:
        return len(self.seq)

    @classmethod
    def of(cls, records: Sequence[Record]) -> Columns:
        """Rows in (seq, attempt) order, whatever order the records came in (worker processes
        journal in arrival order), so every float sum -- and so the result -- is order-free."""
        records = sorted(records, key=_row_key)
        n = len(records)
        n_chunks = np.fromiter((len(r.chunk_ns) for r in records), dtype=np.int64, count=n)
        total = int(n_chunks.sum())
        # chain.from_iterable iterates in C: no Python frame per stamp
        stamps = np.fromiter(
            chain.from_iterable(r.chunk_ns for r in records), dtype=np.int64, count=total
        )
        tokens = np.fromiter(
            chain.from_iterable(r.chunk_tokens for r in records), dtype=np.int64, count=total
        )
        starts = np.zeros(n, dtype=np.int64)
        if n:
            starts[1:] = np.cumsum(n_chunks)[:-1]

        def col(f: Any, dtype: Any = np.int64) -> np.ndarray:
            return np.fromiter((f(r) for r in records), dtype=dtype, count=n)

        return cls(
            seq=col(lambda r: r.seq),
            phase=col(lambda r: r.phase),
            intended=col(lambda r: r.intended_ns),
            sent=col(lambda r: _NONE if r.sent_ns is None else r.sent_ns),
            end=col(lambda r: _NONE if r.end_ns is None else r.end_ns),
            ok=col(lambda r: r.ok, bool),
            retried=col(lambda r: r.retried, bool),
            prompt_tokens=col(lambda r: r.prompt_tokens),
            output_tokens=col(lambda r: r.output_tokens),
            planned_prompt=col(lambda r: r.planned_prompt_tokens),
            planned_output=col(lambda r: r.planned_output_tokens),
            usage_per_chunk=col(lambda r: r.usage_per_chunk, bool),
            error_class=[r.error_class for r in records],
            n_chunks=n_chunks,
            chunk_start=starts,
            stamps=stamps,
            tokens=tokens,
            session=col(lambda r: _NONE if r.session_id is None else r.session_id),
            turn=col(lambda r: r.turn_index),
            usage_flag=[r.usage_flag for r in records],
            channel=np.fromiter(
                chain.from_iterable(r.channels for r in records), dtype=np.int8, count=total
            )
            if any(r.channel_runs for r in records)
            else None,
            usage_reasoning=col(
                lambda r: _NONE if r.usage_reasoning_tokens is None else r.usage_reasoning_tokens
            )
            if any(r.usage_reasoning_tokens is not None for r in records)
            else None,
            cached=col(lambda r: _NONE if r.cached_tokens is None else r.cached_tokens)
            if any(r.cached_tokens is not None for r in records)
            else None,
        ).vetted(
            col(lambda r: _NONE if r.received_bytes is None else r.received_bytes),
            col(lambda r: _NONE if r.request_bytes is None else r.request_bytes),
        )

    def vetted(self, received_bytes: np.ndarray, request_bytes: np.ndarray) -> Columns:
        """These columns with every row's usage counts vetted (`harness.record.usage.vet_counts`,
        -1 bytes: unknown): a count not believed is replaced (completion: one token per event;
        prompt: 0) and named in `usage_flag`. The rows it could change are picked vectorised; a
        journal whose records the engine vetted already comes back unchanged. Changes the arrays
        in place; returns self."""
        n = self.n
        if n == 0:
            return self
        has = self.n_chunks > 0
        kmax = np.zeros(n, dtype=np.int64)
        if has.any():
            kmax[has] = np.maximum.reduceat(self.tokens, self.chunk_start[has])
        ksum = _chunk_token_sums(self)
        ot, pt = self.output_tokens, self.prompt_tokens
        planned = self.planned_output
        margin = np.clip(planned // 2, 1, USAGE_MARGIN_TOKENS)  # usage.usage_margin
        limit = np.where(planned > 0, planned + margin, MAX_COUNT)
        # a sum of counts beyond the limit may wrap around: the largest count stands for it
        ksum = np.where(kmax > limit, kmax, ksum)
        own = (ot == self.n_chunks) & (ksum == self.n_chunks)
        claimed = np.maximum(ot, ksum)
        suspect = ~own & (
            (ot < 0)
            | (claimed > limit)
            | ((received_bytes >= 0) & (claimed > np.maximum(received_bytes, self.n_chunks)))
        )
        suspect |= (pt < 0) | (
            pt > np.where(request_bytes >= 0, request_bytes + PROMPT_TEMPLATE_TOKENS, MAX_COUNT)
        )
        cached = self.cached
        if cached is not None:  # a cached count above its prompt's (or negative: -1 is none)
            suspect |= (cached < _NONE) | (cached > pt)
        rows = np.flatnonzero(suspect)
        if not len(rows):
            return self
        flags = self.usage_flag if self.usage_flag is not None else [""] * n
        for i in rows.tolist():
            rb, sb = int(received_bytes[i]), int(request_bytes[i])
            start, events = int(self.chunk_start[i]), int(self.n_chunks[i])
            v = vet_counts(
                output_tokens=int(ot[i]),
                prompt_tokens=int(pt[i]),
                n_events=events,
                chunk_sum=sum(self.tokens[start : start + events].tolist()),  # exact: no wrap
                max_tokens=int(self.planned_output[i]),
                received_bytes=rb if rb >= 0 else None,
                request_bytes=sb if sb >= 0 else None,
                flags=flags[i].split("; ") if flags[i] else (),
                cached_tokens=None if cached is None or cached[i] == _NONE else int(cached[i]),
            )
            ot[i], pt[i], flags[i] = v.output_tokens, v.prompt_tokens, v.flag
            if cached is not None:
                cached[i] = _NONE if v.cached_tokens is None else v.cached_tokens
            if v.own_chunks:
                self.usage_per_chunk[i] = False
                self.tokens[start : start + events] = 1
        self.usage_flag = flags
        return self

    def first(self) -> np.ndarray:
        """First token stamp per request (-1 where none)."""
        out = np.full(self.n, _NONE, dtype=np.int64)
        has = self.n_chunks > 0
        out[has] = self.stamps[self.chunk_start[has]]
        return out

    def last(self) -> np.ndarray:
        out = np.full(self.n, _NONE, dtype=np.int64)
        has = self.n_chunks > 0
        out[has] = self.stamps[self.chunk_start[has] + self.n_chunks[has] - 1]
        return out

    def owner(self) -> np.ndarray:
        """For each stamp, the index of the request it belongs to."""
        return np.repeat(np.arange(self.n), self.n_chunks)


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


def _chunk_token_sums(c: Columns) -> np.ndarray:
    """Per request, the tokens its events carry (sum of chunk_tokens)."""
    out = np.zeros(c.n, dtype=np.int64)
    has = c.n_chunks > 0
    if has.any():  # a request's events run from its start to the next non-empty request's
        out[has] = np.add.reduceat(c.tokens, c.chunk_start[has])
    return out


def _final_usage_only(c: Columns) -> np.ndarray:
    """Successful requests whose server reported a final usage larger than the tokens its events
    were counted as: chunks that carried several tokens, and no per-chunk usage to say which."""
    cand: np.ndarray = c.ok & ~c.usage_per_chunk & (c.n_chunks > 0)
    if not cand.any():  # per-chunk usage everywhere (vLLM): nothing to look at per token
        return cand
    out: np.ndarray = cand & (c.output_tokens > _chunk_token_sums(c))
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
            (c.prompt_tokens > 0) & (c.output_tokens == _chunk_token_sums(c))
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
