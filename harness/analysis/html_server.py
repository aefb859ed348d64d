"""The result page's parts for the server's own view (its /metrics: queue, prefill, decode
against the client's figures) and for failures (classes, messages, Retry-After)."""

from __future__ import annotations

from typing import Any

from harness.analysis.html_page import table
from harness.analysis.numbers import fmt_number
from harness.analysis.server_view import SERVER_VIEW_ROWS, percentile_text


def server_view_sections(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The client's TTFT/E2E/ITL beside vLLM's own histograms, and the server's E2E split."""
    sv = r.get("server_view")
    if not isinstance(sv, dict) or not sv.get("available"):
        return []
    client = sv.get("client_ms") or {}
    lat = sv.get("latency_ms") or {}
    rows = []
    for key, label in SERVER_VIEW_ROWS:
        c = client.get(key)
        if c:
            rows.append(
                [
                    f"{label} (client)",
                    str(c.get("count")),
                    fmt_number(c.get("mean")),
                    *[fmt_number(c.get(q)) for q in ("p50", "p90", "p99")],
                ]
            )
        srv = lat.get(key)
        if srv:
            b = srv.get("bucket_ms") or {}
            rows.append(
                [
                    f"{label} (server)",
                    str(srv.get("count")),
                    fmt_number(srv.get("mean")),
                    *[percentile_text(srv.get(q), b.get(q)) for q in ("p50", "p90", "p99")],
                ]
            )
    out = [
        table(
            "Client vs server: vLLM's own histograms over the measured window (ms; server percentiles "
            "interpolated inside the bucket shown, or only its bounds [lo-hi] where it spans more "
            "than 2x; means exact)",
            ["metric", "count", "mean", "p50", "p90", "p99"],
            rows,
        )
    ]
    sp = sv.get("split_ms") or {}
    e2e = sp.get("e2e")
    if e2e:
        outside = (client.get("outside_server_ms") or {}).get("e2e")
        split = [
            [name, fmt_number(sp.get(k)), f"{(sp.get(k) or 0) / e2e:.1%}"]
            for k, name in (
                ("queue", "queue (waiting for a slot)"),
                ("prefill", "prefill"),
                ("decode", "decode"),
                ("api_server", "API server (tokenise, IPC)"),
            )
            if sp.get(k) is not None
        ]
        if outside is not None:
            split.append(["outside the server (client E2E - server E2E)", fmt_number(outside), "-"])
        pc = sv.get("prefix_cache")
        if pc and pc.get("queries_tokens"):
            split.append(
                [
                    "prefix cache hit share",
                    f"{pc['hit_share']:.1%} of {pc['queries_tokens']:,} tokens",
                    "-",
                ]
            )
        if sv.get("preemptions") is not None:
            split.append(["preemptions", str(sv["preemptions"]), "-"])
        out.append(
            table(
                "Where the server's E2E goes (means, ms)",
                ["part", "mean ms", "share of server E2E"],
                split,
            )
        )
    return out


def failure_sections(r: dict[str, Any]) -> list[dict[str, Any]]:
    """What the target refused or failed, in its own words (tables of text: the page renders
    every cell with textContent, so a server's HTML shows as text), and planned against actual
    output lengths when EOS decided them."""
    s = r["summary"]
    out: list[dict[str, Any]] = []
    adapted = r.get("request_adaptations") or []
    if adapted:
        out.append(
            table(
                "Request adapted to the target",
                ["argument", "action", "consequence", "server said"],
                [[a["parameter"], a["action"], a["consequence"], a["evidence"]] for a in adapted],
            )
        )
    msgs = s.get("error_messages") or {}
    if msgs:
        out.append(
            table(
                "Error messages (most frequent per class)",
                ["class", "count", "message"],
                [[cls, str(m["count"]), m["message"]] for cls, ms in msgs.items() for m in ms],
            )
        )
    lengths = (s.get("tokens") or {}).get("output_lengths")
    if lengths and not r.get("output_lengths_forced", True):
        cols = ("mean", "min", "p50", "p90", "p99", "max")
        out.append(
            table(
                "Output lengths, tokens (EOS decides: planned is the max_tokens sent)",
                ["", *cols],
                [
                    [name] + [fmt_number(lengths[k][c]) for c in cols]
                    for name, k in (("planned", "planned_tokens"), ("actual", "actual_tokens"))
                ],
            )
        )
    return out
