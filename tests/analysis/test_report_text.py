"""The terminal report: no table or row that repeats another, columns that never run together."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from harness.analysis.report_text import render_server_view, render_text

V2 = Path(__file__).parent.parent / "data" / "results" / "v2.json"


def _result() -> dict:
    return json.loads(V2.read_text(encoding="utf-8"))


def test_one_measured_phase_is_not_printed_again_as_the_summary():
    """Issue 24: with one measured phase the summary table repeated the phase's table."""
    text = render_text(_result())
    assert "summary (measured phases)" not in text
    assert text.count("TTFT from schedule") == 2  # the warm-up's table and main's, once each
    assert "the only measured phase: the summary" in text


def test_two_measured_phases_keep_their_summary():
    r = _result()
    r["phases"][0]["warmup"] = False  # now two measured phases: the summary is its own table
    text = render_text(r)
    assert "summary (measured phases)" in text


def test_inter_chunk_is_shown_only_where_it_differs_from_itl():
    """Issue 24: an `inter-chunk` row identical to ITL (one token per chunk)."""
    r = _result()
    assert r["summary"]["latency_ms"]["inter_chunk"] == r["summary"]["latency_ms"]["itl"]
    assert "inter-chunk" not in render_text(r)
    r2 = copy.deepcopy(r)
    for block in (*r2["phases"], r2["summary"]):
        block["latency_ms"]["inter_chunk"]["p99"] = 99.0
    assert "inter-chunk" in render_text(r2)


def test_server_view_columns_fit_their_widest_cell():
    """Issue 24: `9,932 [5000-10000]14,470 [10000-15000]` and `16,19119,464`."""
    sv = {
        "window": {"start_s": 0.0, "end_s": 60.0},
        "client_ms": {
            "e2e": {"count": 16191, "mean": 19464.0, "p50": 9932.0, "p90": 14470.0, "p99": 19000.0}
        },
        "latency_ms": {
            "e2e": {
                "count": 16191,
                "mean": 19464.0,
                "p50": 9932.0,
                "p90": 14470.0,
                "p99": 19000.0,
                "bucket_ms": {
                    "p50": [5000.0, 10000.0],
                    "p90": [10000.0, 15000.0],
                    "p99": [15000.0, 20000.0],
                },
            }
        },
    }
    lines = render_server_view(sv)
    table = [ln for ln in lines if ln.strip().startswith(("latency", "E2E"))]
    assert not any("]1" in ln or "16,19119" in ln or "1619119" in ln for ln in table), table
    assert len({len(ln) for ln in table}) == 1  # right-aligned columns end together


def _with_channels(r: dict, reasoning_requests: int) -> dict:
    """Every block given TTFO rows and a tokens.channels block (TTFO 10x TTFT: told apart)."""
    r = copy.deepcopy(r)
    for block in (*r["phases"], r["summary"]):
        lat = block["latency_ms"]
        lat["ttfo"] = {k: (v * 10 if isinstance(v, float) else v) for k, v in lat["ttft"].items()}
        lat["itl_reasoning"] = dict(lat["itl"])
        block.setdefault("tokens", {})["channels"] = {
            "reasoning_tokens": 640 * reasoning_requests,
            "reasoning_requests": reasoning_requests,
            "answer_tokens": 100,
            "answer_requests": 10,
            "tool_tokens": 0,
            "tool_requests": 0,
            "usage_reasoning_tokens": None,
            "reasoning_disagree_requests": 2 if reasoning_requests else 0,
        }
    return r


def test_channel_rows_only_where_a_run_had_reasoning_or_tool_tokens():
    """Issue 25: answer tokens only, TTFO is TTFT: no row, no line. With reasoning: the TTFO and
    reasoning ITL rows, the tokens by channel and a warning where usage disagreed."""
    plain = render_text(_with_channels(_result(), 0))
    assert "TTFO" not in plain and "by channel" not in plain
    text = render_text(_with_channels(_result(), 3))
    assert "TTFO (first answer token)" in text and "ITL reasoning" in text
    assert "ITL tool" not in text  # no tool tokens: no row
    assert "1,920 reasoning (3 requests)" in text and "WARNING: 2 requests" in text
