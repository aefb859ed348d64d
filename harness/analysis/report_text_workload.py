"""The terminal report's workload lines: what was offered (the arrival rate over time and the
length histograms as one-line sparklines, a trace's own curve) and multi-turn sessions (TTFT
by turn). Part of `harness.analysis.report_text`, which re-exports them."""

from __future__ import annotations

from typing import Any

from harness.analysis.numbers import fmt_count, fmt_number, text_table


def render_sessions(ss: dict[str, Any] | None) -> list[str]:
    """Multi-turn runs: sessions apart from requests, and TTFT by turn index."""
    if not ss:
        return []
    lines = [
        f"  sessions: {ss['sessions']} ({ss['requests']} requests, {ss['turns_per_session_mean']:.2f} turns "
        f"per session, at most {ss['turns_per_session_max']}); {ss['sessions_with_a_failed_turn']} ended "
        "by a failed turn",
    ]
    rows = []
    for t in ss["ttft_by_turn"]:
        q = t["ttft_ms"]
        pm = t["prompt_tokens_mean"]
        rows.append(
            [f"turn {t['turn_index']}", fmt_count(t["requests"])]
            + [fmt_number(q[k]) for k in ("mean", "p50", "p90", "p99")]
            + [
                "-" if pm is None else f"{pm:,.0f}",
                fmt_number(t["ttft_ms_per_1k_prompt_tokens_p50"]),
            ]
        )
    lines += text_table(
        ["TTFT by turn", "requests", "mean", "p50", "p90", "p99", "prompt tok", "p50 ms/1k tok"],
        rows,
    )
    return lines


SPARK = " .:-=+*#%@"  # ten levels, plain ASCII: a curve in one line of a terminal


def sparkline(values: list[float] | list[int], width: int = 60) -> str:
    """One character per value (averaged down to `width`), scaled to the largest."""
    v = [float(x) for x in values]
    if len(v) > width:
        k = -(-len(v) // width)
        v = [sum(v[i : i + k]) / len(v[i : i + k]) for i in range(0, len(v), k)]
    top = max(v, default=0.0)
    if top <= 0:
        return SPARK[0] * len(v)
    return "".join(SPARK[min(int(x / top * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)] for x in v)


def render_workload_view(v: dict[str, Any] | None) -> list[str]:
    """What was offered: the arrival rate over time, the length histograms, a trace's own curve."""
    if not v:
        return []
    b = v["bin_s"]
    lines = [
        f"  workload offered: mean {v['offered_mean_per_s']:.3g} req/s, peak {v['offered_peak_per_s']:.3g} req/s "
        f"in {b:g} s bins; sent peak {v['sent_peak_per_s']:.3g} req/s",
        f"    offered |{sparkline(v['offered_per_s'])}|",
        f"    sent    |{sparkline(v['sent_per_s'])}|",
    ]
    if v.get("sessions_started_per_s"):
        lines.append(f"    sessions|{sparkline(v['sessions_started_per_s'])}| (started)")
    for key, label in (("prompt_tokens", "prompt tokens"), ("output_tokens", "output tokens")):
        h = v.get(key) or {}
        if len(h.get("edges") or []) < 2:
            continue
        lines.append(
            f"  {label} {h['edges'][0]}..{h['edges'][-1] - 1}: planned |{sparkline(h['planned'])}|  "
            f"server |{sparkline(h['server'])}|"
        )
    for name, t in (v.get("traces") or {}).items():
        r = t.get("shape_correlation")
        lines.append(
            f"  trace phase {name}: the trace's own rate (trace time) vs sent (x{1 / t['time_scale']:.3g}), "
            f"{t['bin_s']:g} s bins" + ("" if r is None else f", shape correlation {r:.3f}")
        )
        lines.append(
            f"    trace   |{sparkline(t['trace_per_s'])}| peak {max(t['trace_per_s'], default=0):.3g}/s"
        )
        lines.append(
            f"    sent    |{sparkline(t['sent_per_s'])}| peak {max(t['sent_per_s'], default=0):.3g}/s"
        )
    return lines
