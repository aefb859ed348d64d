"""Sessions in the result: counted apart from requests; TTFT by turn index from hand-made records."""

from __future__ import annotations

import numpy as np

from harness.analysis.report_text import render_sessions
from harness.analysis.sessions import session_block
from harness.record.metrics import Columns
from harness.record.records import ErrorKind, Record

MS = 1_000_000


def _rec(
    seq: int,
    sid: int | None,
    turn: int,
    ttft_ms: int,
    prompt: int,
    ok: bool = True,
    retried: bool = False,
) -> Record:
    sent = seq * 1000 * MS
    if not ok:
        return Record(
            seq,
            0,
            sent,
            sent,
            end_ns=sent + MS,
            error=ErrorKind.HTTP_STATUS,
            status=500,
            session_id=sid,
            turn_index=turn,
            retried=retried,
        )
    first = sent + ttft_ms * MS
    return Record(
        seq,
        0,
        sent,
        sent,
        chunk_ns=(first, first + MS),
        chunk_tokens=(1, 1),
        end_ns=first + MS,
        status=200,
        prompt_tokens=prompt,
        output_tokens=2,
        session_id=sid,
        turn_index=turn,
    )


def test_sessions_turns_and_ttft_by_turn():
    recs = [
        _rec(0, 0, 0, 100, 200),
        _rec(1, 0, 1, 40, 400),
        _rec(2, 0, 2, 30, 600),  # session 0: 3 turns
        _rec(3, 3, 0, 120, 200),
        _rec(4, 3, 1, 60, 400),  # session 3: 2 turns
        _rec(5, 5, 0, 0, 0, ok=False, retried=True),
        _rec(5, 5, 0, 0, 0, ok=False),  # session 5: its first turn failed
        _rec(6, None, 0, 500, 100),  # a single-turn request
    ]
    recs[6] = Record(**{**{f: getattr(recs[6], f) for f in Record.__slots__}, "attempt": 1})
    c = Columns.of(recs)
    ss = session_block(c, np.ones(c.n, dtype=bool))
    assert ss is not None
    assert ss["sessions"] == 3 and ss["requests"] == 6 and ss["sessions_with_a_failed_turn"] == 1
    assert ss["turns_per_session_mean"] == 2.0 and ss["turns_per_session_max"] == 3
    t0, t1, t2 = ss["ttft_by_turn"]
    assert (t0["turn_index"], t0["requests"], t0["completed"]) == (0, 3, 2)
    assert t0["ttft_ms"]["mean"] == 110.0 and t0["prompt_tokens_mean"] == 200.0
    assert (
        t0["ttft_ms_per_1k_prompt_tokens_p50"] == 500.0
    )  # 100 ms / 200 tokens, 120 ms / 200 tokens
    assert t1["ttft_ms"]["mean"] == 50.0 and t1["ttft_ms_per_1k_prompt_tokens_p50"] == 100.0
    assert t2["ttft_ms"]["count"] == 1 and t2["ttft_ms"]["p50"] == 30.0
    text = "\n".join(render_sessions(ss))
    assert "sessions: 3 (6 requests" in text and "1 ended by a failed turn" in text
    assert "turn 2" in text


def test_single_turn_runs_have_no_sessions_entry():
    c = Columns.of([_rec(0, None, 0, 10, 5), _rec(1, None, 0, 10, 5)])
    assert session_block(c, np.ones(c.n, dtype=bool)) is None
    assert render_sessions(None) == []
