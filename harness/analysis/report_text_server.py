"""The terminal report's server lines: the gauges' peaks (`peak_text`) and the client's
latency beside vLLM's own histograms with the server's queue / prefill / decode split
(`render_server_view`). Part of `harness.analysis.report_text`, which re-exports them."""

from __future__ import annotations

from typing import Any

from harness.analysis.numbers import fmt_count, fmt_number, text_table
from harness.analysis.server_view import SERVER_VIEW_ROWS, percentile_text

PEAK_WORDS = {  # server_metrics.peaks' keys as the report names them, unit, whether a count
    "running": ("running", "", True),
    "waiting": ("waiting", "", True),
    "kv_cache_usage_pct": ("KV cache use", " %", False),
}


def peak_text(key: str, v: dict[str, Any]) -> str:
    """One gauge's peak and mean: `running peak 48 (mean 13.3)`, `KV cache use peak 3.06 %
    (mean 0.778 %)`; the same unit the HTML's charts draw."""
    name, unit, count = PEAK_WORDS.get(key, (key, "", False))
    peak = fmt_count(v.get("max")) if count else fmt_number(v.get("max"))
    return f"{name} peak {peak}{unit} (mean {fmt_number(v.get('mean'))}{unit})"


def render_server_view(sv: dict[str, Any]) -> list[str]:
    """The client's TTFT/E2E beside vLLM's own histograms, and the server's queue / prefill /
    decode split: where the latency sits (queue, prefill, decode, or outside the engine)."""
    w = sv.get("window") or {}
    lines = [
        f"  client vs server (vLLM's histograms, polls from {w.get('start_s', 0):.1f} s to "
        f"{w.get('end_s', 0):.1f} s; "
        "server percentiles interpolated in the bucket shown, [lo-hi] alone where it spans "
        "more than 2x; means exact)",
    ]
    client = sv.get("client_ms") or {}
    lat = sv.get("latency_ms") or {}
    rows: list[list[str]] = []
    for key, label in SERVER_VIEW_ROWS:
        c = client.get(key)
        if c:
            rows.append(
                [label + " client", fmt_count(c.get("count") or 0), fmt_number(c.get("mean"))]
                + [fmt_number(c.get(q)) for q in ("p50", "p90", "p99")]
            )
        srv = lat.get(key)
        if srv:
            b = srv.get("bucket_ms") or {}
            rows.append(
                [label + " server", fmt_count(srv["count"]), fmt_number(srv.get("mean"))]
                + [percentile_text(srv.get(q), b.get(q)) for q in ("p50", "p90", "p99")]
            )
    lines += text_table(["latency (ms)", "count", "mean", "p50", "p90", "p99"], rows)
    sp = sv.get("split_ms") or {}
    e2e = sp.get("e2e")
    if e2e:
        parts = [
            f"{name} {fmt_number(sp.get(k))} ms ({(sp.get(k) or 0) / e2e:.0%})"
            for k, name in (
                ("queue", "queue"),
                ("prefill", "prefill"),
                ("decode", "decode"),
                ("api_server", "API server"),
            )
            if sp.get(k) is not None
        ]
        outside = (client.get("outside_server_ms") or {}).get("e2e")
        lines.append(
            "  server E2E mean, split: "
            + ", ".join(parts)
            + (
                f"; outside the server (client - server E2E mean): {fmt_number(outside)} ms"
                if outside is not None
                else ""
            )
        )
    if sv.get("note"):
        lines.append(f"  server view: {sv['note']}")
    pc = sv.get("prefix_cache")
    extra = []
    if pc and pc.get("queries_tokens"):
        extra.append(
            f"prefix cache hit {pc['hit_share']:.1%} of {pc['queries_tokens']:,} prompt tokens looked up"
        )
    if sv.get("preemptions") is not None:
        extra.append(f"preemptions {sv['preemptions']}")
    if extra:
        lines.append("  server: " + ", ".join(extra))
    return lines
