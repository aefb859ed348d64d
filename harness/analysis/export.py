"""Exports: a run's journal as plain rows (per request, per token) and as the JSON that
`vllm bench serve --save-result --save-detailed` writes. Pure: journal (+ result) in, rows out.

Per-request rows keep every stamp of the Record (ns since the run's start, as in the journal)
and add the derived metrics of DESIGN.md in ms, plus the wall-clock time of the intended send
(`intended_unix_s`, from the run's one wall-clock anchor) so a DataFrame can be put on a
calendar axis.

One time base, the result's (issue 45): a simulator run at `speedup = K` has its stamps, and
so every metric, rate and the vllm `duration`, in model time (the wall's x K), converted by
harness.analysis.clock's one conversion, so each figure equals the report's. Only
`intended_unix_s` stays on the wall's calendar. The time base is stated where the format has
room: `time_base()` (the parquet file's metadata, the DataFrame's attrs, the command's line)
and the vllm JSON's `clock` (the result's block; absent at real speed). Per-token rows have one row per token-bearing chunk (`tokens` > 1 when the
server's per-chunk usage says so). Every attempt is a row; `attempt`/`retried` tell them apart.

Token channels (reasoning, answer, tool) are in every run's rows, the same columns whether or not
the run had any: per request `ttfo_ms` (first answer token - sent; TTFT for a stream without
reasoning, null without an answer token), `ttft_tool_ms` (null without a tool call), the tokens
each channel's events carried (`answer_tokens`, `reasoning_tokens`, `tool_tokens`: 0 where none)
and the server's `usage_reasoning_tokens` (null where it sent none); per token, `channel`.

The `vllm` shape follows vLLM's `vllm/benchmarks/serve.py` (v0.32: `benchmark()` builds
`result`, `main()` adds date, backend, model_id, num_prompts, request_rate, burstiness,
max_concurrency): the same keys and units (seconds in the lists, ms in the `*_ms` figures,
percentiles 50/90/95/99 as `--metric-percentiles 50,90,95,99`), over the measured phases
(warm-ups left out) and each request's last attempt. The `*_ms` statistics are the result's
(issue 45: `--brief` prints them and they must agree): DESIGN.md's TPOT (last - first token) /
(output - 1), ITL per token, E2E to the last token, and a percentile the smallest value with
that share at or below it (vLLM interpolates between two values: a median differs by up to
half a gap); the per-request lists are vLLM's (ITL: the gaps between chunks). What it cannot hold
from our runs is said in docs/exports.md (no generated texts: they are not kept).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import numpy as np

from harness.analysis.clock import clock_note, model_records, sim_speedup
from harness.record.journal import Journal
from harness.record.journal_vet import vet_journal
from harness.record.records import CHANNEL_NAMES, Record

NS_PER_MS = 1e6
NS_PER_S = 1e9
VLLM_PERCENTILES = (50, 90, 95, 99)  # as `vllm bench serve --metric-percentiles 50,90,95,99`

# The per-request columns, in order. Stamps: ns since the run's start (None where absent).
REQUEST_COLUMNS = (
    "seq",
    "attempt",
    "phase",
    "phase_index",
    "warmup",
    "status",
    "error",
    "error_detail",
    "intended_ns",
    "sent_ns",
    "headers_ns",
    "first_token_ns",
    "last_token_ns",
    "end_ns",
    "intended_unix_s",
    "chunks",
    "prompt_tokens",
    "output_tokens",
    "planned_prompt_tokens",
    "planned_output_tokens",
    "usage_per_chunk",
    "retried",
    "retry_after_s",
    "ttft_ms",
    "ttft_from_schedule_ms",
    "tpot_ms",
    "e2e_ms",
    "e2e_from_schedule_ms",
    "send_lag_ms",
    "ttfo_ms",
    "ttft_tool_ms",
    "answer_tokens",
    "reasoning_tokens",
    "tool_tokens",
    "usage_reasoning_tokens",
)
TOKEN_COLUMNS = ("seq", "attempt", "phase", "chunk_index", "t_ns", "tokens", "gap_ns", "channel")


# vllm bench serve's --backend for each endpoint (vLLM 0.32's endpoint_request_func.py)
VLLM_BACKENDS = {
    "chat": "openai-chat",
    "completions": "openai",
    "responses": "openai-responses",
    "embeddings": "openai-embeddings",
}


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def phase_names(header: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(name, warmup) per phase index, from the journal header."""
    return [
        (str(p.get("name", i)), bool(p.get("warmup", False)))
        for i, p in enumerate(header.get("phases") or [])
    ]


def _phase(phases: list[tuple[str, bool]], i: int) -> tuple[str, bool]:
    return phases[i] if 0 <= i < len(phases) else (str(i), False)


def _tokens(r: Record) -> tuple[int, ...]:
    return r.chunk_tokens or (1,) * len(r.chunk_ns)


def channel_counts(r: Record) -> dict[str, int]:
    """The tokens each channel's events carried: {"answer_tokens": ..., ...}."""
    out = {f"{name}_tokens": 0 for name in CHANNEL_NAMES}
    for k, ch in zip(_tokens(r), r.channels, strict=True):
        out[f"{CHANNEL_NAMES[ch]}_tokens"] += k
    return out


def request_row(
    r: Record,
    phases: list[tuple[str, bool]],
    t0_wall_s: float | None,
    wall_intended_ns: int | None = None,
) -> dict[str, Any]:
    """One Record as a flat row of REQUEST_COLUMNS. `wall_intended_ns`: the intended send in
    wall time, where `r` is in model time (the calendar column stays the wall's)."""
    name, warm = _phase(phases, r.phase)
    wall_ns = r.intended_ns if wall_intended_ns is None else wall_intended_ns
    return {
        "seq": r.seq,
        "attempt": r.attempt,
        "phase": name,
        "phase_index": r.phase,
        "warmup": warm,
        "status": r.status,
        "error": r.error_class,
        "error_detail": r.error_detail or None,
        "intended_ns": r.intended_ns,
        "sent_ns": r.sent_ns,
        "headers_ns": r.headers_ns,
        "first_token_ns": r.first_token_ns,
        "last_token_ns": r.last_token_ns,
        "end_ns": r.end_ns,
        "intended_unix_s": None if t0_wall_s is None else t0_wall_s + wall_ns / NS_PER_S,
        "chunks": len(r.chunk_ns),
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "planned_prompt_tokens": r.planned_prompt_tokens,
        "planned_output_tokens": r.planned_output_tokens,
        "usage_per_chunk": r.usage_per_chunk,
        "retried": r.retried,
        "retry_after_s": r.retry_after_s,
        "ttft_ms": _ms(r.ttft_ns),
        "ttft_from_schedule_ms": _ms(r.ttft_from_schedule_ns),
        "tpot_ms": _ms(r.tpot_ns),
        "e2e_ms": _ms(r.e2e_ns),
        "e2e_from_schedule_ms": _ms(r.e2e_from_schedule_ns),
        "send_lag_ms": _ms(r.send_lag_ns),
        "ttfo_ms": _ms(r.ttfo_ns),
        "ttft_tool_ms": _ms(r.ttft_tool_ns),
        **channel_counts(r),
        "usage_reasoning_tokens": r.usage_reasoning_tokens,
    }


def _key(r: Record) -> tuple[int, int]:
    return (r.seq, r.attempt)


def _ordered(j: Journal) -> list[Record]:
    """The journal's Records in (seq, attempt) order, in the result's time base: model time
    under a simulator's speedup (harness.analysis.clock.model_records)."""
    return sorted(model_records(j), key=_key)


def request_rows(j: Journal) -> list[dict[str, Any]]:
    """Every attempt of the journal as a row, in (seq, attempt) order; stamps and metrics in
    the result's time base, `intended_unix_s` on the wall's calendar."""
    phases = phase_names(j.header)
    t0 = (j.end or {}).get("t0_wall_s")
    wall = sorted(j.records, key=_key)
    return [
        request_row(r, phases, t0, w.intended_ns) for r, w in zip(_ordered(j), wall, strict=True)
    ]


def time_base(j: Journal) -> dict[str, Any] | None:
    """The result's `clock` block for this journal's run (None at real speed): what every
    export states about its times (the parquet file's metadata, the vllm JSON's `clock`,
    the command's line, the DataFrame's attrs)."""
    k = sim_speedup(j.header)
    return None if k == 1.0 else {"time": "model", "speedup": k, "note": clock_note(k)}


def set_aside(j: Journal) -> dict[str, Any] | None:
    """What the journal's vetting set aside (harness.record.journal_vet), as the result's
    `impossible_records` block; None when every record was possible. Every export states it
    where the format has room (the parquet file's metadata, the vllm JSON, the command's line,
    the DataFrame's attrs): the rows are exactly the records the result was built from."""
    v = vet_journal(j)  # read_journal vetted it already: this answers what was found then
    return None if v.trustworthy else v.block()


def set_aside_note(j: Journal) -> str | None:
    """The command's line about impossible records; None when every record was possible."""
    return vet_journal(j).sentence()


def token_rows(j: Journal) -> Iterator[dict[str, Any]]:
    """One row per token-bearing chunk: its stamp, its tokens and the gap since the previous
    chunk (since `sent` for the first)."""
    phases = phase_names(j.header)
    for r in _ordered(j):
        name = _phase(phases, r.phase)[0]
        prev = r.sent_ns
        tokens = _tokens(r)
        for i, (t, k, ch) in enumerate(zip(r.chunk_ns, tokens, r.channels, strict=True)):
            yield {
                "seq": r.seq,
                "attempt": r.attempt,
                "phase": name,
                "chunk_index": i,
                "t_ns": t,
                "tokens": k,
                "gap_ns": None if prev is None else t - prev,
                "channel": CHANNEL_NAMES[ch],
            }
            prev = t


# --- vllm bench serve's result JSON -----------------------------------------------------------


VLLM_ALL_METRICS = ("ttft", "tpot", "itl", "e2el")
# The lists `vllm bench serve` keeps only with --save-detailed.
VLLM_DETAILED_FIELDS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "errors")


def _pkey(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _stats(
    prefix: str, values_ns: list[float], out: dict[str, Any], percentiles: tuple[float, ...]
) -> None:
    """The mean/median/std/pNN `_ms` figures of one metric (0 for no values, as vLLM's `or 0`),
    computed as the result's summary computes them (harness.record.metrics.exact_stats_ms: ns
    to ms, percentiles numpy's inverted_cdf), so each equals the report's and `--brief`'s."""
    a = np.asarray(values_ns or [0.0], dtype=np.float64)
    out[f"mean_{prefix}_ms"] = float(a.mean() / 1e6)
    out[f"median_{prefix}_ms"] = float(np.percentile(a, 50, method="inverted_cdf") / 1e6)
    out[f"std_{prefix}_ms"] = float(np.std(a) / 1e6)
    for p in percentiles:
        out[f"p{_pkey(p)}_{prefix}_ms"] = float(np.percentile(a, p, method="inverted_cdf") / 1e6)


def _itl_ns(r: Record) -> list[float]:
    """A request's ITL samples as the result's: a chunk of k tokens after a gap g gives k
    samples of g / k (harness.record.metrics.token_gaps_ns)."""
    out: list[float] = []
    for a, b, k in zip(r.chunk_ns, r.chunk_ns[1:], _tokens(r)[1:], strict=False):
        k = max(k, 1)
        out += [(b - a) / k] * k
    return out


def _summary_values_ns(rows: list[Record]) -> dict[str, list[float]]:
    """The per-request values the result's summary statistics are computed from (DESIGN.md's
    definitions: TPOT = (last token - first token) / (output - 1), E2E = last token - sent)."""
    ok = [r for r in rows if r.ok]
    return {
        "ttft": [float(r.ttft_ns) for r in ok if r.ttft_ns is not None],
        "tpot": [float(t) for r in ok if (t := r.tpot_ns) is not None],
        "itl": [g for r in ok for g in _itl_ns(r)],
        "e2el": [float(r.e2e_ns) for r in ok if r.e2e_ns is not None],
    }


def _measured_last_attempts(j: Journal) -> list[Record]:
    phases = phase_names(j.header)
    last: dict[int, Record] = {}
    for r in _ordered(j):
        if not _phase(phases, r.phase)[1]:
            last[r.seq] = r
    return [last[s] for s in sorted(last)]


def _arrival(header: Mapping[str, Any]) -> tuple[float | str | None, float | None, int | None]:
    return scenario_arrival(header.get("scenario") or {})


def scenario_arrival(
    scenario: Mapping[str, Any],
) -> tuple[float | str | None, float | None, int | None]:
    """(request_rate, burstiness, max_concurrency) as vLLM names them, from the one measured
    phase of the (resolved) scenario; None where the run's shape has no such single value."""
    phases = [p for p in scenario.get("phases") or [] if not p.get("warmup")]
    if len(phases) != 1:
        return None, None, None
    arrival = phases[0].get("arrival") or {}
    conc = phases[0].get("max_concurrency")
    process = arrival.get("process")
    if process == "closed":
        return "inf", None, arrival.get("users")
    rate = arrival.get("rate")
    try:
        rate = float(rate) if rate is not None else None
    except (TypeError, ValueError):
        from harness.units import parse_rate_per_s

        rate = parse_rate_per_s(rate)
    burst = {"poisson": 1.0, "gamma": arrival.get("burstiness", 1.0)}.get(str(process))
    return rate, burst, conc


def _max_concurrent(rows: list[Record]) -> int:
    events = sorted(
        [(r.sent_ns, 1) for r in rows if r.sent_ns is not None]
        + [(r.end_ns, -1) for r in rows if r.sent_ns is not None and r.end_ns is not None]
    )
    now = best = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def _max_output_tokens_per_s(rows: list[Record]) -> float:
    """vLLM's figure: the most output tokens stamped in any whole second of the run."""
    t = [c for r in rows if r.ok for c in r.chunk_ns]
    k = [x for r in rows if r.ok for x in (r.chunk_tokens or (1,) * len(r.chunk_ns))]
    if not t:
        return 0.0
    start = min(t)
    bins = np.bincount(
        ((np.asarray(t) - start) // int(NS_PER_S)).astype(np.int64), weights=np.asarray(k, float)
    )
    return float(bins.max())


def _vllm_run(j: Journal) -> dict[str, Any]:
    """The keys `vllm bench serve` adds in `main()`: date, backend, model, the arrival's shape."""
    target = j.header.get("target") or {}
    model = target.get("model")
    rate, burst, conc = _arrival(j.header)
    started = j.header.get("started_at")
    date = (
        datetime.fromisoformat(started.replace("Z", "+00:00")).strftime("%Y%m%d-%H%M%S")
        if started
        else None
    )
    backend = VLLM_BACKENDS.get(target.get("endpoint", "chat"), "openai")
    return {
        "date": date,
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": model,
        "tokenizer_id": model,
        "request_rate": rate,
        "burstiness": burst,
        "max_concurrency": conc,
    }


def _vllm_lists(rows: list[Record]) -> dict[str, Any]:
    """The per-request lists (`--save-detailed`), seconds; 0 or empty for a failed request."""
    return {
        "input_lens": [r.prompt_tokens or r.planned_prompt_tokens for r in rows],
        "output_lens": [r.output_tokens if r.ok else 0 for r in rows],
        "ttfts": [r.ttft_ns / NS_PER_S if r.ok and r.ttft_ns is not None else 0.0 for r in rows],
        "itls": [
            [(b - a) / NS_PER_S for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
            if r.ok
            else []
            for r in rows
        ],
        "latencies": [
            (r.end_ns - r.sent_ns) / NS_PER_S
            if r.ok and r.end_ns is not None and r.sent_ns is not None
            else 0.0
            for r in rows
        ],
        "start_times": [None if r.sent_ns is None else r.sent_ns / NS_PER_S for r in rows],
        "errors": ["" if r.ok else (r.error_detail or r.error_class or "") for r in rows],
    }


def _vllm_totals(
    j: Journal, rows: list[Record], lists: dict[str, Any], thr: Mapping[str, Any]
) -> dict[str, Any]:
    """Counts, token totals and throughputs over the result's measured window."""
    ok = sum(1 for r in rows if r.ok)
    duration = float(thr.get("window_s") or 0.0)
    total_in = sum(x for x, r in zip(lists["input_lens"], rows, strict=True) if r.ok)
    total_out = sum(lists["output_lens"])

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    return {
        "num_prompts": len(rows),
        "duration": duration,
        "completed": ok,
        "failed": len(rows) - ok,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(ok),
        "request_goodput": thr.get("goodput_requests_per_s") if j.header.get("slo") else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
    }


# vllm's key order: the run, its totals, then its lists and peaks (as serve.py saves them)
_VLLM_ORDER = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id")


def vllm_result(
    j: Journal,
    result: Mapping[str, Any],
    metrics: tuple[str, ...] = VLLM_ALL_METRICS,
    percentiles: tuple[float, ...] = VLLM_PERCENTILES,
    detailed: bool = True,
) -> dict[str, Any]:
    """The run as `vllm bench serve --save-result --save-detailed` would have saved it, with
    the statistics of `metrics` (`--percentile-metrics`) at `percentiles`
    (`--metric-percentiles`); without `detailed`, the per-request lists are left out, as
    without `--save-detailed`. A journal with impossible records set aside (not trustworthy)
    adds `trustworthy: false` and `impossible_records`, as the result has them."""
    rows = _measured_last_attempts(j)
    thr = (result.get("summary") or {}).get("throughput") or {}
    run, lists = _vllm_run(j), _vllm_lists(rows)
    totals = _vllm_totals(j, rows, lists, thr)
    out: dict[str, Any] = {k: run[k] for k in _VLLM_ORDER}
    out["num_prompts"] = totals.pop("num_prompts")
    out.update((k, run[k]) for k in ("request_rate", "burstiness", "max_concurrency"))
    out.update(totals)
    out.update(lists)
    out["max_output_tokens_per_s"] = _max_output_tokens_per_s(rows)
    out["max_concurrent_requests"] = _max_concurrent(rows)
    values = _summary_values_ns(rows)
    for name in VLLM_ALL_METRICS:  # vLLM's order, whatever the order asked
        if name in metrics:
            _stats(name, values[name], out, percentiles)
    if not detailed:
        for name in VLLM_DETAILED_FIELDS:
            del out[name]
    if isinstance(result.get("clock"), dict):  # model time: said as the result says it
        out["clock"] = dict(result["clock"])
    doubt = set_aside(j)
    if doubt is not None:
        out["trustworthy"] = False
        out["impossible_records"] = doubt
    return out
