"""The terminal report: a result document rendered as plain-text tables. The server's lines
live in `report_text_server`, the workload's and sessions' in `report_text_workload`; their
names are re-exported here."""

from __future__ import annotations

from typing import Any

from harness.analysis.agent_view import render_agents
from harness.analysis.clock import model_time_tag, result_clock_note
from harness.analysis.failures import message_lines
from harness.analysis.html_trust import trust_lines
from harness.analysis.numbers import fmt_count, fmt_number, plural, text_table
from harness.analysis.report_text_server import PEAK_WORDS, peak_text, render_server_view
from harness.analysis.report_text_workload import (
    SPARK,
    render_sessions,
    render_workload_view,
    sparkline,
)
from harness.analysis.scale_out import scale_out_line
from harness.analysis.server_view import SERVER_VIEW_ROWS
from harness.analysis.slo_verdict import slo_lines
from harness.catalogue import BY_NAME, METRICS

ROWS = tuple((m.name, m.long_label) for m in METRICS)  # the metric catalogue, in its order
COLS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def _retried(req: dict[str, Any]) -> str:
    n = req.get("retried_attempts")
    if not n:
        return ""
    after = req.get("retried_with_retry_after")
    return f", {n} retried attempts" + (
        f" ({after} after the server's Retry-After)" if after else ""
    )


def _same_stats(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two latency rows that print the same: every column equal."""
    return bool(a and b) and all(
        fmt_number((a or {}).get(c)) == fmt_number((b or {}).get(c)) for c in COLS
    )


def has_channels(b: dict[str, Any]) -> bool:
    """A block (summary or phase) whose tokens came in more than the answer's channel."""
    ch = (b.get("tokens") or {}).get("channels") or {}
    return bool(ch.get("reasoning_requests") or ch.get("tool_requests"))


def shown_latency(b: dict[str, Any], key: str) -> bool:
    """Whether a view shows the block's latency row `key`: the result has it (one written before
    the row was in the catalogue has not), and a channel row only where the run had reasoning
    or tool tokens and that channel's row counted something (answer tokens only: TTFO is TTFT
    and the answer's ITL is ITL)."""
    s = b["latency_ms"].get(key)
    if s is None:
        return False
    return not BY_NAME[key].channel or (has_channels(b) and bool(s.get("count")))


def channel_line(ch: dict[str, Any]) -> str:
    """Output tokens by channel, and the server's reasoning count where it sent one."""
    parts = [
        f"{fmt_count(ch.get(f'{name}_tokens') or 0)} {name} "
        f"({plural(ch.get(f'{name}_requests') or 0, 'request')})"
        for name in ("reasoning", "answer", "tool")
    ]
    text = "output tokens by channel: " + ", ".join(parts)
    usage = ch.get("usage_reasoning_tokens")
    if usage is not None:
        text += f"; the server's usage says {fmt_count(usage)} reasoning"
    if ch.get("reasoning_disagree_requests"):
        text += (
            f" (WARNING: {plural(ch['reasoning_disagree_requests'], 'request')} where it "
            "differs from the reasoning tokens streamed)"
        )
    return text


def prefix_cache_line(pc: dict[str, Any]) -> str:
    """A block's prefix cache per request in one line: the token share and the per-request
    distribution of the hit share (cached / prompt tokens, as the server's usage counted)."""
    hs = pc["hit_share"]
    share = pc["token_hit_share"]
    text = (
        f"prefix cache: {'-' if share is None else f'{share:.1%}'} of "
        f"{fmt_count(pc['prompt_tokens'])} prompt tokens cached; per request hit share "
        + ", ".join(
            f"{k} {'-' if hs.get(k) is None else f'{hs[k]:.0%}'}"
            for k in ("p10", "p50", "p90", "max")
        )
        + f"; {pc['requests_with_hits']} of {plural(pc['requests'], 'request')} hit"
    )
    if pc.get("requests_without_details"):
        text += f" ({pc['requests_without_details']} sent no cached count: counted 0)"
    return text


def render_prefix_cache(r: dict[str, Any]) -> list[str]:
    """The summary's TTFT by hit share (and hit share by turn); one line where the server
    reported no cached tokens (a result written before this block: nothing)."""
    summ = r.get("summary") or {}
    if "prefix_cache" not in summ:
        return []
    pc = summ["prefix_cache"]
    if pc is None:
        return [
            "  prefix cache per request: not reported (the server sent no "
            "usage.prompt_tokens_details.cached_tokens)"
        ]
    rows = [
        [
            f"hit share {b['bin']}",
            fmt_count(b["requests"]),
            fmt_number(b["ttft_ms"]["p50"]),
            fmt_number(b["ttft_ms"]["p90"]),
            "-"
            if b["uncached_prompt_tokens_mean"] is None
            else f"{b['uncached_prompt_tokens_mean']:,.0f}",
        ]
        for b in pc["ttft_by_hit_share"]
        if b["requests"]
    ]
    lines = text_table(
        ["TTFT by cached share", "requests", "p50", "p90", "uncached prompt tok"], rows
    )
    for t in pc.get("by_turn") or []:
        lines.append(
            f"  turn {t['turn_index']}: hit share mean {t['hit_share_mean']:.1%}, "
            f"{t['cached_tokens_mean']:,.0f} cached tokens mean ({plural(t['requests'], 'request')})"
        )
    return lines


def render_block(title: str, b: dict[str, Any]) -> list[str]:
    req = b["requests"]
    lines = [
        title,
        f"  requests: {req['sent']} sent, {req['completed']} completed, {req['failed']} failed"
        + (f", {req['not_sent']} not sent" if req.get("not_sent") else "")
        + _retried(req),
    ]
    if b.get("embeddings"):  # not streamed: its own latency and rates (harness.analysis.embeddings)
        return lines + _embeddings_lines(b)
    per_chunk = (b.get("tokens") or {}).get("itl_per") == "chunk"
    channels = (b.get("tokens") or {}).get("channels") or {}
    split = has_channels(b)
    lat = b["latency_ms"]
    rows = []
    for key, label in ROWS:
        if key == "itl" and per_chunk:
            label = "ITL (per chunk)"
        if not shown_latency(b, key):
            continue
        s = lat[key]
        if key == "inter_chunk" and _same_stats(s, lat.get("itl")):
            continue  # one token per chunk: the same gaps as ITL, shown once
        rows.append([label, fmt_count(s["count"]), *(fmt_number(s[c]) for c in COLS[1:])])
    lines += text_table(["latency (ms)", *COLS], rows)
    if split:
        lines.append("  " + channel_line(channels))
    if b.get("prefix_cache"):
        lines.append("  " + prefix_cache_line(b["prefix_cache"]))
    t = b["throughput"]
    lines.append(
        f"  throughput: {t['requests_per_s']:.2f} req/s, {t['output_tokens_per_s']:,.1f} output tok/s, "
        f"{t['total_tokens_per_s']:,.1f} total tok/s, goodput {t['goodput_requests_per_s']:.2f} req/s "
        f"(window {t['window_s']:.1f} s)"
    )
    return lines + _error_and_slo_lines(b)


def _embeddings_lines(b: dict[str, Any]) -> list[str]:
    """An embeddings block: E2E (from sent and from schedule) and send lag, the rates in inputs
    and input tokens, and the one line that says why there is no TTFT or ITL."""
    e = b["embeddings"]
    rows = []
    for label, s in (
        ("E2E", e["latency_ms"]["e2e"]),
        ("E2E from schedule", e["latency_ms"]["e2e_from_schedule"]),
        ("send lag", b["latency_ms"]["send_lag"]),
    ):
        rows.append([label, fmt_count(s["count"]), *(fmt_number(s[c]) for c in COLS[1:])])
    lines = text_table(["latency (ms)", *COLS], rows)
    lines.append(
        f"  throughput: {e['requests_per_s']:.2f} req/s, {e['inputs_per_s']:,.1f} inputs/s "
        f"(batch {e['batch']}), {e['input_tokens_per_s']:,.1f} input tok/s "
        f"(window {e['window_s']:.1f} s)"
    )
    lines.append(f"  {e['note']}")
    return lines + _error_and_slo_lines(b)


def _error_and_slo_lines(b: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    errs = b.get("errors") or {}
    share = b.get("error_share") or {}
    if errs:
        lines.append(
            "  errors: " + ", ".join(f"{k} {v} ({share.get(k, 0):.1%})" for k, v in errs.items())
        )
        lines += [f"    {m}" for m in message_lines(b.get("error_messages") or {})]
    return lines + [f"  {line}" for line in slo_lines(b.get("slo") or [])]


COUNT_SOURCES = {
    "usage_per_chunk": "each chunk's usage",
    "usage": "the final usage",
    "chunks": "content chunks (no usage reported: one token per chunk)",
    "mixed": "usage where reported, else content chunks",
}


def _lengths(s: dict[str, Any]) -> str:
    return f"mean {s['mean']:,.1f}, p50 {s['p50']:,}, p90 {s['p90']:,}, max {s['max']:,}"


def _token_lines(tok: dict[str, Any], forced: bool) -> list[str]:
    """How output tokens were counted and what ITL is made of (unless every chunk's usage said
    so), and, when EOS decided the lengths, planned against actual output lengths."""
    out = []
    src = tok.get("output_count_source")
    if src and src != "usage_per_chunk":  # vLLM's per-chunk usage: nothing to say beyond it
        itl = (
            "per token"
            if tok.get("itl_per") == "token"
            else "per chunk (chunks may carry several tokens; no per-chunk usage says how many)"
        )
        per = tok.get("tokens_per_chunk_mean")
        out.append(
            f"  output tokens counted from {COUNT_SOURCES.get(src, src)}; throughput and TPOT use "
            f"them; ITL {itl}" + (f"; {per:.2f} tokens per chunk" if per else "")
        )
    rejected = tok.get("usage_rejected") or {}
    if rejected.get("requests"):
        why = ", ".join(f"{k} {v}" for k, v in (rejected.get("reasons") or {}).items())
        out.append(
            f"  usage not believed for {rejected['requests']} requests ({why}): their "
            "server-reported counts are left out of the token figures; their tokens are counted "
            "one per token event, their prompt tokens not at all"
        )
    past = tok.get("past_max_tokens_requests")
    if past:
        out.append(f"  {past} requests reported more output tokens than their max_tokens")
    lengths = tok.get("output_lengths")
    if lengths and not forced:
        out.append(
            f"  output lengths (EOS decides): planned {_lengths(lengths['planned_tokens'])}; actual "
            f"{_lengths(lengths['actual_tokens'])}; {lengths['reached_planned_share']:.1%} reached the plan"
        )
    return out


PREDICTION_HEADLINE = "PREDICTION (simulated on the virtual clock, not measured)"


def prediction_lines(p: Any) -> list[str]:
    """A prediction's first lines: what was predicted and its preset's validation (a `predict`
    result's `prediction` block); [] for a measured result."""
    if not isinstance(p, dict):
        return []
    return [
        f"{PREDICTION_HEADLINE}: {p.get('gpu')} x{p.get('tensor_parallel_size')}, "
        f"{p.get('model')} ({p.get('weights_dtype')} weights, {p.get('kv_cache_dtype')} KV cache), "
        f"max_num_seqs {p.get('max_num_seqs')}, max_num_batched_tokens {p.get('max_num_batched_tokens')}",
        f"  validation of the {p.get('gpu')} preset: {p.get('validation')}",
        f"  {p.get('client')}",
    ]


def summary_phase(r: dict[str, Any]) -> dict[str, Any] | None:
    """The phase whose table is the summary's (the one measured phase, same requests and
    figures), which the report then prints once; None when the summary is a table of its own."""
    measured = [ph for ph in r.get("phases") or [] if not ph.get("warmup")]
    if len(measured) != 1:
        return None
    ph, summ = measured[0], r.get("summary") or {}
    same = all(ph.get(k) == summ.get(k) for k in ("requests", "latency_ms", "throughput"))
    return ph if same else None


def render_text(r: dict[str, Any]) -> str:
    """The whole report: the run's head lines, a table per phase (and the summary), then the
    tokens, the views (sessions, agents, prefix cache, workload, server) and the client."""
    clock = r.get("clock") if isinstance(r.get("clock"), dict) else None
    tag = f"; {model_time_tag(float(clock['speedup']))}" if clock else ""
    lines = _head_lines(r, clock is not None)
    lines += _phase_lines(r, tag)
    tok = r["summary"]["tokens"]
    lines += _prompt_error_lines(r, tok)
    if not r["summary"].get("embeddings"):  # an embeddings answer has no output tokens
        lines += _token_lines(tok, r.get("output_lengths_forced", True))
    lines += render_sessions(r["summary"].get("sessions"))
    lines += render_agents(r["summary"].get("agents"))
    lines += render_prefix_cache(r)
    lines += render_workload_view(r.get("workload_view"))
    lines += _server_lines(r)
    lines += _client_lines(r)
    return "\n".join(lines)


def _head_lines(r: dict[str, Any], clock: bool) -> list[str]:
    """What ran against what, whether it completed, and what qualifies every figure below (not
    trustworthy, simulated, its time base, adapted requests, TLS off)."""
    tgt = r["target"]
    state = "complete" if r["complete"] else f"INCOMPLETE ({r.get('stop_reason')})"
    lines = prediction_lines(r.get("prediction"))
    lines.append(
        f"harness: {r['scenario_name']} against {tgt['kind']} {tgt['base_url']} "
        f"(model {tgt.get('model')}, {tgt['endpoint']}), {r['duration_s']:.1f} s, {state}"
    )
    lines += trust_lines(r)  # NOT TRUSTWORTHY (records set aside), stray bytes on connections
    if tgt["kind"] == "simulator":
        lines.append("  (simulated server: figures show the simulator's model, not a real GPU)")
    if clock:
        lines.append(f"  ({result_clock_note(r)})")
    for a in r.get("request_adaptations") or []:
        lines.append(
            f"  request adapted ({a['action']}): {a['parameter']} refused by the target: {a['consequence']}"
        )
    if tgt.get("tls_verify") is False:
        lines.append(
            "  WARNING: TLS certificate verification was OFF (--insecure): the server was not authenticated"
        )
    return lines


def _phase_lines(r: dict[str, Any], tag: str) -> list[str]:
    """A table per phase, and the summary's unless one measured phase is the summary."""
    lines: list[str] = []
    only = summary_phase(r)
    for ph in r["phases"]:
        win = ph.get("window_s")
        span = f"{win[1] - win[0]:.1f} s" if win else "not run"
        what = ", warm-up: not in summary" if ph["warmup"] else ""
        if ph is only:
            what += "; the only measured phase: the summary"
        lines.append("")
        lines += render_block(f"phase {ph['name']} ({span}, {ph.get('arrival')}{what}{tag})", ph)
    if only is None:
        lines.append("")
        lines += render_block(f"summary (measured phases{tag})", r["summary"])
    return lines


def _prompt_error_lines(r: dict[str, Any], tok: dict[str, Any]) -> list[str]:
    """How far the prompts' token counts were from those requested, and how lengths were set."""
    if not tok.get("prompt_synthesis_error"):
        return []
    e = tok["prompt_synthesis_error"]
    method = ((r.get("plan") or {}).get("workload") or {}).get("prompt_lengths") or {}
    how = {
        "server_tokenize": "the target's /tokenize",
        "tokenizer_file": "a tokenizer file",
        "estimate": "the estimate, one word one token",
    }.get(method.get("method", ""))
    return [
        f"  prompt tokens vs requested: mean |error| {e['mean']:.1%}, p99 {e['p99']:.1%}"
        + (f" (lengths set by {how})" if how else "")
        + "; "
        f"per-chunk usage {'reported' if tok['per_chunk_usage'] else 'not reported'}"
    ]


def _server_lines(r: dict[str, Any]) -> list[str]:
    """The server's gauges (peaks), a note or why there are none, and the server view."""
    lines: list[str] = []
    sm = r.get("server_metrics") or {}
    peaks = sm.get("peaks") if isinstance(sm, dict) else None
    if peaks:
        lines.append("  server: " + ", ".join(peak_text(k, v) for k, v in peaks.items()))
    if isinstance(sm, dict) and sm.get("note"):
        lines.append(f"  server: {sm['note']}")
    elif isinstance(sm, dict) and sm.get("available") is False:
        lines.append(f"  server metrics: none ({sm.get('reason')})")
    sv = r.get("server_view")
    if isinstance(sv, dict) and sv.get("available"):
        lines += render_server_view(sv)
    return lines


def _client_lines(r: dict[str, Any]) -> list[str]:
    """The harness's own health: send and event-loop lag, CPU, its warnings, a damaged journal."""
    cl = r["client"]
    ll = cl["loop_lag_ms"]
    cpu = cl.get("cpu_share_of_one_core")
    lines = [
        f"  client: send lag p99 {fmt_number(cl['send_lag_ms']['p99'])} ms, event-loop lag p99 "
        f"{fmt_number(ll['p99'])} ms, CPU {('-' if cpu is None else f'{cpu:.0%}')} of one core"
    ]
    scaled = scale_out_line(r)  # workers, how chosen, each one's share (harness.analysis.scale_out)
    if scaled:
        lines.append(f"  {scaled}")
    for w in cl.get("warnings") or []:
        lines.append(f"  WARNING: {w}")
    files = r.get("files") or {}
    torn, repeated = files.get("journal_torn_lines") or 0, files.get("journal_duplicate_lines") or 0
    if torn or repeated:  # a journal handed back damaged or copied into itself
        lines.append(
            f"  journal: {torn} damaged lines skipped, {repeated} repeated lines read once"
        )
    return lines


__all__ = [
    "COLS",
    "PEAK_WORDS",
    "PREDICTION_HEADLINE",
    "ROWS",
    "SERVER_VIEW_ROWS",
    "SPARK",
    "has_channels",
    "peak_text",
    "prediction_lines",
    "render_block",
    "render_prefix_cache",
    "render_server_view",
    "render_sessions",
    "render_text",
    "render_workload_view",
    "shown_latency",
    "sparkline",
]
