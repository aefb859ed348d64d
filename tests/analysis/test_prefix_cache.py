"""The result's prefix_cache block (harness.analysis.prefix_cache) and how the reports show it."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.html import prefix_cache_sections
from harness.analysis.prefix_cache import prefix_cache_block, reports_cached
from harness.analysis.report_text import render_prefix_cache
from harness.record.metrics import Columns
from harness.record.records import ErrorKind, Record

MS = 1_000_000


def _rec(
    seq: int, prompt: int, cached: int | None, ttft_ms: int, ok: bool = True, turn: int = 0
) -> Record:
    return Record(
        seq=seq,
        phase=0,
        intended_ns=0,
        sent_ns=0,
        chunk_ns=(ttft_ms * MS, ttft_ms * MS + MS) if ok else (),
        chunk_tokens=(1, 1) if ok else (),
        end_ns=ttft_ms * MS + MS,
        status=200 if ok else 500,
        error=None if ok else ErrorKind.HTTP_STATUS,
        prompt_tokens=prompt,
        output_tokens=2 if ok else 0,
        cached_tokens=cached,
        session_id=None if turn < 0 else 0,
        turn_index=max(turn, 0),
    )


def _block(recs: list[Record]) -> dict:
    c = Columns.of(recs)
    out = prefix_cache_block(c, np.ones(c.n, bool), reports_cached(c))
    assert out is not None
    return out


def test_hit_shares_bins_and_totals() -> None:
    recs = [
        _rec(0, 100, 0, 90, turn=-1),  # a miss: bin 0
        _rec(1, 100, 20, 80, turn=-1),  # 0.2: (0, 0.25]
        _rec(2, 100, 50, 60, turn=-1),  # 0.5: (0.25, 0.5] (upper bound inclusive)
        _rec(3, 100, 96, 10, turn=-1),  # 0.96: (0.75, 1]
        _rec(4, 100, None, 95, turn=-1),  # no details among requests that have them: a miss
        _rec(5, 100, 99, 5, ok=False, turn=-1),  # failed: not counted
    ]
    b = _block(recs)
    assert b["requests"] == 5 and b["requests_without_details"] == 1
    assert b["requests_with_hits"] == 3
    assert (b["prompt_tokens"], b["cached_tokens"]) == (500, 166)
    assert b["token_hit_share"] == pytest.approx(166 / 500)
    assert b["hit_share"]["max"] == pytest.approx(0.96) and b["hit_share"]["p10"] == 0.0
    bins = {x["bin"]: x for x in b["ttft_by_hit_share"]}
    assert [x["requests"] for x in b["ttft_by_hit_share"]] == [2, 1, 1, 0, 1]
    assert bins["0"]["ttft_ms"] == {"count": 2, "p50": 90.0, "p90": 95.0}
    assert bins["0"]["uncached_prompt_tokens_mean"] == 100.0
    assert bins["(0.75, 1]"]["uncached_prompt_tokens_mean"] == 4.0
    assert bins["(0.5, 0.75]"]["ttft_ms"]["p50"] is None
    assert "by_turn" not in b  # single-turn requests


def test_by_turn_for_sessions() -> None:
    b = _block([_rec(0, 100, 0, 50, turn=0), _rec(1, 200, 100, 40, turn=1)])
    assert b["by_turn"] == [
        {"turn_index": 0, "requests": 1, "hit_share_mean": 0.0, "cached_tokens_mean": 0.0},
        {"turn_index": 1, "requests": 1, "hit_share_mean": 0.5, "cached_tokens_mean": 100.0},
    ]


def test_a_server_that_reports_none_is_not_reported() -> None:
    c = Columns.of([_rec(0, 100, None, 50, turn=-1)])
    assert not reports_cached(c)
    assert prefix_cache_block(c, np.ones(1, bool), False) is None
    r = {"summary": {"prefix_cache": None}, "phases": []}
    assert render_prefix_cache(r) == [
        "  prefix cache per request: not reported (the server sent no "
        "usage.prompt_tokens_details.cached_tokens)"
    ]
    assert [s["type"] for s in prefix_cache_sections(r)] == ["note"]
    old = {"summary": {}, "phases": []}  # a result written before the block: nothing at all
    assert render_prefix_cache(old) == [] and prefix_cache_sections(old) == []


def test_the_reports_show_the_bins_that_have_requests() -> None:
    b = _block([_rec(0, 100, 0, 90, turn=-1), _rec(1, 100, 80, 20, turn=-1)])
    r = {"summary": {"name": "summary", "prefix_cache": b}, "phases": []}
    text = "\n".join(render_prefix_cache(r))
    assert "hit share 0 " in text and "hit share (0.75, 1]" in text
    assert "(0.25, 0.5]" not in text  # empty bins are left out
    kinds = [s["type"] for s in prefix_cache_sections(r)]
    assert kinds == ["table", "table", "chart"]
