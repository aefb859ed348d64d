"""The result's HTML page: summary, latency and SLO tables, percentile curves, time series,
the server's /metrics and a per-request timeline (`report R.json --html`, `run --html`).

The page's parts for what was offered, sessions, agents and the prefix cache are in
harness.analysis.html_workload; the server's view and failures in harness.analysis.html_server;
the page kit in harness.analysis.html_page; the banner of a result not to be trusted in
harness.analysis.html_trust.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.clock import model_columns, result_clock_note, tag_titles
from harness.analysis.html_page import chart, keep_drawn, page, table
from harness.analysis.html_safe import series_xy
from harness.analysis.html_server import failure_sections, server_view_sections
from harness.analysis.html_trust import result_banner, stale_line
from harness.analysis.html_workload import (
    agent_sections,
    prefix_cache_sections,
    session_sections,
    workload_sections,
)
from harness.analysis.numbers import fmt_number
from harness.analysis.report_text import prediction_lines, shown_latency
from harness.analysis.sweep_report import (
    offered_rate,
    server_series,
)
from harness.catalogue import METRICS
from harness.record import hist

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


def _summary_table(r: dict[str, Any]) -> dict[str, Any]:
    s = r["summary"]
    t, req = s["throughput"], s["requests"]
    return table(
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


def _latency_table(s: dict[str, Any]) -> dict[str, Any]:
    """The summary's latency figures, one row per metric the result has (the catalogue's order)."""
    itl_label = "ITL (per chunk)" if (s.get("tokens") or {}).get("itl_per") == "chunk" else "ITL"
    return table(
        "Latency (ms)",
        ["metric", *STATS],
        [
            [itl_label if k == "itl" else label]
            + [
                fmt_number(s["latency_ms"][k][c]) if c != "count" else str(s["latency_ms"][k][c])
                for c in STATS
            ]
            for k, label in LAT_ROWS
            if shown_latency(s, k)  # not a row the result predates, nor an empty channel
        ],
    )


def _slo_and_warning_tables(r: dict[str, Any]) -> list[dict[str, Any]]:
    slo_rows, classes = [], []
    for v in r["summary"].get("slo") or []:
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
    out = []
    if slo_rows:
        out.append(
            table("SLO verdicts", ["SLO", "limit ms", "value", "verdict"], slo_rows, classes)
        )
    warns = list((r.get("client") or {}).get("warnings") or [])
    if warns:
        out.append(table("Warnings", ["warning"], [[w] for w in warns]))
    return out


PERCENTILE_CHARTS = (  # (histogram from sent, from schedule or None, label)
    ("ttft", "ttft_from_schedule", "TTFT"),
    ("e2e", "e2e_from_schedule", "E2E"),
    ("itl", None, "ITL (per token)"),
    ("tpot", None, "TPOT"),
)


def _percentile_charts(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Latency by percentile, from sent and (dashed) from schedule, per metric."""
    hs = (r.get("histograms") or {}).get("summary") or {}
    out = []
    for a, b, label in PERCENTILE_CHARTS:
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
    return out


def _timeseries_charts(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Offered vs achieved load, in flight, output tokens/s, errors and 429s over the run."""
    ts = r.get("timeseries") or {}
    step = ts.get("step_s") or 1.0

    def per_s(key: str, per: float | None = None) -> Any:
        return series_xy(ts.get(key) or [], step, step if per is None else per)

    def one(title: str, ylabel: str, name: str, key: str, per: float | None = None) -> Any:
        return chart(title, "time (s)", ylabel, [{"name": name, "points": per_s(key, per)}])

    out = [
        chart(
            "Offered vs achieved load",
            "time (s)",
            "requests/s",
            [
                {"name": "offered (intended sends)", "points": per_s("offered"), "dash": True},
                {"name": "sent", "points": per_s("sent")},
                {"name": "completed", "points": per_s("completed")},
            ],
        ),
        one("In-flight requests", "requests", "in flight (client)", "in_flight", 1.0),
        one("Output tokens/s", "tokens/s", "output tokens/s", "output_tokens"),
    ]
    if any(ts.get("errors") or []):
        out.append(one("Errors", "errors/s", "errors", "errors"))
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
    return out


def _server_metrics_charts(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The server's running/waiting requests and KV cache use from its /metrics, or a note."""
    srv = server_series(r)
    out = []
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
    return out


def result_sections(r: dict[str, Any], result_path: Path | None = None) -> list[dict[str, Any]]:
    """The result page's sections, in reading order: the summary, failures, latency tables, the
    server's view, sessions, agents, the prefix cache, SLOs and warnings, percentile curves,
    time series, the workload, the server's /metrics and the per-request timeline."""
    s = r["summary"]
    out: list[dict[str, Any]] = [_summary_table(r), *failure_sections(r)]
    if s.get("embeddings"):  # an embeddings run has no token stamps: its own table
        out.append(_embeddings_table(s))
    else:
        out.append(_latency_table(s))
    out += server_view_sections(r)
    out += session_sections(r)
    out += agent_sections(r)
    out += prefix_cache_sections(r)
    out += _slo_and_warning_tables(r)
    out += _percentile_charts(r)
    out += _timeseries_charts(r)
    out += workload_sections(r)
    out += _server_metrics_charts(r)
    tl = timeline(r, result_path)
    out.append(
        tl if tl else {"type": "note", "text": "Per-request timeline: the journal is not available"}
    )
    return keep_drawn(out)


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
    stale = stale_line(r)  # stray bytes on kept-alive connections, as the terminal says
    if stale is not None:
        sub.append(stale)
    clock = r.get("clock") if isinstance(r.get("clock"), dict) else None
    if clock:
        sub.append(result_clock_note(r) or "")
    sub[:0] = prediction_lines(r.get("prediction"))  # first: a prediction, not a measurement
    sections = tag_titles(result_sections(r, result_path), (clock or {}).get("speedup"))
    return page(f"harness: {r['scenario_name']}", sub, sections, result_banner(r))
