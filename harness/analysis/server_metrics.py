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
    ceiling     did requests wait, and which limit held them (`find_ceiling`): polls,
                waiting_polls, waiting_share, waiting_max, running_max, kv_cache_usage_pct_max,
                limits {max_num_seqs, max_num_batched_tokens} (where known), held_share {limit:
                share of the waiting polls where it held}, binding [limits held in >= half]
    note        a one-line reading of `ceiling`

Pure: no I/O; the terminal report prints `peaks` and `note`.
"""

from __future__ import annotations

from typing import Any

from harness.analysis.numbers import plural

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

# When is a wait a ceiling? (find_ceiling)
WAIT_SHARE_MIN = 0.10  # requests waited in at least 10 % of the polls: not a passing queue
KV_FULL_PCT = 90.0  # KV cache this full: vLLM preempts or holds new requests near 100 %
BUDGET_FULL_SHARE = 0.90  # mean tokens per step this close to max_num_batched_tokens
BINDING_SHARE = 0.5  # a limit held in at least half of the polls where requests waited
LIMIT_ORDER = ("max_num_seqs", "kv_cache", "max_num_batched_tokens")
LIMIT_NAMES = {  # where target.server's settings name each limit (vLLM, llama.cpp)
    "max_num_seqs": ("max_num_seqs", "parallel", "n_parallel"),
    "max_num_batched_tokens": ("max_num_batched_tokens",),
}
LIMIT_WORDS = {
    "max_num_seqs": "the running set (running at max_num_seqs {seqs})",
    "kv_cache": "the KV cache (at least {kv_full} % used)",
    "max_num_batched_tokens": "the token budget (steps at {budget_share} or more of "
    "max_num_batched_tokens {budget})",
}
LIMIT_BELOW = {
    "max_num_seqs": "running below max_num_seqs {seqs} (peak {run_peak})",
    "kv_cache": "KV cache below {kv_full} % (peak {kv_peak} %)",
    "max_num_batched_tokens": "steps below {budget_share} of max_num_batched_tokens {budget}",
}
LIMIT_UNKNOWN = {
    "max_num_seqs": "max_num_seqs",
    "kv_cache": "KV cache use",
    "max_num_batched_tokens": "max_num_batched_tokens",
}


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
    lines: list[dict[str, Any]],
    t0_wall_s: float | None,
    limits: dict[str, int] | None = None,
    time_scale: float = 1.0,
) -> dict[str, Any] | None:
    """The result's `server_metrics` block, or None when nothing was scraped at all.
    `limits`: the engine's max_num_seqs and max_num_batched_tokens where known
    (`server_limits`), against which `ceiling` judges what held waiting requests.
    `time_scale`: model seconds per wall second (harness.analysis.clock) for the series' times."""
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
    t_s = [round((s["wall_s"] - t0) * time_scale, 3) for s in samples]
    gauges, deltas, totals = _series(samples, names)
    per_step = _tokens_per_step(samples)
    peaks = _peaks(source, gauges)
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
    ceiling = find_ceiling(source, gauges, per_step, limits or {})
    if ceiling is not None:
        out["ceiling"] = ceiling
        out["note"] = ceiling_note(ceiling)
    return out


Series = dict[str, list[float | None]]


def _series(
    samples: list[dict[str, Any]], names: set[str]
) -> tuple[Series, Series, dict[str, float]]:
    """Per metric, poll by poll: the gauges' values, the counters' growth since the previous poll
    (None where the server restarted), and each counter's total growth."""
    gauges: Series = {}
    deltas: Series = {}
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
    return gauges, deltas, totals


def _tokens_per_step(samples: list[dict[str, Any]]) -> list[float | None]:
    """The mean tokens per engine step between consecutive polls (vLLM's iteration histogram)."""
    per_step: list[float | None] = [None]
    for a, b in zip(samples, samples[1:], strict=False):
        ds = b["values"].get(ITER_SUM, 0.0) - a["values"].get(ITER_SUM, 0.0)
        dc = b["values"].get(ITER_COUNT, 0.0) - a["values"].get(ITER_COUNT, 0.0)
        per_step.append(ds / dc if dc > 0 and ds >= 0 else None)
    return per_step


def _peaks(source: str, gauges: Series) -> dict[str, dict[str, float]]:
    """The stats of the gauges the views show (KV-cache usage in percent)."""
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
    return peaks


def server_limits(target: dict[str, Any] | None) -> dict[str, int]:
    """The engine limits a result's target states (`target.server.limits`, which the harness
    writes for the simulator it starts, else the launched server's `settings`): max_num_seqs
    (llama.cpp: `parallel`) and max_num_batched_tokens, where known."""
    server = (target or {}).get("server") or {}
    found: dict[str, int] = {}
    for block in (server.get("settings") or {}, server.get("limits") or {}):
        if not isinstance(block, dict):
            continue
        for key, names in LIMIT_NAMES.items():
            for name in names:
                v = block.get(name)
                if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
                    found[key] = int(v)
    return found


def find_ceiling(
    source: str,
    gauges: dict[str, list[float | None]],
    per_step: list[float | None],
    limits: dict[str, int],
) -> dict[str, Any] | None:
    """Did requests wait, and which limit held them? None when the gauges say nothing.

    Requests waited (waiting > 0) in `waiting_share` of the polls. Where that share is at least
    WAIT_SHARE_MIN, each limit is checked in those polls: the running set at max_num_seqs
    (llama.cpp: --parallel), the KV cache at KV_FULL_PCT or more, the token budget
    (max_num_batched_tokens) filled to BUDGET_FULL_SHARE by the mean tokens per step of the
    interval. A limit that holds in at least BINDING_SHARE of the waiting polls is `binding`."""
    names = GAUGES.get(source, {})
    running = gauges.get(names.get("running", ""))
    waiting = gauges.get(names.get("waiting", ""))
    if running is None or waiting is None:
        return None
    kv = gauges.get(names.get("kv_cache_usage_pct", "")) or gauges.get(OLD_KV_NAME)
    polls = [i for i, w in enumerate(waiting) if w is not None]
    if not polls:
        return None
    waited = [i for i in polls if (waiting[i] or 0) > 0]
    run_max = max((r for r in running if r is not None), default=0.0)
    out: dict[str, Any] = {
        "polls": len(polls),
        "waiting_polls": len(waited),
        "waiting_share": len(waited) / len(polls),
        "waiting_max": max((waiting[i] or 0.0 for i in polls), default=0.0),
        "running_max": run_max,
        "kv_cache_usage_pct_max": (
            None if not kv else max((100.0 * x for x in kv if x is not None), default=None)
        ),
        "limits": dict(limits),
        "held_share": {},
        "binding": [],
    }
    if not waited or out["waiting_share"] < WAIT_SHARE_MIN:
        return out
    checks: dict[str, list[bool]] = {}
    seqs = limits.get("max_num_seqs")
    if seqs:
        checks["max_num_seqs"] = [(running[i] or 0) >= seqs for i in waited]
    if kv:
        checks["kv_cache"] = [
            kv[i] is not None and 100.0 * (kv[i] or 0.0) >= KV_FULL_PCT for i in waited
        ]
    budget = limits.get("max_num_batched_tokens")
    if budget and any(x is not None for x in per_step):
        checks["max_num_batched_tokens"] = [
            i < len(per_step)
            and per_step[i] is not None
            and (per_step[i] or 0.0) >= BUDGET_FULL_SHARE * budget
            for i in waited
        ]
    held = {k: sum(v) / len(v) for k, v in checks.items()}
    out["held_share"] = held
    out["binding"] = [k for k in LIMIT_ORDER if held.get(k, 0.0) >= BINDING_SHARE]
    return out


def ceiling_note(c: dict[str, Any]) -> str:
    """The report's one-line reading of `find_ceiling`'s block."""
    lim = c.get("limits") or {}
    seqs = lim.get("max_num_seqs")
    ran = f"at most {c['running_max']:g} ran at once" + (
        f" (max_num_seqs {seqs:,})" if seqs else ""
    )
    n, k = c["polls"], c["waiting_polls"]
    if k == 0:
        return f"no request waited; {ran}: the server had spare slots"
    waited = (
        f"requests waited in {k} of {plural(n, 'poll')} ({c['waiting_share']:.0%}, up to "
        f"{c['waiting_max']:g})"
    )
    if c["waiting_share"] < WAIT_SHARE_MIN:
        return f"{waited}, under {WAIT_SHARE_MIN:.0%} of the window: a passing queue, no ceiling; {ran}"
    held = c.get("held_share") or {}
    if c.get("binding"):
        parts = [
            f"{LIMIT_WORDS[k].format(**_words(c))} in {held[k]:.0%} of them" for k in c["binding"]
        ]
        return f"{waited}: the ceiling was " + " and ".join(parts)
    unknown = [LIMIT_UNKNOWN[k] for k in LIMIT_ORDER if k not in held]
    seen = [
        LIMIT_BELOW[k].format(**_words(c))
        if held[k] == 0
        else f"{LIMIT_UNKNOWN[k]} at its limit in only {held[k]:.0%} of them"
        for k in LIMIT_ORDER
        if k in held
    ]
    return (
        f"{waited}, but no gauge shows a limit: "
        + "; ".join(seen + [f"{u} unknown" for u in unknown])
        + "; the wait was outside the engine's limits (or between polls)"
    )


def _words(c: dict[str, Any]) -> dict[str, Any]:
    lim = c.get("limits") or {}
    kv = c.get("kv_cache_usage_pct_max")
    return {
        "seqs": f"{lim.get('max_num_seqs', 0):,}",
        "budget": f"{lim.get('max_num_batched_tokens', 0):,}",
        "kv_full": f"{KV_FULL_PCT:g}",
        "kv_peak": "-" if kv is None else f"{kv:.3g}",
        "run_peak": f"{c.get('running_max', 0):g}",
        "budget_share": f"{BUDGET_FULL_SHARE:.0%}",
    }
