"""Sweep views: one row of headline figures per result, repeats folded into mean and 95 % CI,
and the sweep table (setting x load -> throughput, goodput, TTFT, ITL, TPOT, server peaks).

Pure: results and summaries in, dicts and text out. `harness.orchestrate.sweep` runs the points and writes
`summary.json`; `report SUMMARY.json` and `compare` read it back through these functions.
"""

from __future__ import annotations

import math
from typing import Any

from harness.analysis.numbers import fmt_number
from harness.analysis.server_metrics import GAUGES

SUMMARY_KIND = "sweep_summary"
SUMMARY_SCHEMA_VERSION = 1

# Figures kept per point: key -> (label, unit, how to read it from a result).
POINT_METRICS: tuple[tuple[str, str], ...] = (
    ("offered_requests_per_s", "offered req/s"),
    ("requests_per_s", "req/s"),
    ("output_tokens_per_s", "out tok/s"),
    ("total_tokens_per_s", "total tok/s"),
    ("goodput_requests_per_s", "goodput req/s"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p99_ms", "TTFT p99 ms"),
    ("ttft_from_schedule_p99_ms", "TTFT sched p99 ms"),
    ("itl_p99_ms", "ITL p99 ms"),
    ("tpot_mean_ms", "TPOT mean ms"),
    ("e2e_p99_ms", "E2E p99 ms"),
    ("tokens_per_s_per_user", "tok/s/user"),
    ("error_share", "errors"),
    ("peak_running", "peak running"),
    ("peak_waiting", "peak waiting"),
)
TABLE_COLUMNS = (
    "offered_requests_per_s",
    "output_tokens_per_s",
    "goodput_requests_per_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "ttft_from_schedule_p99_ms",
    "itl_p99_ms",
    "tpot_mean_ms",
    "peak_running",
    "peak_waiting",
)

# Two-sided 97.5 % quantiles of Student's t for n-1 degrees of freedom (n = 2..30); beyond: 1.96.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
)


def t975(dof: int) -> float:
    """The 97.5 % quantile of Student's t with `dof` degrees of freedom (>= 1)."""
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


# Names a /metrics scrape may give the running and waiting gauges (vLLM, llama.cpp, ours).
def server_series(result: dict[str, Any]) -> dict[str, list[list[float]]]:
    """Running, waiting and KV-usage time series ([t_s, value] pairs) from the result's
    `server_metrics.series` (the scraper's gauges per poll, named as in
    `harness.analysis.server_metrics.GAUGES`); empty lists where the target published none."""
    sm = result.get("server_metrics") or {}
    series = sm.get("series") if isinstance(sm, dict) else None
    out: dict[str, list[list[float]]] = {"running": [], "waiting": [], "kv_usage": []}
    if not isinstance(series, dict):
        return out
    times, gauges = series.get("t_s") or [], series.get("gauges") or {}
    wanted = {"running": "running", "waiting": "waiting", "kv_cache_usage_pct": "kv_usage"}
    for names in GAUGES.values():
        for role, metric in names.items():
            values = gauges.get(metric)
            if role in wanted and isinstance(values, list) and not out[wanted[role]]:
                out[wanted[role]] = [
                    [float(t), float(v)]
                    for t, v in zip(times, values, strict=False)
                    if isinstance(v, int | float)
                ]
    return out


def _peak(result: dict[str, Any], name: str, series: dict[str, list[list[float]]]) -> float | None:
    sm = result.get("server_metrics") or {}
    peaks = sm.get("peaks") if isinstance(sm, dict) else None
    if isinstance(peaks, dict):
        for k, v in peaks.items():
            if name in k and isinstance(v, dict) and isinstance(v.get("max"), int | float):
                return float(v["max"])
    vals = [v for _, v in series[name]]
    return max(vals) if vals else None


def offered_rate(result: dict[str, Any]) -> float:
    """Requests per second the plan offered in the measured phases: arrivals over the phases'
    planned durations (the measured window also holds the final drain, so it would understate)."""
    from harness.units import parse_duration_s

    reqs = result["summary"]["requests"]["planned_or_due"]
    planned = 0.0
    spec = (result.get("scenario") or {}).get("phases") or []
    for ph, sp in zip(result["phases"], spec, strict=False):
        if ph["warmup"]:
            continue
        try:
            planned += parse_duration_s(sp.get("duration"), allow_zero=False)
        except ValueError:
            planned = 0.0
            break
    window = planned or result["summary"]["throughput"]["window_s"]
    return reqs / window if window > 0 else 0.0


def point_metrics(result: dict[str, Any]) -> dict[str, float | None]:
    """The headline figures of one result (measured phases), keyed as POINT_METRICS."""
    s = result["summary"]
    lat, thr = s["latency_ms"], s["throughput"]
    tpot = lat["tpot"]["mean"]
    failed = s["requests"]["failed"] + s["requests"].get("not_sent", 0)
    due = s["requests"]["planned_or_due"]
    series = server_series(result)
    return {
        "offered_requests_per_s": offered_rate(result),
        "requests_per_s": thr["requests_per_s"],
        "output_tokens_per_s": thr["output_tokens_per_s"],
        "total_tokens_per_s": thr["total_tokens_per_s"],
        "goodput_requests_per_s": thr["goodput_requests_per_s"],
        "ttft_p50_ms": lat["ttft"]["p50"],
        "ttft_p99_ms": lat["ttft"]["p99"],
        "ttft_from_schedule_p99_ms": lat["ttft_from_schedule"]["p99"],
        "itl_p99_ms": lat["itl"]["p99"],
        "tpot_mean_ms": tpot,
        "e2e_p99_ms": lat["e2e"]["p99"],
        "tokens_per_s_per_user": (1000.0 / tpot) if tpot else None,
        "error_share": failed / due if due else 0.0,
        "peak_running": _peak(result, "running", series),
        "peak_waiting": _peak(result, "waiting", series),
    }


def fold_repeats(runs: list[dict[str, float | None]]) -> dict[str, dict[str, float | int | None]]:
    """Mean and 95 % confidence interval (Student's t over repeats) of each figure."""
    out: dict[str, dict[str, float | int | None]] = {}
    for key, _ in POINT_METRICS:
        vals = [float(v) for r in runs if (v := r.get(key)) is not None]
        n = len(vals)
        if n == 0:
            out[key] = {"mean": None, "ci95_low": None, "ci95_high": None, "n": 0}
            continue
        mean = sum(vals) / n
        if n < 2:
            out[key] = {"mean": mean, "ci95_low": None, "ci95_high": None, "n": n}
            continue
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
        half = t975(n - 1) * sd / math.sqrt(n)
        out[key] = {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half, "n": n}
    return out


def is_summary(doc: dict[str, Any]) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == SUMMARY_KIND


def _cell(m: dict[str, Any]) -> str:
    if m.get("mean") is None:
        return "-"
    s = fmt_number(m["mean"])
    if m.get("ci95_low") is not None:
        s += f" ±{fmt_number((m['ci95_high'] - m['ci95_low']) / 2)}"
    return s


def render_sweep_text(summary: dict[str, Any], markdown: bool = False) -> str:
    """The sweep table: one row per point, TABLE_COLUMNS figures (mean ± CI half-width)."""
    labels = dict(POINT_METRICS)
    sw = summary.get("sweep", {})
    head = ["setting", "load"] + [labels[k] for k in TABLE_COLUMNS]
    rows = []
    for p in summary.get("points", []):
        status = p.get("status", "done")
        cells = [p.get("setting_label", ""), p.get("load_label", "")]
        if status != "done":
            cells += [status] + [""] * (len(TABLE_COLUMNS) - 1)
        else:
            cells += [_cell(p["metrics"].get(k, {})) for k in TABLE_COLUMNS]
        rows.append(cells)
    title = (
        f"sweep {sw.get('name', '?')}: {len(rows)} points, base scenario {sw.get('scenario', '?')}, "
        f"server {sw.get('server_kind', '?')}, repeats {sw.get('repeat', 1)}"
    )
    lines = [title]
    if sw.get("server_kind") == "sim":
        lines.append("(simulated server: figures show the simulator's model, not a real GPU)")
    if markdown:
        lines.append("")
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    else:
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
        ]
        lines.append(
            "  ".join(
                h.rjust(w) if i > 1 else h.ljust(w)
                for i, (h, w) in enumerate(zip(head, widths, strict=True))
            )
        )
        for r in rows:
            lines.append(
                "  ".join(
                    c.rjust(w) if i > 1 else c.ljust(w)
                    for i, (c, w) in enumerate(zip(r, widths, strict=True))
                )
            )
    if any(
        p.get("metrics", {}).get("peak_running", {}).get("mean") is None
        for p in summary.get("points", [])
    ):
        lines.append("peak running/waiting: '-' where the server published no /metrics samples")
    return "\n".join(lines)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points not dominated when both coordinates are better higher (x = total tokens/s,
    y = tokens/s per user), sorted by x."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return sorted(front)
