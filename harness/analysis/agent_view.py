"""The terminal view of agent sessions (the result's `agents` block, harness.analysis.agents):
how sessions ended, their time split into model, tool and sub-agent time, and TTFT, TTFO and
time to the first tool call by step."""

from __future__ import annotations

from typing import Any

from harness.analysis.numbers import fmt_count, fmt_number, text_table

TIME_ROWS = (
    ("agent_time_ms", "agent time (end to end)"),
    ("model_time_ms", "  model time"),
    ("tool_time_ms", "  tool time"),
    ("subagent_time_ms", "  sub-agent time"),
)


def ended_text(ag: dict[str, Any]) -> str:
    e = ag["ended"]
    return ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in e.items() if v) or "none ended"


def step_rows(steps: list[dict[str, Any]], label: str) -> list[list[str]]:
    rows = []
    for t in steps:
        share = t["tool_call_share"]
        pm = t["prompt_tokens_mean"]
        rows.append(
            [f"{label} {t['step']}", fmt_count(t["requests"])]
            + ["-" if share is None else f"{share:.0%}"]
            + [fmt_number(t[k]["p50"]) for k in ("ttft_ms", "ttfo_ms", "ttft_tool_ms")]
            + [fmt_number(t["ttft_ms"]["p99"])]
            + [
                "-" if pm is None else f"{pm:,.0f}",
                fmt_number(t["ttft_ms_per_1k_prompt_tokens_p50"]),
            ]
            + ["-" if t.get("cached_share") is None else f"{t['cached_share']:.0%}"]
        )
    return rows


STEP_HEAD = [
    "by step",
    "requests",
    "tool call",
    "TTFT p50",
    "TTFO p50",
    "tool p50",
    "TTFT p99",
    "prompt tok",
    "ms/1k tok",
    "cached",
]


def render_agents(ag: dict[str, Any] | None) -> list[str]:
    """Agent runs: sessions, their time split, and latencies by step (ms)."""
    if not ag:
        return []
    share = ag["model_time_share"]
    lines = [
        f"  agent sessions: {ag['sessions']} ({ag['parent_requests']} steps"
        + (f" + {ag['child_requests']} sub-agent steps" if ag["child_requests"] else "")
        + f", {ag['steps_per_session_mean']:.2f} steps per session, at most "
        f"{ag['steps_per_session_max']}); ended: {ended_text(ag)}"
        + ("" if share is None else f"; model time {share:.0%} of agent time")
    ]
    lines += text_table(
        ["per session (ms)", "count", "mean", "p50", "p90", "p99", "max"],
        [
            [label, fmt_count(ag[k]["count"])]
            + [fmt_number(ag[k][q]) for q in ("mean", "p50", "p90", "p99", "max")]
            for k, label in TIME_ROWS
            if k != "subagent_time_ms" or ag["child_requests"]
        ],
    )
    rows = step_rows(ag["by_step"], "step") + step_rows(ag["child_by_step"], "sub step")
    lines += text_table(STEP_HEAD, rows)
    return lines
