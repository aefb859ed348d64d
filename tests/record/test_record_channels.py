"""Token channels from Record to result: TTFO, the first tool call, ITL per channel and the
tokens of each channel are exact on records whose stamps are known, the journal keeps them
(`report RUN.journal.jsonl` rebuilds the same), and a run without channels is unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from harness.analysis.result import build_result
from harness.record.journal import decode_record, encode_record, read_journal
from harness.record.metrics import Columns, channel_gaps_ns, per_request_values_ns
from harness.record.records import Channel, Record

MS = 1_000_000
A, R, T = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)


def rec(seq: int, sent: int, stamps: list[int], tokens: list[int], runs=(), urt=None) -> Record:
    return Record(
        seq=seq,
        phase=0,
        intended_ns=sent,
        sent_ns=sent,
        headers_ns=sent + 1 * MS,
        chunk_ns=tuple(stamps),
        chunk_tokens=tuple(tokens),
        end_ns=stamps[-1],
        status=200,
        prompt_tokens=8,
        output_tokens=sum(tokens),
        planned_prompt_tokens=8,
        planned_output_tokens=64,
        usage_per_chunk=True,
        request_bytes=200,
        received_bytes=4000,
        channel_runs=tuple(runs),
        usage_reasoning_tokens=urt,
    )


# Truth, in ms after sending:
# 0: reasons 3 events (10, 20, 40; the last carries 2 tokens), answers at 100, 110, 130
# 1: reasons at 50, calls a tool at 80 (name), 90, 95 (arguments); no answer
# 2: a plain answer at 30, 35 (a model that does not reason)
RECORDS = [
    rec(
        0,
        0,
        [10 * MS, 20 * MS, 40 * MS, 100 * MS, 110 * MS, 130 * MS],
        [1, 1, 2, 1, 1, 1],
        runs=((0, R), (3, A)),
        urt=4,
    ),
    rec(
        1,
        1000 * MS,
        [1050 * MS, 1080 * MS, 1090 * MS, 1095 * MS],
        [1, 1, 1, 1],
        runs=((0, R), (1, T)),
        urt=2,
    ),
    rec(2, 2000 * MS, [2030 * MS, 2035 * MS], [1, 1]),
]


def _journal(path: Path, records: list[Record]) -> Path:
    header = {
        "t": "header",
        "version": 2,
        "scenario": {},
        "scenario_name": "s",
        "target": {"kind": "http", "base_url": "http://x", "model": "m", "endpoint": "chat"},
        "environment": {},
        "started_at": "2026-12-01T00:00:00Z",
        "phases": [{"name": "main", "warmup": False, "planned_requests": len(records)}],
        "slo": [
            {"name": "ttfo_p99", "metric": "ttfo", "stat": "p99", "limit_s": 0.1},
            {"name": "ttft_tool", "metric": "ttft_tool", "stat": None, "limit_s": 0.05},
        ],
        "plan": {},
    }
    lines = [orjson.dumps(header)] + [orjson.dumps(encode_record(r)) for r in records]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_record_properties_are_the_truth() -> None:
    r0, r1, r2 = RECORDS
    assert r0.channels == (R, R, R, A, A, A)
    assert (r0.ttft_ns, r0.ttfo_ns, r0.ttft_tool_ns) == (10 * MS, 100 * MS, None)
    assert (r1.ttft_ns, r1.ttfo_ns, r1.ttft_tool_ns) == (50 * MS, None, 80 * MS)
    assert (r2.ttft_ns, r2.ttfo_ns) == (30 * MS, 30 * MS)  # no reasoning: TTFO = TTFT
    assert [r0.channel_tokens(c) for c in Channel] == [3, 4, 0]
    assert [r1.channel_tokens(c) for c in Channel] == [0, 1, 3]


def test_the_journal_keeps_channels() -> None:
    for r in RECORDS:
        assert decode_record(orjson.loads(orjson.dumps(encode_record(r)))) == r
    assert "ch" not in encode_record(RECORDS[2])  # a plain answer costs nothing more


def test_columns_metrics_are_exact() -> None:
    c = Columns.of(RECORDS)
    v = per_request_values_ns(c)
    np.testing.assert_array_equal(v["ttft"], [10 * MS, 50 * MS, 30 * MS])
    np.testing.assert_array_equal(v["ttfo"], [100 * MS, np.nan, 30 * MS])
    np.testing.assert_array_equal(v["ttft_tool"], [np.nan, 80 * MS, np.nan])
    gaps = channel_gaps_ns(c, np.ones(3, bool))
    # reasoning gaps: 10, then 20 over 2 tokens (10, 10), then 30 (request 1 has one reasoning
    # event); the reasoning -> answer gap (60) and reasoning -> tool (30) are in `itl` only
    assert sorted(gaps["itl_reasoning"].tolist()) == [10 * MS, 10 * MS, 10 * MS]
    assert sorted(gaps["itl_answer"].tolist()) == [5 * MS, 10 * MS, 20 * MS]
    assert sorted(gaps["itl_tool"].tolist()) == [5 * MS, 10 * MS]


def test_the_result_from_the_journal_is_exact(tmp_path: Path) -> None:
    path = _journal(tmp_path / "r.journal.jsonl", RECORDS)
    result = build_result(read_journal(path), str(path))
    s = result["summary"]
    lat = s["latency_ms"]
    assert (lat["ttft"]["count"], lat["ttft"]["max"]) == (3, 50.0)
    assert (lat["ttfo"]["count"], lat["ttfo"]["p50"], lat["ttfo"]["max"]) == (2, 30.0, 100.0)
    assert (lat["ttft_tool"]["count"], lat["ttft_tool"]["max"]) == (1, 80.0)
    assert (lat["itl_tool"]["count"], lat["itl_tool"]["max"]) == (2, 10.0)
    assert s["tokens"]["channels"] == {
        "answer_tokens": 3 + 2,
        "answer_requests": 2,
        "reasoning_tokens": 4 + 1,
        "reasoning_requests": 2,
        "tool_tokens": 3,
        "tool_requests": 1,
        "usage_reasoning_tokens": 4 + 2,
        "reasoning_disagree_requests": 1,  # request 1: usage says 2, one reasoning token came
    }
    # the SLOs on the new rows are checked: TTFO p99 is 100 ms (not over), TTFT tool 80 ms > 50
    verdicts = {v["name"]: v for v in s["slo"]}
    assert verdicts["ttfo_p99"]["pass"] is True and verdicts["ttfo_p99"]["value_ms"] == 100.0
    assert verdicts["ttft_tool"]["attainment"] == 0.0
    # goodput: request 1 misses the tool limit; 0 and 2 have no tool call and meet it
    assert s["requests"]["completed"] == 3


def test_without_channels_ttfo_is_ttft_and_itl_answer_is_itl(tmp_path: Path) -> None:
    plain = [RECORDS[2], rec(3, 3000 * MS, [3010 * MS, 3020 * MS, 3050 * MS], [1, 2, 1])]
    path = _journal(tmp_path / "r.journal.jsonl", plain)
    j = read_journal(path)
    assert j.columns().channel is None  # nothing per event
    s = build_result(j, str(path))["summary"]
    lat = s["latency_ms"]
    assert lat["ttfo"] == lat["ttft"]
    assert lat["itl_answer"] == lat["itl"]
    assert lat["itl_reasoning"]["count"] == 0 and lat["ttft_tool"]["count"] == 0
    assert s["tokens"]["channels"]["reasoning_tokens"] == 0
    assert s["tokens"]["channels"]["usage_reasoning_tokens"] is None


@pytest.mark.parametrize("bad", [[0], [0, 7], [5, 1, 2, 0], ["0", 1]])
def test_damaged_channels_make_a_damaged_record(tmp_path: Path, bad: list) -> None:
    d = encode_record(RECORDS[0]) | {"ch": bad}
    path = _journal(tmp_path / "r.journal.jsonl", RECORDS[1:])
    path.write_bytes(path.read_bytes() + orjson.dumps(d) + b"\n")
    j = read_journal(path)
    assert j.torn_lines == 1 and len(j.records) == 2
