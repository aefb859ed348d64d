"""Exports (issue 15 item 3): per-request and per-token rows in csv / jsonl / parquet equal the
journal's records; the vllm format has vLLM's keys and units and its way of computing them."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.analysis.export import REQUEST_COLUMNS, TOKEN_COLUMNS, request_rows, vllm_result
from harness.analysis.result import build_result, dump_result
from harness.cli import main
from harness.config.target import Target
from harness.orchestrate.run import environment
from harness.record.journal import JournalWriter, read_journal
from harness.record.records import ErrorKind, Record

MS = 1_000_000
S = 1_000_000_000
T0_WALL_S = 1_790_000_000.0
HEADER: dict[str, Any] = {
    "scenario": {
        "name": "t",
        "seed": 1,
        "phases": [
            {
                "name": "warm",
                "warmup": True,
                "duration": "1s",
                "arrival": {"process": "constant", "rate": 2},
            },
            {
                "name": "main",
                "duration": "3s",
                "max_concurrency": 8,
                "arrival": {"process": "gamma", "rate": 4.0, "burstiness": 0.5},
            },
        ],
    },
    "scenario_name": "t",
    "environment": environment(),  # as a run writes them: the result must load (its schema)
    "started_at": "2026-11-30T01:02:03Z",
    "slo": [],
    "target": Target("http", "http://127.0.0.1:1", "m", "chat").describe(),
    "plan": {"digest": "0" * 64, "requests_planned": 6, "seed": 1},
    "phases": [
        {
            "name": "warm",
            "warmup": True,
            "closed": False,
            "max_concurrency": None,
            "arrival": "Constant(2/s)",
            "planned_duration_s": 1.0,
            "planned_requests": 2,
        },
        {
            "name": "main",
            "warmup": False,
            "closed": False,
            "max_concurrency": 8,
            "arrival": "Gamma(4/s, burstiness=0.5)",
            "planned_duration_s": 3.0,
            "planned_requests": 4,
        },
    ],
    "options": {"ignore_eos": True},
}
RECORDS = [
    # warm-up: left out of the vllm shape, kept in the rows
    Record(
        0,
        0,
        0,
        1 * MS,
        2 * MS,
        (20 * MS, 30 * MS),
        (1, 1),
        31 * MS,
        200,
        None,
        "",
        10,
        2,
        10,
        2,
        True,
    ),
    # a plain success, per-chunk usage with 3 tokens in the second chunk
    Record(
        1,
        1,
        S,
        S + MS,
        S + 2 * MS,
        (S + 50 * MS, S + 80 * MS, S + 90 * MS),
        (1, 3, 1),
        S + 91 * MS,
        200,
        None,
        "",
        100,
        5,
        96,
        5,
        True,
    ),
    # a 429 retried, then a success
    Record(
        2,
        1,
        S + 250 * MS,
        S + 251 * MS,
        S + 252 * MS,
        (),
        (),
        S + 253 * MS,
        429,
        ErrorKind.HTTP_STATUS,
        "HTTP 429: slow down",
        attempt=0,
        retried=True,
        retry_after_s=0.5,
    ),
    Record(
        2,
        1,
        S + 250 * MS,
        S + 760 * MS,
        S + 761 * MS,
        (S + 800 * MS, S + 850 * MS),
        (1, 1),
        S + 851 * MS,
        200,
        None,
        "",
        40,
        2,
        40,
        2,
        True,
        attempt=1,
    ),
    # a cut stream: one chunk, then the connection ended
    Record(
        3,
        1,
        2 * S,
        2 * S + MS,
        2 * S + 3 * MS,
        (2 * S + 40 * MS,),
        (1,),
        2 * S + 60 * MS,
        200,
        ErrorKind.STREAM_CUT,
        "stream ended before [DONE]",
        30,
        1,
        30,
        8,
        True,
    ),
    # never sent: the run stopped first
    Record(
        4,
        1,
        3 * S,
        None,
        end_ns=3 * S,
        error=ErrorKind.NOT_SENT,
        planned_prompt_tokens=20,
        planned_output_tokens=4,
    ),
]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A journal and its result on disk, as a run leaves them."""
    jpath = tmp_path / "r.journal.jsonl"
    w = JournalWriter(jpath, HEADER)
    for r in RECORDS:
        w.write_record(r)
    w.close(
        {
            "end_ns": 3 * S,
            "complete": True,
            "t0_wall_s": T0_WALL_S,
            "phase_starts_ns": [0, S],
            "phase_ends_ns": [S, 3 * S],
        }
    )
    dump_result(build_result(read_journal(jpath), str(jpath)), tmp_path / "r.json")
    return tmp_path / "r.json"


def _expected(r: Record) -> dict[str, Any]:
    """What a row must say about a Record: its own fields and its derived metrics."""

    def ms(ns: float | None) -> float | None:
        return None if ns is None else ns / MS

    return {
        "seq": r.seq,
        "attempt": r.attempt,
        "phase_index": r.phase,
        "status": r.status,
        "error": r.error_class,
        "intended_ns": r.intended_ns,
        "sent_ns": r.sent_ns,
        "headers_ns": r.headers_ns,
        "first_token_ns": r.first_token_ns,
        "last_token_ns": r.last_token_ns,
        "end_ns": r.end_ns,
        "chunks": len(r.chunk_ns),
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "retried": r.retried,
        "retry_after_s": r.retry_after_s,
        "ttft_ms": ms(r.ttft_ns),
        "tpot_ms": ms(r.tpot_ns),
        "e2e_ms": ms(r.e2e_ns),
        "ttft_from_schedule_ms": ms(r.ttft_from_schedule_ns),
        "e2e_from_schedule_ms": ms(r.e2e_from_schedule_ns),
        # send lag: a first attempt's only (a retry's late send is its backoff, metrics.py)
        "send_lag_ms": ms(r.sent_ns - r.intended_ns)
        if r.attempt == 0 and r.sent_ns is not None
        else None,
        "intended_unix_s": T0_WALL_S + r.intended_ns / S,
    }


def _csv_value(text: str) -> Any:
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _read(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "csv":
        with open(path, newline="") as f:
            return [{k: _csv_value(v) for k, v in row.items()} for row in csv.DictReader(f)]
    if fmt == "jsonl":
        return [orjson.loads(line) for line in path.read_bytes().splitlines()]
    pq = pytest.importorskip(
        "pyarrow.parquet", reason="the parquet extra (pyarrow) is not installed"
    )
    return pq.read_table(path).to_pylist()


def _need(fmt: str) -> None:
    """parquet needs the optional pyarrow (the README's plain `pip install -e '.[test]'` lacks it)."""
    if fmt == "parquet":
        pytest.importorskip(
            "pyarrow.parquet", reason="the parquet extra (pyarrow) is not installed"
        )


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    for k, v in want.items():
        if isinstance(v, float):
            assert got[k] == pytest.approx(v, rel=1e-12), k
        else:
            assert got[k] == v, k


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_request_rows_equal_the_journal_records(run, tmp_path, fmt, capsys):
    _need(fmt)
    out = tmp_path / f"rows.{fmt}"
    assert main(["export", str(run), "--format", fmt, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"{len(RECORDS)} rows -> {out}"
    rows = _read(out, fmt)
    assert list(rows[0]) == list(REQUEST_COLUMNS)
    want = sorted(RECORDS, key=lambda r: (r.seq, r.attempt))
    assert len(rows) == len(want)
    for got, r in zip(rows, want, strict=True):
        _same(got, _expected(r))
    assert [r["phase"] for r in rows] == ["warm", "main", "main", "main", "main", "main"]
    assert [r["send_lag_ms"] for r in rows if r["seq"] == 2] == [
        pytest.approx(1.0),
        None,
    ]  # retry: empty


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_token_rows_equal_the_journal_stamps(run, tmp_path, fmt):
    _need(fmt)
    out = tmp_path / f"tokens.{fmt}"
    assert main(["export", str(run), "--format", fmt, "--tokens", "--out", str(out)]) == 0
    rows = _read(out, fmt)
    assert list(rows[0]) == list(TOKEN_COLUMNS)
    for r in RECORDS:
        mine = [x for x in rows if (x["seq"], x["attempt"]) == (r.seq, r.attempt)]
        assert tuple(x["t_ns"] for x in mine) == r.chunk_ns
        assert tuple(x["tokens"] for x in mine) == (r.chunk_tokens or (1,) * len(r.chunk_ns))
        gaps = [x["gap_ns"] for x in mine]
        assert gaps == [b - a for a, b in zip((r.sent_ns, *r.chunk_ns), r.chunk_ns, strict=False)]


def test_the_journal_itself_can_be_exported(run, tmp_path):
    out = tmp_path / "rows.jsonl"
    assert (
        main(
            [
                "export",
                str(run.with_name("r.journal.jsonl")),
                "--format",
                "jsonl",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert len(out.read_bytes().splitlines()) == len(RECORDS)


def test_vllm_shape(run, tmp_path):
    out = tmp_path / "vllm.json"
    assert main(["export", str(run), "--format", "vllm", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    # vLLM's keys (vllm/benchmarks/serve.py, v0.32), one entry per measured request (last attempt)
    assert (d["date"], d["backend"], d["model_id"], d["num_prompts"]) == (
        "20261130-010203",
        "openai-chat",
        "m",
        4,
    )
    assert (d["request_rate"], d["burstiness"], d["max_concurrency"]) == (4.0, 0.5, 8)
    assert (d["completed"], d["failed"]) == (2, 2)
    assert d["ttfts"] == pytest.approx([0.049, 0.040, 0.0, 0.0])  # seconds; 0 for a failure
    assert d["latencies"] == pytest.approx([0.090, 0.091, 0.0, 0.0])  # end - sent
    assert d["itls"][0] == pytest.approx([0.030, 0.010]) and d["itls"][2:] == [[], []]
    assert d["output_lens"] == [5, 2, 0, 0] and d["input_lens"] == [100, 40, 30, 20]
    assert d["errors"][:2] == ["", ""] and d["errors"][2] == "stream ended before [DONE]"
    assert (d["total_input_tokens"], d["total_output_tokens"]) == (140, 7)
    # ms figures: the result's own statistics (issue 45: `--brief` prints them; one computation),
    # DESIGN.md's TPOT = (last - first token) / (output - 1), E2E to the last token
    assert d["mean_ttft_ms"] == pytest.approx(44.5)
    summary = json.loads(run.read_text())["summary"]["latency_ms"]
    for name, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        for stat, theirs in (("mean", "mean"), ("median", "p50"), ("p99", "p99")):
            assert d[f"{stat}_{name}_ms"] == pytest.approx(summary[ours][theirs]), (stat, name)
    assert d["duration"] > 0 and d["request_throughput"] == pytest.approx(2 / d["duration"])
    assert d["max_concurrent_requests"] == 1


def test_rows_in_memory_match_the_files(run):
    j = read_journal(run.with_name("r.journal.jsonl"))
    assert [r["seq"] for r in request_rows(j)] == [0, 1, 2, 2, 3, 4]
    assert vllm_result(j, json.loads(run.read_text()))["num_prompts"] == 4


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--format", "vllm", "--tokens"], "--tokens: "),
        (
            ["--format", "csv", "--out", "/nonexistent-dir/x.csv"],
            "--out /nonexistent-dir/x.csv: cannot write",
        ),
    ],
)
def test_bad_export_flags_exit_2(run, capsys, argv, fragment):
    args = ["export", str(run), *argv]
    if "--out" not in argv:
        args += ["--out", str(run.with_name("x"))]
    assert main(args) == 2
    assert fragment in capsys.readouterr().err


def test_a_result_without_its_journal_says_so(run, capsys):
    run.with_name("r.journal.jsonl").unlink()
    assert main(["export", str(run), "--format", "csv", "--out", str(run.with_name("x.csv"))]) == 2
    assert "journal is not found" in capsys.readouterr().err
