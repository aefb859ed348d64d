"""HTML reports: one self-contained file per result, sweep or compare; no network needed.

Python turns the document into a small page description (tables, charts, a timeline) embedded
as JSON in a `<script type="application/json">` block, with `<`, `>`, `&` and the JS line
separators escaped so no string from a server or scenario can close the block. Inline JS
(`_JS`, no libraries) draws each chart as SVG and writes every text through `textContent`,
never `innerHTML`, so names from results are shown, not run. Each chart records how many
points it drew in `data-points`; the page sets `data-rendered` on <body> when done and
`data-js-errors` if a script error happened (the browser test reads both).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from harness.analysis.agent_view import STEP_HEAD, TIME_ROWS, ended_text, step_rows
from harness.analysis.clock import model_columns, result_clock_note, tag_titles
from harness.analysis.html_safe import bounded_points, downsample_note, safe_strings, series_xy
from harness.analysis.numbers import fmt_number
from harness.analysis.report_text import prediction_lines, shown_latency
from harness.analysis.server_view import percentile_text
from harness.analysis.sweep_report import (
    offered_rate,
    server_series,
)
from harness.catalogue import METRICS
from harness.record import hist
from harness.safe_write import write_file
from harness.workload.curves import LOG_SPREAD

TIMELINE_MAX_REQUESTS = 150  # bars in the per-request timeline: enough to see, few to read
PERCENTILE_GRID = (
    0.0,
    10.0,
    25.0,
    50.0,
    75.0,
    90.0,
    95.0,
    97.5,
    99.0,
    99.5,
    99.75,
    99.9,
    99.95,
    99.975,
    99.99,
    99.995,
    99.999,
    99.9995,
    99.9999,
)


def _embed(obj: Any) -> str:
    text = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def write_html(path: Path, text: str) -> None:
    """Write a page atomically (harness.safe_write: no link followed, no device replaced)."""
    write_file(path, text)


def page(title: str, subtitle: list[str], sections: list[dict[str, Any]]) -> str:
    """The page of every HTML view; every string in it escaped once here (html_safe)."""
    data = safe_strings({"title": title, "subtitle": subtitle, "sections": sections})
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(data['title'])}</title><style>{_CSS}</style></head>\n<body>\n"
        f'<div id="app"></div>\n<script type="application/json" id="page-data">{_embed(data)}</script>\n'
        f"<script>{_JS}</script>\n</body></html>\n"
    )


def chart(
    title: str,
    xlabel: str,
    ylabel: str,
    series: list[dict[str, Any]],
    *,
    xlog: bool = False,
    ylog: bool = False,
    xkind: str = "linear",
    note: str = "",
    markers: bool = False,
) -> dict[str, Any]:
    """A line chart; series: [{"name", "points": [[x, y], ...] or an (n, 2) array, "dash"?: bool,
    "only_markers"?: bool}]. A long series is downsampled (html_safe), and the note says so."""
    clean, total, drawn = [], 0, 0
    for s in series:
        pts, n = bounded_points(s["points"], xlog=xlog, ylog=ylog)
        total, drawn = total + n, drawn + len(pts)
        if pts:
            clean.append({**s, "points": pts})
    if drawn < total:
        note = f"{note}; {downsample_note(drawn, total)}" if note else downsample_note(drawn, total)
    return {
        "type": "chart",
        "title": title,
        "xlabel": xlabel,
        "ylabel": ylabel,
        "series": clean,
        "xlog": xlog,
        "ylog": ylog,
        "xkind": xkind,
        "note": note,
        "markers": markers,
    }


def table(
    title: str, head: list[str], rows: list[list[Any]], classes: list[str] | None = None
) -> dict[str, Any]:
    return {
        "type": "table",
        "title": title,
        "head": head,
        "rows": [[str(c) for c in r] for r in rows],
        "classes": classes or [],
    }


def keep_drawn(sections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop charts without data (the page says so in a note instead of drawing an empty frame)."""
    out = []
    for s in sections:
        if s["type"] == "chart" and not s["series"]:
            out.append({"type": "note", "text": f"{s['title']}: no data in this result"})
        else:
            out.append(s)
    return out


# ---------------------------------------------------------------- single result

LAT_ROWS = tuple((m.name, m.label) for m in METRICS)  # the metric catalogue, in its order
STATS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")


def percentile_curve(encoded: str) -> list[list[float]]:
    """HDR-style percentile curve of an encoded histogram: [[x, ms]] with x = 1 / (1 - p),
    stopping where fewer than one sample lies beyond the percentile."""
    h = hist.decode(encoded)
    n = h.get_total_count()
    if n == 0:
        return []
    pts = []
    for p in PERCENTILE_GRID:
        if (1 - p / 100) * n < 1:
            break
        pts.append([1 / (1 - p / 100), h.get_value_at_percentile(p) / 1e3])
    pts.append([float(max(n, 2)), h.get_max_value() / 1e3])
    return pts


def timeline(result: dict[str, Any], result_path: Path | None) -> dict[str, Any] | None:
    """A sample of requests as bars: intended -> sent -> first token -> last token (seconds)."""
    from harness.record.journal import find_journal, read_journal

    path = find_journal(result, result_path)
    if path is None:
        return None
    try:
        c = model_columns(read_journal(path))  # the page's time: the model's at a speedup
    except (OSError, ValueError):
        return None
    keep = np.flatnonzero(~c.retried)
    if not len(keep):
        return None
    keep = keep[np.argsort(c.intended[keep], kind="stable")]  # ties: (seq, attempt) order
    step = max(1, math.ceil(len(keep) / TIMELINE_MAX_REQUESTS))
    bars = []
    for i in keep[::step].tolist():
        n, at = int(c.n_chunks[i]), int(c.chunk_start[i])
        s = None if c.sent[i] < 0 else int(c.sent[i])
        f = int(c.stamps[at]) if n else None
        last = int(c.stamps[at + n - 1]) if n else None
        intended = int(c.intended[i])
        end = int(c.end[i]) if c.end[i] >= 0 else (last or s or intended)
        bars.append(
            [
                int(c.seq[i]),
                intended / 1e9,
                None if s is None else s / 1e9,
                None if f is None else f / 1e9,
                None if last is None else last / 1e9,
                end / 1e9,
                bool(c.ok[i]),
            ]
        )
    return {
        "type": "timeline",
        "title": f"Per-request timeline ({len(bars)} of {len(keep)} requests)",
        "bars": bars,
        "note": "grey: intended -> sent (send lag); orange: sent -> first token (queueing + prefill); "
        "blue: first -> last token (decode); red: failed",
    }


def _embeddings_table(s: dict[str, Any]) -> dict[str, Any]:
    """An embeddings run's latency (the whole answer's) and rates, and why there is no TTFT."""
    e = s["embeddings"]
    rows = [
        [label] + [str(v[c]) if c == "count" else fmt_number(v[c]) for c in STATS]
        for label, v in (
            ("E2E", e["latency_ms"]["e2e"]),
            ("E2E from schedule", e["latency_ms"]["e2e_from_schedule"]),
        )
    ]
    rows.append(
        [f"inputs/s {fmt_number(e['inputs_per_s'])} (batch {e['batch']})"] + [""] * len(STATS)
    )
    rows.append([f"input tokens/s {fmt_number(e['input_tokens_per_s'])}"] + [""] * len(STATS))
    return table(f"Embeddings latency (ms): {e['note']}", ["metric", *STATS], rows)


def result_sections(r: dict[str, Any], result_path: Path | None = None) -> list[dict[str, Any]]:
    s = r["summary"]
    out: list[dict[str, Any]] = []
    t = s["throughput"]
    req = s["requests"]
    out.append(
        table(
            "Summary (measured phases)",
            ["figure", "value"],
            [
                [
                    "requests sent / completed / failed",
                    f"{req['sent']} / {req['completed']} / {req['failed']}",
                ],
                ["offered requests/s", fmt_number(offered_rate(r))],
                ["requests/s", fmt_number(t["requests_per_s"])],
                ["output tokens/s", fmt_number(t["output_tokens_per_s"])],
                ["total tokens/s", fmt_number(t["total_tokens_per_s"])],
                ["goodput requests/s", fmt_number(t["goodput_requests_per_s"])],
                ["window s", fmt_number(t["window_s"])],
                *[[f"errors: {k}", str(v)] for k, v in (s.get("errors") or {}).items()],
            ],
        )
    )
    out += failure_sections(r)
    if s.get("embeddings"):
        out.append(_embeddings_table(s))
    itl_label = "ITL (per chunk)" if (s.get("tokens") or {}).get("itl_per") == "chunk" else "ITL"
    if not s.get("embeddings"):  # an embeddings run has no token stamps: its table above
        out.append(
            table(
                "Latency (ms)",
                ["metric", *STATS],
                [
                    [itl_label if k == "itl" else label]
                    + [
                        (
                            fmt_number(s["latency_ms"][k][c])
                            if c != "count"
                            else str(s["latency_ms"][k][c])
                        )
                        for c in STATS
                    ]
                    for k, label in LAT_ROWS
                    if shown_latency(s, k)  # not a row the result predates, nor an empty channel
                ],
            )
        )
    out += server_view_sections(r)
    out += session_sections(r)
    out += agent_sections(r)
    out += prefix_cache_sections(r)
    slo_rows, classes = [], []
    for v in s.get("slo") or []:
        if v["kind"] == "aggregate":
            verdict = "n/a" if v["pass"] is None else ("PASS" if v["pass"] else "FAIL")
            slo_rows.append(
                [v["name"], fmt_number(v["limit_ms"]), fmt_number(v.get("value_ms")), verdict]
            )
            classes.append("" if v["pass"] is None else ("pass" if v["pass"] else "fail"))
        else:
            att = "-" if v["attainment"] is None else f"{v['attainment']:.1%} of requests"
            slo_rows.append(
                [v["name"] + " (per request)", fmt_number(v["limit_ms"]), att, "goodput"]
            )
            classes.append("")
    if slo_rows:
        out.append(
            table("SLO verdicts", ["SLO", "limit ms", "value", "verdict"], slo_rows, classes)
        )
    warns = list((r.get("client") or {}).get("warnings") or [])
    if warns:
        out.append(table("Warnings", ["warning"], [[w] for w in warns]))
    hs = (r.get("histograms") or {}).get("summary") or {}
    pairs = (
        ("ttft", "ttft_from_schedule", "TTFT"),
        ("e2e", "e2e_from_schedule", "E2E"),
        ("itl", None, "ITL (per token)"),
        ("tpot", None, "TPOT"),
    )
    for a, b, label in pairs:
        series: list[dict[str, Any]] = (
            [{"name": f"{label} from sent", "points": percentile_curve(hs[a])}] if a in hs else []
        )
        if b and b in hs:
            series.append(
                {
                    "name": f"{label} from schedule (corrected)",
                    "points": percentile_curve(hs[b]),
                    "dash": True,
                }
            )
        out.append(
            chart(
                f"{label}: latency by percentile",
                "percentile",
                "ms",
                series,
                xlog=True,
                ylog=True,
                xkind="percentile",
            )
        )
    ts = r.get("timeseries") or {}
    step = ts.get("step_s") or 1.0

    def per_s(key: str, per: float | None = None) -> Any:
        return series_xy(ts.get(key) or [], step, step if per is None else per)

    out.append(
        chart(
            "Offered vs achieved load",
            "time (s)",
            "requests/s",
            [
                {"name": "offered (intended sends)", "points": per_s("offered"), "dash": True},
                {"name": "sent", "points": per_s("sent")},
                {"name": "completed", "points": per_s("completed")},
            ],
        )
    )
    out.append(
        chart(
            "In-flight requests",
            "time (s)",
            "requests",
            [
                {
                    "name": "in flight (client)",
                    "points": per_s("in_flight", 1.0),
                }
            ],
        )
    )
    out.append(
        chart(
            "Output tokens/s",
            "time (s)",
            "tokens/s",
            [{"name": "output tokens/s", "points": per_s("output_tokens")}],
        )
    )
    errs = ts.get("errors") or []
    if any(errs):
        out.append(
            chart("Errors", "time (s)", "errors/s", [{"name": "errors", "points": per_s("errors")}])
        )
    else:
        out.append({"type": "note", "text": "Errors: none in this run"})
    if any(ts.get("http_429") or []):
        out.append(
            chart(
                "Rate limits: HTTP 429 answers (retried attempts included)",
                "time (s)",
                "429s/s",
                [
                    {"name": "HTTP 429", "points": per_s("http_429")},
                    {"name": "completed", "points": per_s("completed"), "dash": True},
                ],
            )
        )
    out += workload_sections(r)
    srv = server_series(r)
    if srv["running"] or srv["waiting"]:
        out.append(
            chart(
                "Server: running and waiting requests (/metrics)",
                "time (s)",
                "requests",
                [
                    {"name": "running", "points": srv["running"]},
                    {"name": "waiting", "points": srv["waiting"], "dash": True},
                ],
            )
        )
    if srv["kv_usage"]:
        out.append(
            chart(
                "Server: KV cache usage (/metrics)",
                "time (s)",
                "KV cache use (%)",
                [{"name": "KV cache use (%)", "points": srv["kv_usage"]}],
            )
        )
    if not (srv["running"] or srv["waiting"] or srv["kv_usage"]):
        out.append({"type": "note", "text": "Server /metrics: none recorded for this run"})
    tl = timeline(r, result_path)
    out.append(
        tl if tl else {"type": "note", "text": "Per-request timeline: the journal is not available"}
    )
    return keep_drawn(out)


def _binned(values: list[float], b: float) -> Any:
    return series_xy(values, b, 1.0, first=0.5)


def workload_sections(r: dict[str, Any]) -> list[dict[str, Any]]:
    """What was offered (`result.workload_view`): arrivals over time, length histograms, and for
    trace phases the trace's own curve beside what was sent."""
    v = r.get("workload_view")
    if not v:
        return []
    b = v["bin_s"]
    series: list[dict[str, Any]] = [
        {
            "name": "offered (intended sends)",
            "points": _binned(v["offered_per_s"], b),
            "dash": True,
        },
        {"name": "sent", "points": _binned(v["sent_per_s"], b)},
    ]
    if v.get("sessions_started_per_s"):
        series.append(
            {"name": "sessions started", "points": _binned(v["sessions_started_per_s"], b)}
        )
    out = [
        chart(
            f"Workload: arrival rate ({b:g} s bins)",
            "time (s)",
            "requests/s",
            series,
            note=f"offered mean {fmt_number(v['offered_mean_per_s'])}/s, peak {fmt_number(v['offered_peak_per_s'])}/s",
        )
    ]
    for key, label in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        h, e = v.get(key) or {}, (v.get(key) or {}).get("edges") or []
        mid = [(a + z - 1) / 2 for a, z in zip(e, e[1:], strict=False)]
        if mid:
            out.append(
                chart(
                    f"Workload: {label} lengths",
                    f"{label} tokens",
                    "requests",
                    [
                        {
                            "name": "planned",
                            "points": [list(p) for p in zip(mid, h["planned"], strict=True)],
                            "dash": True,
                        },
                        {
                            "name": "server usage (completed)",
                            "points": [list(p) for p in zip(mid, h["server"], strict=True)],
                        },
                    ],
                    markers=True,
                    xlog=e[-1] > LOG_SPREAD * max(e[0], 1),
                )
            )
    for name, t in (v.get("traces") or {}).items():
        corr = (
            ""
            if t.get("shape_correlation") is None
            else f"; shape correlation {t['shape_correlation']:.3f}"
        )
        out.append(
            chart(
                f"Trace phase {name}: the trace's own curve and what was sent ({t['bin_s']:g} s bins)",
                "replay time (s)",
                "requests/s",
                [
                    {
                        "name": "trace (its own time)",
                        "points": _binned(t["trace_per_s"], t["bin_s"]),
                        "dash": True,
                    },
                    {"name": "sent", "points": _binned(t["sent_per_s"], t["bin_s"])},
                ],
                note=f"replayed at x{1 / t['time_scale']:.3g} the trace's speed{corr}",
            )
        )
    return out


def session_sections(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Multi-turn runs: sessions apart from requests, TTFT by turn index (table and chart)."""
    ss = r["summary"].get("sessions")
    if not ss:
        return []
    turns = ss["ttft_by_turn"]
    rows = [
        [str(t["turn_index"]), str(t["requests"])]
        + [fmt_number(t["ttft_ms"][k]) for k in ("mean", "p50", "p90", "p99")]
        + [fmt_number(t["prompt_tokens_mean"]), fmt_number(t["ttft_ms_per_1k_prompt_tokens_p50"])]
        for t in turns
    ]
    title = (
        f"Sessions: {ss['sessions']} ({ss['requests']} requests, {ss['turns_per_session_mean']:.2f} turns per "
        f"session; {ss['sessions_with_a_failed_turn']} ended by a failed turn): TTFT by turn (ms)"
    )
    head = [
        "turn",
        "requests",
        "mean",
        "p50",
        "p90",
        "p99",
        "prompt tokens",
        "p50 ms per 1k prompt tokens",
    ]
    by: list[tuple[str, Callable[[dict[str, Any]], float | None], bool]] = [
        ("TTFT p50", lambda t: t["ttft_ms"]["p50"], False),
        ("TTFT p90", lambda t: t["ttft_ms"]["p90"], True),
        ("p50 TTFT per 1k prompt tokens", lambda t: t["ttft_ms_per_1k_prompt_tokens_p50"], True),
    ]
    return [
        table(title, head, rows),
        chart(
            "TTFT by turn",
            "turn index",
            "ms",
            [
                {"name": n, "points": [[t["turn_index"], f(t)] for t in turns], "dash": d}
                for n, f, d in by
            ],
            markers=True,
            note="later turns carry the history: with prefix caching their TTFT per prompt token falls",
        ),
    ]


def agent_sections(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Agent runs: the session time split, latencies by step (table and chart)."""
    ag = r["summary"].get("agents")
    if not ag:
        return []
    title = (
        f"Agent sessions: {ag['sessions']} ({ag['parent_requests']} steps, "
        f"{ag['child_requests']} sub-agent steps); ended: {ended_text(ag)}"
    )
    times = [
        [label.strip(), str(ag[k]["count"])]
        + [fmt_number(ag[k][q]) for q in ("mean", "p50", "p90", "p99", "max")]
        for k, label in TIME_ROWS
    ]
    steps = ag["by_step"]
    by: list[tuple[str, Callable[[dict[str, Any]], float | None], bool]] = [
        ("TTFT p50", lambda t: t["ttft_ms"]["p50"], False),
        ("time to first tool call p50", lambda t: t["ttft_tool_ms"]["p50"], True),
        ("p50 TTFT per 1k prompt tokens", lambda t: t["ttft_ms_per_1k_prompt_tokens_p50"], True),
    ]
    return [
        table(
            title + ": time per session (ms)",
            ["", "count", "mean", "p50", "p90", "p99", "max"],
            times,
        ),
        table(
            "Agent steps: latencies (ms) by step",
            STEP_HEAD,
            step_rows(steps, "step") + step_rows(ag["child_by_step"], "sub step"),
        ),
        chart(
            "Agent: TTFT by step",
            "step",
            "ms",
            [
                {"name": n, "points": [[t["step"], f(t)] for t in steps], "dash": d}
                for n, f, d in by
            ],
            markers=True,
            note="each step carries the history: with prefix caching its TTFT per prompt token falls",
        ),
    ]


def prefix_cache_sections(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The prefix cache per request (harness.analysis.prefix_cache): hit share per phase, TTFT
    by cached share (table and chart); a note where the server reported no cached tokens."""
    summ = r["summary"]
    if "prefix_cache" not in summ:  # a result written before the block
        return []
    pc = summ["prefix_cache"]
    if pc is None:
        return [
            {
                "type": "note",
                "text": "Prefix cache per request: not reported (the server sent no "
                "usage.prompt_tokens_details.cached_tokens)",
            }
        ]

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    blocks = [b for b in [*r.get("phases", []), summ] if b.get("prefix_cache")]
    phase_rows = [
        [
            str(b["name"]),
            str(b["prefix_cache"]["requests"]),
            str(b["prefix_cache"]["requests_with_hits"]),
            pct(b["prefix_cache"]["token_hit_share"]),
        ]
        + [pct(b["prefix_cache"]["hit_share"].get(k)) for k in ("mean", "p10", "p50", "p90")]
        for b in blocks
    ]
    bins = [b for b in pc["ttft_by_hit_share"] if b["requests"]]
    bin_rows = [
        [
            b["bin"],
            str(b["requests"]),
            fmt_number(b["ttft_ms"]["p50"]),
            fmt_number(b["ttft_ms"]["p90"]),
            fmt_number(b["uncached_prompt_tokens_mean"]),
        ]
        for b in bins
    ]
    mid = [(b["low"] + b["high"]) / 2 for b in bins]
    out = [
        table(
            "Prefix cache per request (usage.prompt_tokens_details.cached_tokens)",
            [
                "phase",
                "requests",
                "with hits",
                "cached share of prompt tokens",
                "hit share mean",
                "p10",
                "p50",
                "p90",
            ],
            phase_rows,
        ),
        table(
            "TTFT by cached share of the prompt (ms, summary)",
            ["hit share", "requests", "TTFT p50", "TTFT p90", "uncached prompt tokens"],
            bin_rows,
        ),
        chart(
            "TTFT against cached share",
            "hit share (bin middle)",
            "ms",
            [
                {
                    "name": f"TTFT {k}",
                    "points": [[x, b["ttft_ms"][k]] for x, b in zip(mid, bins, strict=True)],
                }
                for k in ("p50", "p90")
            ],
            markers=True,
            note="a cached prefix is not computed again: TTFT follows the uncached part",
        ),
    ]
    if pc.get("by_turn"):
        out.append(
            table(
                "Hit share by turn",
                ["turn", "requests", "hit share mean", "cached tokens mean"],
                [
                    [
                        str(t["turn_index"]),
                        str(t["requests"]),
                        pct(t["hit_share_mean"]),
                        fmt_number(t["cached_tokens_mean"]),
                    ]
                    for t in pc["by_turn"]
                ],
            )
        )
    return out


SERVER_VIEW_ROWS = (
    ("ttft", "TTFT"),
    ("e2e", "E2E"),
    ("itl", "ITL"),
    ("queue", "queue"),
    ("prefill", "prefill"),
    ("decode", "decode"),
)


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


def render_result_html(r: dict[str, Any], result_path: Path | None = None) -> str:
    tgt = r["target"]
    sub = [
        f"{tgt.get('kind')} {tgt.get('base_url')} (model {tgt.get('model')}, {tgt.get('endpoint')}), "
        f"{r['duration_s']:.1f} s, "
        + ("complete" if r["complete"] else f"INCOMPLETE ({r.get('stop_reason')})"),
        f"started {r.get('started_at')}",
    ]
    if tgt.get("kind") == "simulator":
        sub.append("simulated server: figures show the simulator's model, not a real GPU")
    clock = r.get("clock") if isinstance(r.get("clock"), dict) else None
    if clock:
        sub.append(result_clock_note(r) or "")
    sub[:0] = prediction_lines(r.get("prediction"))  # first: a prediction, not a measurement
    sections = tag_titles(result_sections(r, result_path), (clock or {}).get("speedup"))
    return page(f"harness: {r['scenario_name']}", sub, sections)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 6px}
.sub{color:#555;margin:0}table{border-collapse:collapse;margin:4px 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
th{background:#f3f3f3}tr.fail td{background:#fde2e2}tr.pass td{background:#e3f6e3}
.note{color:#666;font-style:italic}.chart{display:inline-block;vertical-align:top;margin:6px 12px 6px 0}
.chart svg{background:#fff;border:1px solid #ddd}.wide svg{width:100%}
"""

_JS = r"""
(function(){
'use strict';
var errors=[];
window.addEventListener('error',function(e){errors.push(String(e.message));document.body.dataset.jsErrors=errors.join(' | ');});
var NS='http://www.w3.org/2000/svg';
var COLORS=['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f','#bcbd22','#17becf'];
function el(tag,attrs,text){var e=document.createElement(tag);for(var k in attrs||{})e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function sv(tag,attrs,text){var e=document.createElementNS(NS,tag);for(var k in attrs||{})e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function fmt(v){var a=Math.abs(v);if(a>=1e6)return (v/1e6).toPrecision(3)+'M';if(a>=1e4)return (v/1e3).toPrecision(3)+'k';if(a>=100)return v.toFixed(0);if(a>=1)return v.toPrecision(3);if(a===0)return '0';return v.toPrecision(2);}
function pctLabel(x){var p=100*(1-1/x);if(p<=0)return '0%';var d=Math.max(0,Math.round(Math.log10(x))-2);return p.toFixed(d)+'%';}
function ticks(lo,hi,log){var t=[];var inside=function(v){return v>=lo*0.999&&v<=hi*1.001;};if(log){var a=Math.floor(Math.log10(lo)),b=Math.ceil(Math.log10(hi));for(var i=a;i<=b;i++){t.push(Math.pow(10,i));}t=t.filter(inside);if(t.length<3){t=[];for(var j=a;j<=b;j++){[1,2,5].forEach(function(m){t.push(m*Math.pow(10,j));});}t=t.filter(inside);}return t;}
 var span=hi-lo||1,step=Math.pow(10,Math.floor(Math.log10(span/5)));[1,2,5,10].some(function(m){if(span/(step*m)<=6){step*=m;return true;}return false;});
 for(var v=Math.ceil(lo/step)*step;v<=hi+step*1e-9;v+=step)t.push(v);return t;}
function scale(lo,hi,a,b,log){if(log){var l0=Math.log10(lo),l1=Math.log10(hi);if(l1===l0){l1+=1;}return function(v){return a+(Math.log10(v)-l0)/(l1-l0)*(b-a);};}
 if(hi===lo){hi=lo+1;}return function(v){return a+(v-lo)/(hi-lo)*(b-a);};}
function range(vals,log){var lo=Infinity,hi=-Infinity;vals.forEach(function(v){if(v<lo)lo=v;if(v>hi)hi=v;});
 if(log){if(lo===hi){lo/=2;hi*=2;}return [lo/1.1,hi*1.1];}if(lo>0&&lo<hi*0.5)lo=0;if(lo===hi){lo=lo-1;hi=hi+1;}var pad=(hi-lo)*0.05;return [lo<0?lo-pad:lo,hi+pad];}
function drawChart(c,box){
 var W=560,H=320,L=64,R=16,T=12,B=44,n=0;var svg=sv('svg',{width:W,height:H+22*Math.ceil(c.series.length/3),viewBox:'0 0 '+W+' '+(H+22*Math.ceil(c.series.length/3))});
 var xs=[],ys=[];c.series.forEach(function(s){s.points.forEach(function(p){xs.push(p[0]);ys.push(p[1]);});});
 var xr=range(xs,c.xlog),yr=range(ys,c.ylog);var X=scale(xr[0],xr[1],L,W-R,c.xlog),Y=scale(yr[0],yr[1],H-B,T,c.ylog);
 svg.appendChild(sv('rect',{x:L,y:T,width:W-L-R,height:H-T-B,fill:'none',stroke:'#999'}));
 ticks(yr[0],yr[1],c.ylog).forEach(function(v){var y=Y(v);svg.appendChild(sv('line',{x1:L,x2:W-R,y1:y,y2:y,stroke:'#eee'}));svg.appendChild(sv('text',{x:L-4,y:y+4,'text-anchor':'end','font-size':11},fmt(v)));});
 ticks(xr[0],xr[1],c.xlog).forEach(function(v){var x=X(v);svg.appendChild(sv('line',{x1:x,x2:x,y1:T,y2:H-B,stroke:'#eee'}));svg.appendChild(sv('text',{x:x,y:H-B+14,'text-anchor':'middle','font-size':11},c.xkind==='percentile'?pctLabel(v):fmt(v)));});
 svg.appendChild(sv('text',{x:(L+W-R)/2,y:H-8,'text-anchor':'middle','font-size':12},c.xlabel));
 svg.appendChild(sv('text',{x:14,y:(T+H-B)/2,'text-anchor':'middle','font-size':12,transform:'rotate(-90 14 '+((T+H-B)/2)+')'},c.ylabel));
 c.series.forEach(function(s,i){var col=COLORS[i%COLORS.length];
  if(!s.only_markers){var d=s.points.map(function(p,j){return (j?'L':'M')+X(p[0]).toFixed(1)+' '+Y(p[1]).toFixed(1);}).join(' ');
   var path=sv('path',{d:d,fill:'none',stroke:col,'stroke-width':1.8});if(s.dash)path.setAttribute('stroke-dasharray','6 4');path.setAttribute('class','series');svg.appendChild(path);}
  if(c.markers||s.only_markers||s.points.length===1){s.points.forEach(function(p){svg.appendChild(sv('circle',{cx:X(p[0]),cy:Y(p[1]),r:3.5,fill:col,'class':'marker'}));});}
  n+=s.points.length;
  var lx=L+(i%3)*165,ly=H+6+22*Math.floor(i/3);svg.appendChild(sv('rect',{x:lx,y:ly,width:14,height:4,fill:col}));
  svg.appendChild(sv('text',{x:lx+18,y:ly+6,'font-size':11},s.name.length>26?s.name.slice(0,25)+'…':s.name));});
 box.appendChild(svg);return n;}
function drawTimeline(c,box){
 var W=1100,rowH=4,L=60,R=16,T=10,B=36,bars=c.bars,H=T+B+bars.length*rowH;var svg=sv('svg',{width:W,height:H,viewBox:'0 0 '+W+' '+H,'class':'timeline'});
 var lo=Infinity,hi=-Infinity;bars.forEach(function(b){for(var k=1;k<=5;k++){if(b[k]!==null){lo=Math.min(lo,b[k]);hi=Math.max(hi,b[k]);}}});
 var X=scale(lo,hi,L,W-R,false),n=0;
 ticks(lo,hi,false).forEach(function(v){var x=X(v);svg.appendChild(sv('line',{x1:x,x2:x,y1:T,y2:H-B,stroke:'#eee'}));svg.appendChild(sv('text',{x:x,y:H-B+14,'text-anchor':'middle','font-size':11},fmt(v)));});
 svg.appendChild(sv('text',{x:(L+W-R)/2,y:H-6,'text-anchor':'middle','font-size':12},'time since run start (s)'));
 bars.forEach(function(b,i){var y=T+i*rowH;
  function seg(a,z,col){if(a===null||z===null)return;var w=Math.max(X(z)-X(a),0.8);svg.appendChild(sv('rect',{x:X(a),y:y,width:w,height:rowH-1,fill:col,'class':'bar'}));n++;}
  if(!b[6]){seg(b[1],b[5],'#d62728');return;}
  seg(b[1],b[2],'#bbb');seg(b[2],b[3],'#ff7f0e');seg(b[3],b[4],'#1f77b4');});
 box.appendChild(svg);return n;}
function drawChanges(c,box){
 var W=620,rowH=22,L=210,R=20,T=10,B=30,H=T+B+c.rows.length*rowH;var svg=sv('svg',{width:W,height:H,viewBox:'0 0 '+W+' '+H});
 var vals=[0];c.rows.forEach(function(r){[r[1],r[2],r[3]].forEach(function(v){if(v!==null)vals.push(v*100);});});
 var xr=range(vals,false),X=scale(xr[0],xr[1],L,W-R,false),n=0;
 svg.appendChild(sv('line',{x1:X(0),x2:X(0),y1:T,y2:H-B,stroke:'#999'}));
 ticks(xr[0],xr[1],false).forEach(function(v){svg.appendChild(sv('text',{x:X(v),y:H-B+14,'text-anchor':'middle','font-size':11},fmt(v)+'%'));});
 c.rows.forEach(function(r,i){var y=T+i*rowH+rowH/2;var col=r[5]==='REGRESSION'?'#d62728':(r[5]==='better'?'#2ca02c':'#555');
  svg.appendChild(sv('text',{x:L-8,y:y+4,'text-anchor':'end','font-size':11},r[0]));
  if(r[2]!==null&&r[3]!==null)svg.appendChild(sv('line',{x1:X(r[2]*100),x2:X(r[3]*100),y1:y,y2:y,stroke:col,'stroke-width':2}));
  svg.appendChild(sv('circle',{cx:X(r[1]*100),cy:y,r:4,fill:col,'class':'marker'}));n++;});
 box.appendChild(svg);return n;}
var data=JSON.parse(document.getElementById('page-data').textContent);
var app=document.getElementById('app');
app.appendChild(el('h1',{},data.title));
data.subtitle.forEach(function(s){app.appendChild(el('p',{'class':'sub'},s));});
var drawn=0,charts=0;
data.sections.forEach(function(s){
 if(s.type==='table'){app.appendChild(el('h2',{},s.title));var t=el('table');var hr=el('tr');s.head.forEach(function(h){hr.appendChild(el('th',{},h));});t.appendChild(hr);
  s.rows.forEach(function(r,i){var tr=el('tr',s.classes[i]?{'class':s.classes[i]}:{});r.forEach(function(c){tr.appendChild(el('td',{},c));});t.appendChild(tr);});app.appendChild(t);}
 else if(s.type==='note'){app.appendChild(el('p',{'class':'note'},s.text));}
 else{var box=el('div',{'class':'chart'+(s.type==='timeline'?' wide':'')});box.appendChild(el('h2',{},s.title));
  var n=s.type==='chart'?drawChart(s,box):s.type==='timeline'?drawTimeline(s,box):drawChanges(s,box);
  box.dataset.points=String(n);charts++;if(n>0)drawn++;if(s.note)box.appendChild(el('p',{'class':'note'},s.note));app.appendChild(box);}
});
document.body.dataset.charts=String(charts);document.body.dataset.chartsDrawn=String(drawn);document.body.dataset.rendered='ok';
})();
"""
