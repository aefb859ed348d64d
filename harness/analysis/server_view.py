"""The server's own view of the measured window, from vLLM's latency histograms.

vLLM keeps histograms of what it saw per request: TTFT, inter-token latency and E2E from the
request's arrival at the API server, and the split of each request's life inside the engine --
queue (queued -> first scheduled), prefill (first scheduled -> first token) and decode (first
-> last token) -- plus counters of prefix-cache lookups and preemptions. The scraper journals
them with every poll (`harness.server.scrape`); here the polls at the edges of the measured
window are picked and their bucket deltas turned into percentiles:

    start poll   the last poll whose answer had arrived by the first measured phase's start
                 (`done_s`; the server's snapshot is somewhere between the GET and its answer,
                 so a poll in flight across the start could already hold the first measured
                 requests). The runner waits for the first poll before it sends anything, so
                 without a warm-up there is always one; `window.start_offset_s` says how far
                 before the start it was. When there is none (the first poll came late),
                 `window.late_start_s` says by how much and `note` what it leaves out.
    end poll     the first poll sent at or after the window's end: the one taken when the run ended

Percentiles are interpolated linearly inside the bucket that holds them (as Prometheus'
`histogram_quantile`), so their precision is the bucket's width: each comes with the bounds of
its bucket (`bucket_ms`). A percentile in the open top bucket is reported as that bucket's lower
bound. Where the bucket is coarse -- it starts at 0, is the open top one, or its upper bound is
more than COARSE_BUCKET_RATIO times its lower -- the interpolated figure says where the rank falls
under an assumption (requests spread evenly over the bucket), not what was measured: the views
show such a percentile as its bucket's bounds only (`percentile_text`), e.g. `[0-300]`, never as
`150.0`. Means are exact (`_sum` / `_count`). A request counts where the server finished it:
one still running at the start poll, or finished by a warm-up phase after it, is in the
server's counts but not in the client's (the counts side by side show it).

Output, the result's top-level `server_view`:

    available, reason            false with why, when the target exported none of it
    source, window               {start_s, end_s, start_offset_s, end_offset_s} (run seconds)
    latency_ms.{ttft,e2e,itl,queue,prefill,decode}
                                 {metric, count, mean, p50, p90, p99, bucket_ms: {p50: [lo, hi]...}}
    split_ms                     means: queue, prefill, decode, engine (their sum), e2e,
                                 api_server (e2e - engine: tokenising, scheduling IPC, detok)
    client_ms                    the client's TTFT, E2E, ITL {count, mean, p50, p90, p99} beside
                                 them, and outside_server_ms (client mean - server mean: network,
                                 HTTP, SSE framing, the client's own reading; null when the two
                                 counted different requests, with a `note` saying so)
    prefix_cache                 {queries_tokens, hits_tokens, hit_share}
    preemptions                  count in the window

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.analysis.numbers import fmt_number

HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
}
COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
}
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
# the rows both views (terminal and HTML) show, client beside server: (key, label)
SERVER_VIEW_ROWS = (
    ("ttft", "TTFT"),
    ("e2e", "E2E"),
    ("itl", "ITL"),
    ("queue", "queue"),
    ("prefill", "prefill"),
    ("decode", "decode"),
)
COARSE_BUCKET_RATIO = 2.0  # a bucket whose upper bound is more than twice its lower: no figure
EDGE_TOLERANCE_S = (
    0.05  # journals without `done_s`: a poll sent this close after the start still opens it
)


def quantile_from_buckets(
    bounds: list[float], counts: list[float], q: float
) -> tuple[float, float, float | None] | None:
    """(value, bucket lower bound, bucket upper bound or None for +Inf) of quantile q from
    cumulative bucket counts (`counts[-1]` is the +Inf bucket), interpolated linearly inside
    the bucket as Prometheus does; None when the histogram is empty."""
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    rank = q * total
    prev_count, lower = 0.0, 0.0
    for i, cum in enumerate(counts):
        if cum >= rank and cum > prev_count:
            if i >= len(bounds):  # the open top bucket: only its lower bound is known
                return lower, lower, None
            upper = bounds[i]
            return lower + (upper - lower) * (rank - prev_count) / (cum - prev_count), lower, upper
        prev_count = cum
        lower = bounds[i] if i < len(bounds) else lower
    return lower, lower, None


def is_coarse(bucket: Sequence[float | None]) -> bool:
    """Whether a percentile's bucket [lo, hi] (hi None: the open top bucket) is too wide for
    the value interpolated inside it to be shown as a figure."""
    lo, hi = bucket[0], bucket[1]
    return lo is None or hi is None or lo <= 0 or hi > COARSE_BUCKET_RATIO * lo


def percentile_text(value: float | None, bucket: Sequence[float | None] | None) -> str:
    """A server percentile as the views show it: `3.75 [2.5-5]` (the interpolated value and its
    bucket), or `[0-300]` (the bounds only) when the bucket is coarse (`is_coarse`)."""
    if value is None:
        return "-"
    if not bucket:
        return fmt_number(value)
    lo, hi = bucket[0], bucket[1]
    bounds = f"[{fmt_bound(lo)}-{'inf' if hi is None else fmt_bound(hi)}]"
    return bounds if is_coarse(bucket) else f"{fmt_number(value)} {bounds}"


def fmt_bound(v: float | None) -> str:
    return "?" if v is None else f"{v:g}"


def _histogram_at(
    polls: list[dict[str, Any]], upto: int
) -> dict[str, tuple[list[float], float, float]]:
    """Each histogram as of poll index `upto`: the last journaled state at or before it."""
    state: dict[str, tuple[list[float], float, float]] = {}
    for p in polls[: upto + 1]:
        for name, (s, c, cum) in (p.get("hist") or {}).items():
            state[name] = (list(cum), float(s), float(c))
    return state


def _bounds(polls: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for p in polls:
        for name, le in (p.get("hist_le") or {}).items():
            out.setdefault(name, [float(x) for x in le])
    return out


def _latency(
    name: str,
    bounds: list[float],
    start: tuple[list[float], float, float] | None,
    end: tuple[list[float], float, float],
    ms: float = 1e3,
) -> dict[str, Any] | None:
    """ms: milliseconds per second of the server's clock (1e3; x K for a simulator at speedup K:
    its histograms are in wall seconds, the result in model time)."""
    cum_end, sum_end, count_end = end
    cum_start, sum_start, count_start = (
        start if start is not None else ([0.0] * len(cum_end), 0.0, 0.0)
    )
    if len(cum_start) != len(cum_end) or len(cum_end) != len(bounds) + 1:
        return None
    delta = [b - a for a, b in zip(cum_start, cum_end, strict=True)]
    count = count_end - count_start
    if count < 0 or any(d < 0 for d in delta):  # the server restarted inside the window
        return None
    out: dict[str, Any] = {
        "metric": name,
        "count": int(round(count)),
        "mean": (sum_end - sum_start) / count * ms if count > 0 else None,
    }
    bucket_ms: dict[str, list[float | None]] = {}
    for key, q in QUANTILES.items():
        found = quantile_from_buckets(bounds, delta, q)
        if found is None:
            out[key] = None
            continue
        value, lo, hi = found
        out[key] = value * ms
        bucket_ms[key] = [lo * ms, None if hi is None else hi * ms]
    out["bucket_ms"] = bucket_ms
    return out


def _pick_edges(
    polls: list[dict[str, Any]], start_wall: float, end_wall: float
) -> tuple[int, int, bool]:
    """(start poll, end poll, whether a poll was done by the start)."""
    done = [
        float(p["done_s"]) if "done_s" in p else float(p["wall_s"]) - EDGE_TOLERANCE_S
        for p in polls
    ]
    before = [i for i, d in enumerate(done) if d <= start_wall]
    i0 = before[-1] if before else 0
    after = [i for i, p in enumerate(polls) if float(p["wall_s"]) >= end_wall and i > i0]
    return i0, (after[0] if after else len(polls) - 1), bool(before)


def _client(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    if not stats:
        return None
    return {k: stats.get(k) for k in ("count", "mean", "p50", "p90", "p99")}


def build_server_view(
    lines: list[dict[str, Any]],
    t0_wall_s: float | None,
    window_s: tuple[float, float] | None,
    client_latency_ms: dict[str, Any] | None = None,
    time_scale: float = 1.0,
) -> dict[str, Any]:
    """The result's `server_view` from the journal's server_metrics lines.

    window_s: the measured window in run seconds (first measured phase's start, last measured
    phase's end), wall-clock; client_latency_ms: the summary's `latency_ms`, shown beside the
    server's; time_scale: model seconds per wall second (a simulator's speedup, harness.analysis.clock),
    applied to the server's latencies and the window's times."""
    polls = sorted(
        (ln for ln in lines if isinstance(ln.get("values"), dict)), key=lambda ln: ln["wall_s"]
    )
    if not polls:
        return {"available": False, "reason": "no /metrics polls"}
    bounds = _bounds(polls)
    if not any(name in bounds for name in HISTOGRAMS.values()):
        return {
            "available": False,
            "reason": "the target exports none of vLLM's request latency histograms",
        }
    walls = [float(p["wall_s"]) for p in polls]
    t0 = t0_wall_s if t0_wall_s is not None else walls[0]
    start_rel, end_rel = window_s if window_s is not None else (walls[0] - t0, walls[-1] - t0)
    i0, i1, on_time = _pick_edges(polls, t0 + start_rel, t0 + end_rel)
    if i1 <= i0:
        return {
            "available": False,
            "reason": "fewer than two /metrics polls in the measured window",
        }
    latency = _latencies(polls, bounds, i0, i1, time_scale)
    out: dict[str, Any] = {
        "available": True,
        "source": "vllm",
        "window": {
            "start_s": round((walls[i0] - t0) * time_scale, 3),
            "end_s": round((walls[i1] - t0) * time_scale, 3),
            "start_offset_s": round((walls[i0] - t0 - start_rel) * time_scale, 3),
            "end_offset_s": round((walls[i1] - t0 - end_rel) * time_scale, 3),
        },
        "latency_ms": latency,
        "split_ms": _split(latency),
    }
    notes: list[str] = []
    if not on_time:
        late = float(polls[i0].get("done_s", walls[i0])) - (t0 + start_rel)
        out["window"]["late_start_s"] = round(late, 3)
        notes.append(
            f"the first /metrics answer came {late:.2f} s after the window began: requests the "
            "server had begun before it are missing from (or only partly in) its counts"
        )
    out.update(_counters(polls[i0]["values"], polls[i1]["values"]))
    if client_latency_ms:
        out["client_ms"] = _beside_client(client_latency_ms, latency, notes)
    if notes:
        out["note"] = "; ".join(notes)
    return out


def _latencies(
    polls: list[dict[str, Any]], bounds: dict[str, Any], i0: int, i1: int, time_scale: float
) -> dict[str, Any]:
    """The server's latency blocks (ms, model time) over the window between polls i0 and i1."""
    at_start, at_end = _histogram_at(polls, i0), _histogram_at(polls, i1)
    latency: dict[str, Any] = {}
    for key, name in HISTOGRAMS.items():
        if name in at_end and name in bounds:
            block = _latency(name, bounds[name], at_start.get(name), at_end[name], 1e3 * time_scale)
            if block is not None:
                latency[key] = block
    return latency


def _counters(v0: dict[str, float], v1: dict[str, float]) -> dict[str, Any]:
    """What the counters grew by between the window's polls: prefix cache, preemptions."""

    def grew(metric: str) -> float | None:
        if metric not in v1:
            return None
        d = v1[metric] - v0.get(metric, 0.0)
        return d if d >= 0 else None

    out: dict[str, Any] = {}
    queries, hits = grew(COUNTERS["prefix_cache_queries"]), grew(COUNTERS["prefix_cache_hits"])
    if queries is not None and hits is not None:
        out["prefix_cache"] = {
            "queries_tokens": int(queries),
            "hits_tokens": int(hits),
            "hit_share": hits / queries if queries > 0 else None,
        }
    preempted = grew(COUNTERS["preemptions"])
    if preempted is not None:
        out["preemptions"] = int(preempted)
    return out


def _beside_client(
    client_latency_ms: dict[str, Any], latency: dict[str, Any], notes: list[str]
) -> dict[str, Any]:
    """The client's figures beside the server's, with what lies outside the server (client -
    server means, where both counted the same requests); why they did not, to `notes`."""
    client = {k: _client(client_latency_ms.get(k)) for k in ("ttft", "e2e", "itl")}
    outside: dict[str, float | None] = {}
    for k in ("ttft", "e2e"):
        c, s = client.get(k) or {}, latency.get(k) or {}
        same = c.get("count") == s.get("count")  # else the means are over different requests
        outside[k] = (
            (c["mean"] - s["mean"])
            if same and c.get("mean") is not None and s.get("mean") is not None
            else None
        )
    for k in ("e2e", "ttft"):
        n_client = (client.get(k) or {}).get("count")
        n_server = (latency.get(k) or {}).get("count")
        if n_client is None or n_server is None:
            continue
        if n_client != n_server:
            why = (
                "requests of a warm-up phase (or cut ones) that ended inside the window are in the "
                "server's figures"
                if n_server > n_client
                else "the polls at the window's edges missed some of the measured requests"
            )
            notes.append(
                f"the server finished {n_server} requests in the window, the client measured "
                f"{n_client}: {why}, so client - server differences are not shown"
            )
        break
    return {**client, "outside_server_ms": outside}


def _split(latency: dict[str, Any]) -> dict[str, float | None]:
    means = {k: (latency.get(k) or {}).get("mean") for k in ("queue", "prefill", "decode", "e2e")}
    parts = [means[k] for k in ("queue", "prefill", "decode")]
    engine = sum(p for p in parts if p is not None) if all(p is not None for p in parts) else None
    e2e = means["e2e"]
    return {
        **means,
        "engine": engine,
        "api_server": (round(e2e - engine, 6) + 0.0)
        if (e2e is not None and engine is not None)
        else None,
    }
