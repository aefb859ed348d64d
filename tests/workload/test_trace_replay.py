"""Trace replay: formats and their detection, windows, scaling, streaming, and the plan's use of them.

The Azure and Mooncake files are verbatim excerpts of the public traces (tests/data/traces/README.md);
expected values are computed here from the files themselves with the standard library, not copied.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from harness.config.validate import Table
from harness.errors import ConfigError
from harness.workload import trace_formats
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario
from harness.workload.trace import parse_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
AZURE = DATA / "azure_code_first10min.csv"
MOONCAKE = DATA / "mooncake_rows3840-3959.jsonl"
BURST = DATA / "burstgpt_shaped.csv"


def _trace(**arrival):
    return parse_trace(Table({"process": "trace", **arrival}, "s.toml", "phases.0.arrival"), DATA)


def _azure_rows():
    with AZURE.open(newline="") as f:
        return list(csv.DictReader(f))


def _mooncake_rows():
    return [json.loads(line) for line in MOONCAKE.read_text().splitlines()]


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (AZURE, "azure"),  # header TIMESTAMP, ContextTokens, GeneratedTokens
        (MOONCAKE, "mooncake"),  # JSON lines with timestamp, input_length, output_length
        (BURST, "burstgpt"),  # header Timestamp, Request tokens, Response tokens, Log Type
        (Path(__file__).resolve().parents[2] / "scenarios" / "traces" / "sample.jsonl", "harness"),
    ],
)
def test_auto_detects_each_format_and_says_so(path, fmt):
    tr = _trace(file=str(path))
    assert tr.format == fmt and tr.detected and tr.info["format_detected"]
    assert f"{fmt} (auto)" in str(tr)


def test_azure_absolute_times_become_offsets_from_the_first_row():
    rows = _azure_rows()
    t0 = datetime.fromisoformat(rows[0]["TIMESTAMP"])
    want = [(datetime.fromisoformat(r["TIMESTAMP"]) - t0).total_seconds() for r in rows]
    tr = _trace(file="azure_code_first10min.csv")
    assert len(tr.rows) == len(rows) == 1482
    assert np.allclose(tr.rows.offsets_s, want, atol=1e-6)
    assert tr.rows.prompt_tokens.tolist() == [int(r["ContextTokens"]) for r in rows]
    assert tr.rows.output_tokens.tolist() == [int(r["GeneratedTokens"]) for r in rows]


def test_window_time_scale_and_rate_scale():
    rows = _azure_rows()
    t0 = datetime.fromisoformat(rows[0]["TIMESTAMP"])
    t = np.array([(datetime.fromisoformat(r["TIMESTAMP"]) - t0).total_seconds() for r in rows])
    inside = (t >= 180) & (t < 300)
    # start/duration: rows of [180 s, 300 s), sent at their offset from the window's start
    tr = _trace(file="azure_code_first10min.csv", start="3m", duration="2m")
    assert len(tr.rows) == inside.sum() and np.allclose(
        tr.rows.offsets_s, t[inside] - 180, atol=1e-6
    )
    assert tr.rows.prompt_tokens.tolist() == [
        int(r["ContextTokens"]) for r, k in zip(rows, inside, strict=True) if k
    ]
    # time_scale 0.5: twice as fast
    half = _trace(file="azure_code_first10min.csv", start="3m", duration="2m", time_scale=0.5)
    assert np.allclose(half.rows.offsets_s, tr.rows.offsets_s * 0.5)
    # rate_scale: a target mean rate; the window (120 s, the trace runs past it) scaled to reach it
    fast = _trace(file="azure_code_first10min.csv", start="3m", duration="2m", rate_scale="20/s")
    assert fast.info["window_mean_rate_per_s"] == pytest.approx(inside.sum() / 120)
    assert fast.info["replay_mean_rate_per_s"] == pytest.approx(20.0)
    assert len(fast.rows) / (120 * fast.time_scale) == pytest.approx(20.0)
    # ... keeping the burst shape: every gap shrinks by the same factor
    gaps, fast_gaps = np.diff(tr.rows.offsets_s), np.diff(fast.rows.offsets_s)
    assert np.allclose(fast_gaps, gaps * fast.time_scale)


def test_a_phase_duration_and_request_count_end_the_replay(write_scenario):
    base = (
        f'name = "t"\n[[phases]]\nname = "p"\n{{}}\narrival = {{{{ process = "trace", file = "{AZURE}", '
        'start = "3m" }}\n'
    )
    plan = build_plan(load_scenario(write_scenario(base.format('duration = "10s"'))))
    offs = _trace(file="azure_code_first10min.csv", start="3m").rows.offsets_s
    assert plan.phases[0].count == int((offs < 10).sum()) and plan.phases[0].duration_s == 10
    plan = build_plan(load_scenario(write_scenario(base.format("requests = 7"))))
    assert plan.phases[0].offsets_s.tolist() == offs[:7].tolist()


def test_mooncake_times_in_ms_hash_ids_and_origin():
    rows = _mooncake_rows()
    tr = _trace(file=MOONCAKE.name, format="mooncake")
    assert tr.rows.offsets_s[0] == pytest.approx(rows[0]["timestamp"] / 1000)  # the file's own zero
    first = _trace(file=MOONCAKE.name, origin="first_row")
    assert np.allclose(
        first.rows.offsets_s, [(r["timestamp"] - rows[0]["timestamp"]) / 1000 for r in rows]
    )
    assert first.rows.prompt_tokens.tolist() == [r["input_length"] for r in rows]
    assert first.rows.output_tokens.tolist() == [r["output_length"] for r in rows]
    starts, ids = first.rows.hash_starts, first.rows.hash_ids
    assert [ids[starts[k] : starts[k + 1]].tolist() for k in range(len(rows))] == [
        r["hash_ids"] for r in rows
    ]


def test_burstgpt_keeps_log_type_and_failures_as_metadata(write_scenario):
    tr = _trace(file=BURST.name)
    assert tr.info["log_types"] == {"Conversation log": 7, "API log": 5}
    assert tr.rows.failed.tolist().count(True) == 2 and tr.info["failed_rows"] == 2
    assert tr.rows.output_tokens.min() == 1  # a failed request is replayed asking for 1 token
    skipped = _trace(file=BURST.name, failed="skip")
    assert len(skipped.rows) == 10 and skipped.info["failed_rows_skipped"] == 2
    plan = build_plan(
        load_scenario(
            write_scenario(
                f'name = "t"\n[[phases]]\nname = "p"\nduration = "135s"\narrival = {{ process = "trace", file = "{BURST}" }}\n'
            )
        )
    )
    kept = plan.workload["traces"]["p"]  # counted over the rows the phase sends
    assert kept["requests_planned"] == 5 and kept["failed_rows"] == 1
    assert kept["log_types"] == {"Conversation log": 3, "API log": 2}


def test_csv_with_a_column_mapping_and_time_unit(tmp_path, write_scenario):
    (tmp_path / "log.csv").write_text("when_ms,in,out,user\n0,10,3,a\n250,20,4,b\n1000,30,5,c\n")
    tr = parse_trace(
        Table(
            {
                "process": "trace",
                "file": "log.csv",
                "format": "csv",
                "time_unit": "ms",
                "columns": {"t": "when_ms", "prompt_tokens": "in", "output_tokens": "out"},
            },
            "s.toml",
            "phases.0.arrival",
        ),
        tmp_path,
    )
    assert tr.rows.offsets_s.tolist() == [0.0, 0.25, 1.0] and tr.rows.prompt_tokens.tolist() == [
        10,
        20,
        30,
    ]
    # Only the times mapped: the lengths come from [workload]
    (tmp_path / "times.csv").write_text("ts\n2023-01-01T00:00:00\n2023-01-01T00:00:01.5\n")
    plan = build_plan(
        load_scenario(
            write_scenario(
                'name = "t"\n[workload]\nprompt_tokens = { dist = "fixed", value = 9 }\noutput_tokens = { dist = "fixed", '
                'value = 4 }\n[[phases]]\nname = "p"\narrival = { process = "trace", file = "times.csv", format = "csv", '
                'time_unit = "datetime", columns = { t = "ts" } }\n'
            )
        )
    )
    assert plan.phases[0].offsets_s.tolist() == [0.0, 1.5] and plan.phases[
        0
    ].prompt_tokens.tolist() == [9, 9]


def test_lengths_left_out_of_workload_come_from_the_trace(write_scenario):
    scn = load_scenario(
        write_scenario(
            f'name = "t"\n[[phases]]\nname = "w"\nrequests = 50\narrival = {{ process = "constant", rate = 5 }}\n'
            f'[[phases]]\nname = "r"\narrival = {{ process = "trace", file = "{AZURE}" }}\n'
        )
    )
    values = set(int(r["ContextTokens"]) for r in _azure_rows())
    plan = build_plan(scn)
    assert (
        set(plan.phases[0].prompt_tokens.tolist()) <= values
    )  # the synthetic phase draws the trace's lengths


def test_streaming_reads_chunks_and_stops_after_the_window(monkeypatch):
    whole = _trace(file=AZURE.name, start="1m", duration="4m")
    monkeypatch.setattr(trace_formats, "CHUNK_ROWS", 100)
    chunked = _trace(file=AZURE.name, start="1m", duration="4m")
    assert np.array_equal(whole.rows.offsets_s, chunked.rows.offsets_s)
    assert np.array_equal(whole.rows.prompt_tokens, chunked.rows.prompt_tokens)
    assert (
        whole.info["rows_read"] == 1482 and chunked.info["rows_read"] < 1482
    )  # stopped past 5 min
    m1 = _trace(file=MOONCAKE.name, origin="first_row", start="5s", duration="10s")
    monkeypatch.setattr(trace_formats, "CHUNK_ROWS", 7)
    m2 = _trace(file=MOONCAKE.name, origin="first_row", start="5s", duration="10s")
    assert np.array_equal(m1.rows.hash_ids, m2.rows.hash_ids) and np.array_equal(
        m1.rows.hash_starts, m2.rows.hash_starts
    )


@pytest.mark.parametrize(
    ("files", "arrival", "words"),
    [
        # columns that match no format
        (
            {"t.csv": "a,b\n1,2\n"},
            {},
            ["t.csv:1", "matches no trace format", "azure", "burstgpt", 'format = "csv"'],
        ),
        (
            {"t.jsonl": '{"when": 1}\n'},
            {},
            ["t.jsonl:1", "matches no trace format", "lacks t, prompt_tokens", "mooncake"],
        ),
        # format = "azure" with a missing column
        (
            {"t.csv": "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,5\n"},
            {"format": "azure"},
            ["t.csv:1", "'GeneratedTokens'", "the header has 2 columns, none named so"],
        ),
        # a malformed JSON line
        (
            {
                "t.jsonl": '{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": 1,\n'
            },
            {},
            ["t.jsonl:2", "not valid JSON"],
        ),
        # non-monotonic and negative times
        (
            {
                "t.jsonl": '{"timestamp": 5, "input_length": 5, "output_length": 5}\n'
                '{"timestamp": 4, "input_length": 5, "output_length": 5}\n'
            },
            {},
            ["t.jsonl:2", "timestamp", "sorted"],
        ),
        (
            {"t.csv": "Timestamp,Request tokens,Response tokens\n-3,5,5\n"},
            {},
            ["t.csv:2", "Timestamp", ">= 0"],
        ),
        (
            {
                "t.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,5,5\n2023-11-16 18:17:03,5,5\n"
            },
            {},
            ["t.csv:3", "sorted"],
        ),
        (
            {"t.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5\n"},
            {},
            ["t.csv:2", "TIMESTAMP", "date and time"],
        ),
        # an empty window after start/duration
        (
            {"t.jsonl": '{"t": 1, "prompt_tokens": 5, "output_tokens": 5}\n'},
            {"start": "10s", "duration": "5s"},
            [
                "phases.0.arrival.start",
                "start = 10 s, duration = 5 s",
                "holds no rows",
                "from 1 s to 1 s",
            ],
        ),
        # csv without columns; csv keys on another format; both scales
        ({"t.csv": "a\n1\n"}, {"format": "csv"}, ["phases.0.arrival.columns", "needs columns"]),
        ({"t.csv": "a\n1\n"}, {"format": "csv", "columns": {"t": "b"}}, ["t.csv:1", "'b'"]),
        (
            {"t.jsonl": '{"t": 1, "prompt_tokens": 5, "output_tokens": 5}\n'},
            {"time_unit": "ms"},
            ["phases.0.arrival.time_unit", 'format = "csv" only'],
        ),
        (
            {"t.jsonl": '{"t": 1, "prompt_tokens": 5, "output_tokens": 5}\n'},
            {"time_scale": 2, "rate_scale": "3/s"},
            ["phases.0.arrival.rate_scale", "not both"],
        ),
        # a bad length, a short row, an epoch time without origin
        (
            {"t.csv": "Timestamp,Request tokens,Response tokens\n1,five,5\n"},
            {},
            ["t.csv:2", "Request tokens", "integer"],
        ),
        (
            {"t.csv": "Timestamp,Request tokens,Response tokens\n1,5\n"},
            {},
            ["t.csv:2", "2 fields", "3"],
        ),
        (
            {"t.jsonl": '{"t": 1700000000, "prompt_tokens": 5, "output_tokens": 5}\n'},
            {},
            ["phases.0.arrival.origin", "first_row"],
        ),
        (
            {
                "t.jsonl": '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1, "x"]}\n'
            },
            {},
            ["t.jsonl:1", "hash_ids"],
        ),
    ],
)
def test_bad_traces_name_the_file_the_line_and_what_is_allowed(tmp_path, files, arrival, words):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as ei:
        parse_trace(
            Table(
                {"process": "trace", "file": next(iter(files)), **arrival},
                "s.toml",
                "phases.0.arrival",
            ),
            tmp_path,
        )
    msg = str(ei.value)
    for w in words:
        assert w in msg, (w, msg)
    assert "\n" not in msg


def test_a_phase_that_cuts_every_arrival_is_refused(write_scenario, tmp_path):
    (tmp_path / "t.jsonl").write_text('{"t": 5, "prompt_tokens": 5, "output_tokens": 5}\n')
    scn = load_scenario(
        write_scenario(
            'name = "t"\n[[phases]]\nname = "p"\nduration = "2s"\n'
            'arrival = { process = "trace", file = "t.jsonl" }\n'
        )
    )
    with pytest.raises(
        ConfigError, match=r"phases.0.duration: is 2 s, and the trace's first arrival comes at 5 s"
    ):
        build_plan(scn)
