"""The result page's parts for what was offered and how it went in conversations: arrivals and
lengths (result.workload_view), sessions, agents' steps, and the prefix cache per request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.analysis.agent_view import STEP_HEAD, TIME_ROWS, ended_text, step_rows
from harness.analysis.html_page import chart, table
from harness.analysis.html_safe import series_xy
from harness.analysis.numbers import fmt_number
from harness.workload.curves import LOG_SPREAD


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
        _by_position(
            "TTFT by turn",
            ("turn_index", "turn index"),
            turns,
            by,
            "later turns carry the history: with prefix caching their TTFT per prompt token falls",
        ),
    ]


def _by_position(
    title: str,
    x: tuple[str, str],
    rows: list[dict[str, Any]],
    by: list[tuple[str, Callable[[dict[str, Any]], float | None], bool]],
    note: str,
) -> dict[str, Any]:
    """A chart of latencies (ms) by a turn's or step's position: `x` is (its key, its label);
    one line per (name, figure of a row, dashed) in `by`."""
    lines = [{"name": n, "points": [[t[x[0]], f(t)] for t in rows], "dash": d} for n, f, d in by]
    return chart(title, x[1], "ms", lines, markers=True, note=note)


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
        _by_position(
            "Agent: TTFT by step",
            ("step", "step"),
            steps,
            by,
            "each step carries the history: with prefix caching its TTFT per prompt token falls",
        ),
    ]


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _prefix_phase_table(r: dict[str, Any]) -> dict[str, Any]:
    """Hit share per phase and over the summary."""
    blocks = [b for b in [*r.get("phases", []), r["summary"]] if b.get("prefix_cache")]
    rows = [
        [
            str(b["name"]),
            str(b["prefix_cache"]["requests"]),
            str(b["prefix_cache"]["requests_with_hits"]),
            _share(b["prefix_cache"]["token_hit_share"]),
        ]
        + [_share(b["prefix_cache"]["hit_share"].get(k)) for k in ("mean", "p10", "p50", "p90")]
        for b in blocks
    ]
    return table(
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
        rows,
    )


def _prefix_ttft_sections(pc: dict[str, Any]) -> list[dict[str, Any]]:
    """TTFT by cached share of the prompt: a table of the bins and its chart."""
    bins = [b for b in pc["ttft_by_hit_share"] if b["requests"]]
    rows = [
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
    return [
        table(
            "TTFT by cached share of the prompt (ms, summary)",
            ["hit share", "requests", "TTFT p50", "TTFT p90", "uncached prompt tokens"],
            rows,
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
    out = [_prefix_phase_table(r), *_prefix_ttft_sections(pc)]
    if pc.get("by_turn"):
        out.append(
            table(
                "Hit share by turn",
                ["turn", "requests", "hit share mean", "cached tokens mean"],
                [
                    [
                        str(t["turn_index"]),
                        str(t["requests"]),
                        _share(t["hit_share_mean"]),
                        fmt_number(t["cached_tokens_mean"]),
                    ]
                    for t in pc["by_turn"]
                ],
            )
        )
    return out
