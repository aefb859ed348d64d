"""The workload view of a result: offered and sent over time, length histograms planned and
served, sessions started, and a trace's own curve beside what was sent -- from hand-made records."""

from __future__ import annotations

from harness.analysis.report_text import render_workload_view, sparkline
from harness.analysis.workload_view import build_workload_view
from harness.record.metrics import Columns
from harness.record.records import ErrorKind, Record

S = 1_000_000_000


def _rec(
    seq: int, intended_s: float, sent_s: float, prompt: int, out: int, ok: bool = True, **kw
) -> Record:
    i, s = int(intended_s * S), int(sent_s * S)
    if not ok:
        return Record(
            seq,
            0,
            i,
            s,
            end_ns=s + 1,
            error=ErrorKind.HTTP_STATUS,
            status=503,
            planned_prompt_tokens=prompt,
            planned_output_tokens=out,
            **kw,
        )
    return Record(
        seq,
        0,
        i,
        s,
        chunk_ns=(s + 10, s + 20),
        chunk_tokens=(1, 1),
        end_ns=s + 20,
        status=200,
        prompt_tokens=prompt + 7,
        output_tokens=out,
        planned_prompt_tokens=prompt,
        planned_output_tokens=out,
        **kw,
    )


def test_offered_sent_and_lengths():
    recs = [
        _rec(0, 0.1, 0.1, 10, 4),
        _rec(1, 0.5, 1.2, 12, 4),
        _rec(2, 1.5, 1.6, 14, 5),
        _rec(3, 2.5, 2.5, 10, 4, ok=False, retried=True),
        _rec(3, 2.5, 3.5, 10, 4, attempt=1),
    ]
    c = Columns.of(recs)
    v = build_workload_view(c, {"phases": [{"name": "p"}]}, [(0, 4 * S)], 4 * S)
    assert v["bin_s"] == 1.0
    assert v["offered_per_s"] == [2.0, 1.0, 1.0, 0.0]  # a retried request is offered once
    assert v["sent_per_s"] == [1.0, 2.0, 1.0, 0.0]  # first attempts, by actual send time
    assert v["offered_peak_per_s"] == 2.0 and v["offered_mean_per_s"] == 1.0
    p = v["prompt_tokens"]
    assert p["edges"][0] == 10 and sum(p["planned"]) == 4 and sum(p["server"]) == 4
    assert p["planned"][0] == 2  # two requests planned at 10 tokens
    assert p["server"][p["edges"].index(17)] == 2  # served 7 tokens more (a chat template)
    assert "sessions_started_per_s" not in v and "traces" not in v
    lines = render_workload_view(v)
    assert "mean 1 req/s, peak 2 req/s in 1 s bins" in lines[0]


def test_sessions_started_and_a_traces_own_curve():
    recs = [
        _rec(0, 0.2, 0.2, 10, 4, session_id=0),
        _rec(1, 1.2, 1.2, 30, 4, session_id=0, turn_index=1),
        _rec(2, 2.2, 2.3, 10, 4, session_id=2),
        _rec(3, 4.2, 4.2, 10, 4),
    ]
    c = Columns.of(recs)
    # the plan kept the trace's own curve: rows per 1 s bin of replay time (2 s of trace time, x0.5)
    header = {
        "phases": [{"name": "replay"}],
        "plan": {
            "workload": {
                "traces": {
                    "replay": {
                        "curve": {"bin_s": 1.0, "trace_bin_s": 2.0, "requests": [1, 1, 1, 0, 1]}
                    }
                }
            }
        },
    }
    v = build_workload_view(c, header, [(0, 5 * S)], 5 * S)
    assert v["sessions_started_per_s"] == [1.0, 0.0, 1.0, 0.0, 0.0]
    t = v["traces"]["replay"]
    assert t["time_scale"] == 0.5 and t["trace_per_s"] == [0.5, 0.5, 0.5, 0.0, 0.5]
    assert t["sent_per_s"] == [1.0, 1.0, 1.0, 0.0, 1.0] and t["shape_correlation"] == 1.0
    text = "\n".join(render_workload_view(v))
    assert (
        "trace phase replay" in text and "shape correlation 1.000" in text and "(started)" in text
    )


def test_sparkline():
    assert sparkline([0, 5, 10]) == " +@"  # ten levels: 0, half, full
    assert sparkline([0, 0]) == "  " and sparkline([]) == ""
    assert len(sparkline(list(range(1000)), width=60)) <= 60


def test_a_server_that_sent_no_usage_does_not_bend_the_length_bins():
    """A usage of 0 means the server counted nothing: left out (and counted apart), so the planned
    100..200 tokens keep their own bins instead of being squeezed into a few from 1 up."""
    import numpy as np

    from harness.analysis.workload_view import _lengths

    planned = np.arange(100, 201)
    got = _lengths(planned, np.zeros(101, dtype=np.int64))
    assert got["edges"][0] == 100 and got["server_not_reported"] == 101 and sum(got["server"]) == 0
    assert max(got["planned"]) <= 10  # spread over the bins, not piled in a few
    both = _lengths(planned, np.concatenate([planned[:50], np.zeros(3, dtype=np.int64)]))
    assert sum(both["server"]) == 50 and both["server_not_reported"] == 3
    assert got["edges"] == _lengths(planned, planned)["edges"]
