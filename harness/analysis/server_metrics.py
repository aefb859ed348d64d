"""Summarise the journal's `/metrics` samples for the result: a time series and peaks.

Input: the journal's `server_metrics` lines (see harness.server.scrape). Output, stored as the
result's `server_metrics`:

    available   false with `reason` when the target had no /metrics
    source      "vllm" or "llamacpp" (by metric prefix)
    series      t_s (seconds since the run's start) and, per poll, the gauges (running, waiting,
                KV-cache usage, llama.cpp's gauges) and the per-interval deltas of the counters
                (preemptions, generation and prompt tokens, ...); `tokens_per_step` is the mean
                of vLLM's iteration_tokens histogram over each interval
    peaks       {name: {max, mean}} for running and waiting requests and KV usage (percent)
    totals      counter increases over the whole run
    config      vllm:cache_config_info's labels, when published
    note        a one-line reading: did requests wait for a free slot?

Pure: no I/O; the terminal report prints `peaks` and `note`.
"""

from __future__ import annotations

from typing import Any

GAUGES = {
    "vllm": {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_cache_usage_pct": "vllm:kv_cache_usage_perc",
    },
    "llamacpp": {
        "running": "llamacpp:requests_processing",
        "waiting": "llamacpp:requests_deferred",
    },
}
OLD_KV_NAME = "vllm:gpu_cache_usage_perc"  # vLLM before V1 used this name
ITER_SUM, ITER_COUNT = "vllm:iteration_tokens_total_sum", "vllm:iteration_tokens_total_count"


def _source(names: set[str]) -> str:
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("llamacpp:") for n in names):
        return "llamacpp"
    return "unknown"


def _is_counter(name: str) -> bool:
    return name.endswith("_total") and name not in (ITER_SUM, ITER_COUNT)


def _stats(xs: list[float | None]) -> dict[str, float] | None:
    vals = [x for x in xs if x is not None]
    if not vals:
        return None
    return {"max": max(vals), "mean": sum(vals) / len(vals)}


def summarise_server_metrics(
    lines: list[dict[str, Any]], t0_wall_s: float | None
) -> dict[str, Any] | None:
    """The result's `server_metrics` block, or None when nothing was scraped at all."""
    if not lines:
        return None
    samples = [ln for ln in lines if isinstance(ln.get("values"), dict)]
    if not samples:
        gone = next((ln for ln in lines if ln.get("available") is False), None)
        reason = gone.get("reason") if gone else "every poll failed"
        errors = [ln.get("error") for ln in lines if ln.get("error")]
        return {"available": False, "reason": reason or (errors[0] if errors else "unknown")}
    samples.sort(key=lambda ln: ln["wall_s"])
    t0 = t0_wall_s if t0_wall_s is not None else samples[0]["wall_s"]
    names: set[str] = set()
    for s in samples:
        names.update(s["values"])
    source = _source(names)
    t_s = [round(s["wall_s"] - t0, 3) for s in samples]
    gauges: dict[str, list[float | None]] = {}
    deltas: dict[str, list[float | None]] = {}
    totals: dict[str, float] = {}
    for name in sorted(names):
        col = [s["values"].get(name) for s in samples]
        if name in (ITER_SUM, ITER_COUNT):
            continue
        if _is_counter(name):
            d: list[float | None] = [None]
            for a, b in zip(col, col[1:], strict=False):
                d.append(
                    None if a is None or b is None or b < a else b - a
                )  # b < a: server restarted
            deltas[name] = d
            totals[name] = sum(x for x in d if x is not None)
        else:
            gauges[name] = col
    per_step: list[float | None] = [None]
    for a, b in zip(samples, samples[1:], strict=False):
        ds = b["values"].get(ITER_SUM, 0.0) - a["values"].get(ITER_SUM, 0.0)
        dc = b["values"].get(ITER_COUNT, 0.0) - a["values"].get(ITER_COUNT, 0.0)
        per_step.append(ds / dc if dc > 0 and ds >= 0 else None)
    peaks: dict[str, dict[str, float]] = {}
    for label, name in GAUGES.get(source, {}).items():
        gauge = gauges.get(name) or (
            gauges.get(OLD_KV_NAME) if label == "kv_cache_usage_pct" else None
        )
        if gauge is None:
            continue
        if label == "kv_cache_usage_pct":
            gauge = [None if x is None else 100.0 * x for x in gauge]
        st = _stats(gauge)
        if st is not None:
            peaks[label] = st
    info: dict[str, Any] = next((s["info"] for s in samples if s.get("info")), {})
    out: dict[str, Any] = {
        "available": True,
        "source": source,
        "url": samples[0].get("url"),
        "polls": len(samples),
        "failed_polls": sum(1 for ln in lines if ln.get("error")),
        "interval_s": ((t_s[-1] - t_s[0]) / (len(t_s) - 1)) if len(t_s) > 1 else None,
        "series": {
            "t_s": t_s,
            "gauges": gauges,
            "deltas": deltas,
            **({"tokens_per_step": per_step} if any(x is not None for x in per_step) else {}),
        },
        "peaks": peaks,
        "totals": totals,
        "config": info.get("vllm:cache_config_info", info),
    }
    run, wait = peaks.get("running"), peaks.get("waiting")
    if run and wait:
        if wait["max"] > 0:
            out["note"] = (
                f"requests waited (up to {wait['max']:g}) while {run['max']:g} ran: the server's "
                "running set (max_num_seqs / --parallel) or its KV cache was the ceiling"
            )
        else:
            out["note"] = (
                f"no request waited; at most {run['max']:g} ran at once: the server had spare slots"
            )
    return out
