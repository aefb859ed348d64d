"""The channel metrics in the views (issue 25): compare's channel rows and their gate, the export's
channel columns, and a run without reasoning or tool calls: TTFO = TTFT in its result, and no
channel row in its text report, compare or export. Journals are built in code."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import orjson
import pytest

from harness.analysis import compare as cmp
from harness.analysis.export import REQUEST_COLUMNS, TOKEN_COLUMNS, request_rows, token_rows
from harness.analysis.html_compare import render_compare_html
from harness.analysis.report_text import render_text
from harness.analysis.result import build_result
from harness.commands.export import write_csv, write_jsonl
from harness.record.journal import Journal, encode_record, read_journal
from harness.record.records import Channel, Record

MS = 1_000_000
A, R, T = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)
N = 60  # requests per run


def rec(seq: int, ttft_ms: int, think: int, gap_ms: int, tool: bool = False) -> Record:
    """A request sent at seq x 100 ms: `think` reasoning tokens from `ttft_ms`, then 4 answer
    (or tool-call) tokens, one token per event every `gap_ms`."""
    sent = seq * 100 * MS
    n = think + 4
    stamps = tuple(sent + (ttft_ms + i * gap_ms) * MS for i in range(n))
    runs: tuple[tuple[int, int], ...] = ()
    if think:
        runs = ((0, R), (think, T if tool else A))
    elif tool:
        runs = ((0, T),)
    return Record(
        seq=seq,
        phase=0,
        intended_ns=sent,
        sent_ns=sent,
        headers_ns=sent + MS,
        chunk_ns=stamps,
        chunk_tokens=(1,) * n,
        end_ns=stamps[-1],
        status=200,
        prompt_tokens=16,
        output_tokens=n,
        planned_prompt_tokens=16,
        planned_output_tokens=n,
        usage_per_chunk=True,
        channel_runs=runs,
        usage_reasoning_tokens=think if think else None,
    )


def run(tmp_path: Path, name: str, records: list[Record]) -> tuple[dict, Journal]:
    header = {
        "t": "header",
        "version": 2,
        "scenario": {},
        "scenario_name": "s",
        "target": {
            "kind": "http",
            "base_url": "http://x",
            "model": "m",
            "endpoint": "chat",
            "api_key": None,
        },
        "environment": {},
        "started_at": "2026-12-01T00:00:00Z",
        "phases": [{"name": "main", "warmup": False, "planned_requests": len(records)}],
        "slo": [],
        "plan": {},
    }
    path = tmp_path / f"{name}.journal.jsonl"
    lines = [orjson.dumps(header)] + [orjson.dumps(encode_record(r)) for r in records]
    path.write_bytes(b"\n".join(lines) + b"\n")
    j = read_journal(path)
    result = build_result(j, str(path))
    (tmp_path / f"{name}.json").write_bytes(orjson.dumps(result))
    return result, j


def plain(seq: int, ttft_ms: int = 30) -> Record:
    return rec(seq, ttft_ms, 0, 5)


def thinking(seq: int, think: int = 20, gap_ms: int = 5) -> Record:
    return rec(seq, 30, think, gap_ms, tool=seq % 3 == 0)


def compare(base: tuple[dict, Journal], cand: tuple[dict, Journal], th: dict) -> dict:
    return cmp.compare_results(
        [base[0]], [cand[0]], "base", "cand", th, replicates=200, journals=([base[1]], [cand[1]])
    )


def test_a_run_without_reasoning_shows_ttfo_equal_ttft_and_no_channel_row(tmp_path) -> None:
    base = run(tmp_path, "a", [plain(i) for i in range(N)])
    cand = run(tmp_path, "b", [plain(i, 33) for i in range(N)])
    lat = base[0]["summary"]["latency_ms"]
    assert lat["ttfo"] == lat["ttft"] and lat["itl_answer"] == lat["itl"]
    text = render_text(base[0])
    assert "TTFO" not in text and "ITL answer" not in text and "by channel" not in text
    comp = compare(base, cand, cmp.DEFAULT_THRESHOLDS)
    assert [r["metric"] for r in comp["rows"]] == [m.key for m in cmp.METRICS]
    assert "TTFO" not in render_compare_html(
        cmp.build_report([comp], {"source": "defaults", "values": cmp.DEFAULT_THRESHOLDS}, 200)
    )
    rows = request_rows(base[1])
    assert all(r["ttfo_ms"] == r["ttft_ms"] and r["ttft_tool_ms"] is None for r in rows)
    assert all(r["reasoning_tokens"] == r["tool_tokens"] == 0 for r in rows)
    assert all(r["answer_tokens"] == r["output_tokens"] for r in rows)
    assert {t["channel"] for t in token_rows(base[1])} == {"answer"}


def test_compare_shows_the_channel_rows_where_either_side_has_channels(tmp_path) -> None:
    base = run(tmp_path, "a", [plain(i) for i in range(N)])
    cand = run(tmp_path, "b", [thinking(i) for i in range(N)])
    for pair in ((base, cand), (cand, base)):
        comp = compare(*pair, cmp.DEFAULT_THRESHOLDS)
        keys = [r["metric"] for r in comp["rows"]]
        assert keys == [m.key for m in cmp.ALL_METRICS]
        rows = {r["metric"]: r for r in comp["rows"]}
        assert rows["ttfo_p99"]["threshold"] is None  # shown, not gated by default
    rows = {r["metric"]: r for r in compare(base, cand, cmp.DEFAULT_THRESHOLDS)["rows"]}
    # the figures are the results' own: TTFO after 20 thoughts of 5 ms is 30 + 100 ms
    assert rows["ttfo_p99"]["candidate"] == cand[0]["summary"]["latency_ms"]["ttfo"]["p99"] == 130
    assert rows["ttfo_p99"]["baseline"] == base[0]["summary"]["latency_ms"]["ttft"]["p99"]
    assert rows["itl_reasoning_p99"]["baseline"] is None  # no reasoning in the baseline
    assert rows["ttft_tool_p99"]["samples"] == [0, N // 3]


def test_a_gated_ttfo_catches_longer_thinking_that_ttft_cannot_see(tmp_path) -> None:
    base = run(tmp_path, "a", [thinking(i, think=20) for i in range(N)])
    cand = run(tmp_path, "b", [thinking(i, think=40) for i in range(N)])  # thinks twice as long
    comp = compare(base, cand, cmp.parse_threshold_flags(["ttfo_p50=10%", "ttft_p50=10%"]))
    rows = {r["metric"]: r for r in comp["rows"]}
    assert rows["ttft_p50"]["verdict"] == "same"  # the first thought comes as fast
    assert rows["ttfo_p50"]["verdict"] == "REGRESSION" and comp["status"] == "regression"
    assert "TTFO p50" in cmp.render(
        cmp.build_report([comp], {"source": "--max-regression", "values": {}}, 200)
    )


def test_a_gated_channel_row_is_shown_without_channels(tmp_path) -> None:
    base = run(tmp_path, "a", [plain(i) for i in range(N)])
    comp = compare(base, base, {"ttfo_p50": 0.1})
    rows = {r["metric"]: r for r in comp["rows"]}
    assert set(rows) - {m.key for m in cmp.METRICS} == {"ttfo_p50"}  # asked for: TTFO is TTFT
    assert rows["ttfo_p50"]["baseline"] == rows["ttft_p50"]["baseline"]
    assert rows["ttfo_p50"]["verdict"] == "same"


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_every_export_format_carries_the_channel_columns(tmp_path, fmt: str) -> None:
    _, j = run(tmp_path, "a", [thinking(i) for i in range(6)])
    write = {"csv": write_csv, "jsonl": write_jsonl}[fmt]
    out = tmp_path / f"r.{fmt}"
    write(request_rows(j), REQUEST_COLUMNS, out)
    if fmt == "csv":
        with open(out, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        assert tuple(rows[0]) == REQUEST_COLUMNS
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_seq = {int(r["seq"]): r for r in rows}
    tool, answer = by_seq[0], by_seq[1]  # seq 0 calls a tool, seq 1 answers
    assert float(answer["ttfo_ms"]) == 30 + 20 * 5 and float(tool["ttft_tool_ms"]) == 130
    assert tool["ttfo_ms"] in ("", None) and answer["ttft_tool_ms"] in ("", None)
    assert [int(tool[k]) for k in ("reasoning_tokens", "tool_tokens", "answer_tokens")] == [
        20,
        4,
        0,
    ]
    assert int(answer["usage_reasoning_tokens"]) == 20
    tokens = tmp_path / f"t.{fmt}"
    write(token_rows(j), TOKEN_COLUMNS, tokens)
    text = tokens.read_text()
    assert "reasoning" in text and "tool" in text and "answer" in text
