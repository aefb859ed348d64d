"""The shipped trace and dataset scenarios, run end to end against the simulator (started here on
127.0.0.1 and stopped): arrival times as the trace says, lengths as the server's usage says, and the
server's prefix cache hitting where the trace shares prefixes and not where it does not."""

from __future__ import annotations

import json
import os
import urllib.request
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.record.journal import read_journal
from harness.server.launcher import start_sim

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "tests" / "data" / "traces"
pytestmark = pytest.mark.slow


def _harness(argv: list[str], cwd: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`harness ARGV` in this process, in `cwd`: the command's own code path without an
    interpreter's start-up per run (the subprocess is not what these tests check). Asserts exit 0
    and returns what the command wrote to stderr."""
    capsys.readouterr()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        rc = main(argv)
    finally:
        os.chdir(old)
    err = capsys.readouterr().err
    assert rc == 0, err[-3000:]
    return err


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str, base_url: str, *sets: str
) -> tuple[dict, object]:
    out = tmp_path / f"{scenario}.json"
    argv = [
        "run",
        str(REPO / "scenarios" / f"{scenario}.toml"),
        "--out",
        str(out),
        "--target",
        base_url,
        "--set",
        'target.endpoint="completions"',
    ]
    for s in sets:
        argv += ["--set", s]
    stderr = _harness(argv, tmp_path, capsys)
    result = json.loads(out.read_text())
    return result | {"_stderr": stderr}, read_journal(
        out.with_name(out.stem + ".journal.jsonl")
    ).columns()


def _modelled_busy_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str, caching: bool, *sets: str
) -> float:
    """Run a scenario on the simulator `run` starts itself, with prefix caching on or off, and return
    the simulator's own account of its busy time: the modelled duration of all its steps (divided by
    its speedup). Prompt tokens found in the prefix cache are not computed, so a workload whose
    prompts share prefixes costs the server less with caching on."""
    out = tmp_path / f"{scenario}-{caching}.json"
    argv = [
        "run",
        str(REPO / "scenarios" / f"{scenario}.toml"),
        "--out",
        str(out),
        "--quiet",
        "--set",
        'target.endpoint="completions"',
        "--set",
        f"sim.enable_prefix_caching={str(caching).lower()}",
    ]
    for s in sets:
        argv += ["--set", s]
    _harness(argv, tmp_path, capsys)
    result = json.loads(out.read_text())
    assert result["summary"]["requests"]["failed"] == 0
    return float(result["target"]["simulator"]["model_s"])


def _prefix_counters(base_url: str) -> tuple[float, float] | None:
    """vLLM's prefix-cache counters from /metrics (queries, hits), None when not exported."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
            if line.startswith((name + "_total", name + "{", name + " ")):
                found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    if len(found) < 2:
        return None
    return found["vllm:prefix_cache_queries"], found["vllm:prefix_cache_hits"]


def _check_usage(cols) -> None:  # type: ignore[no-untyped-def]
    """Every request completed, and the server's usage equals the planned lengths (completions
    endpoint: the simulator counts the prompt's words, and ignore_eos makes it generate them all)."""
    assert cols.ok.all()
    assert np.array_equal(cols.prompt_tokens, cols.planned_prompt)
    assert np.array_equal(cols.output_tokens, cols.planned_output)


def test_azure_trace_replays_its_times_and_lengths(tmp_path, capsys):
    with start_sim(["--speedup", "10"], tmp_path / "sim.log") as sim:
        result, cols = _run(
            tmp_path,
            capsys,
            "trace_azure",
            sim.base_url,
            "phases.0.arrival.duration=30s",
            "phases.0.arrival.time_scale=0.5",
        )
        counters = _prefix_counters(sim.base_url)
    assert "read as azure (detected from its first line)" in result["_stderr"]
    rows = [
        line.split(",")
        for line in (TRACES / "azure_code_first10min.csv").read_text().splitlines()[1:]
    ]
    t0 = datetime.fromisoformat(rows[0][0])
    t = np.array([(datetime.fromisoformat(r[0]) - t0).total_seconds() for r in rows])
    inside = (t >= 180) & (t < 210)
    want_s = (t[inside] - 180) * 0.5
    assert len(cols.seq) == inside.sum() > 100
    assert np.allclose(cols.intended / 1e9, want_s, atol=1e-6)  # sent on the trace's schedule
    assert (cols.sent >= cols.intended).all()  # never early
    assert cols.planned_prompt.tolist() == [
        int(r[1]) for r, k in zip(rows, inside, strict=True) if k
    ]
    assert cols.planned_output.tolist() == [
        int(r[2]) for r, k in zip(rows, inside, strict=True) if k
    ]
    _check_usage(cols)
    trace = result["plan"]["workload"]["traces"]["replay"]
    assert (
        trace["format"] == "azure"
        and trace["format_detected"]
        and trace["requests_planned"] == inside.sum()
    )
    assert result["plan"]["workload"]["implied_prefix_reuse"]["share"] == 0.0
    # the workload view: the trace's own curve (its rows per bin, from the plan) beside what was sent
    curve = trace["curve"]
    assert (
        sum(curve["requests"]) == inside.sum() and curve["trace_bin_s"] == 2 * curve["bin_s"]
    )  # x0.5
    view = result["workload_view"]["traces"]["replay"]
    assert view["trace_per_s"] == [n / curve["trace_bin_s"] for n in curve["requests"]]
    assert sum(view["sent_per_s"]) * view["bin_s"] == inside.sum()
    assert view["shape_correlation"] > 0.95  # sent in the trace's shape
    assert counters is not None, "the simulator exports vLLM's prefix-cache counters"
    queries, hits = counters
    assert queries > 0 and hits / queries < 0.01  # nothing shared, (almost) nothing hit


def test_mooncake_trace_shares_prefixes_the_server_can_hit(tmp_path, capsys):
    with start_sim(
        ["--speedup", "20", "--model", "Llama-3.1-8B-Instruct"], tmp_path / "sim.log"
    ) as sim:
        result, cols = _run(
            tmp_path, capsys, "trace_mooncake", sim.base_url, "phases.0.arrival.time_scale=0.25"
        )
        counters = _prefix_counters(sim.base_url)
    rows = [
        json.loads(x) for x in (TRACES / "mooncake_rows3840-3959.jsonl").read_text().splitlines()
    ]
    want_s = [(r["timestamp"] - rows[0]["timestamp"]) / 1000 * 0.25 for r in rows]
    assert np.allclose(cols.intended / 1e9, want_s, atol=1e-6)
    assert cols.planned_prompt.tolist() == [r["input_length"] for r in rows]
    _check_usage(cols)
    implied = result["plan"]["workload"]["implied_prefix_reuse"]
    assert implied["share"] == pytest.approx(0.545, abs=0.001)
    assert "implied prefix reuse: 54.5 %" in result["_stderr"]
    assert counters is not None, "the simulator exports vLLM's prefix-cache counters"
    queries, hits = counters
    # The server hits whole blocks of what it still holds: at most the implied share, and well above 0
    assert 0.3 < hits / queries <= implied["share"] + 0.01


def test_sharegpt_scenario_sends_the_dataset_prompts(tmp_path, capsys):
    with start_sim(["--speedup", "10"], tmp_path / "sim.log") as sim:
        result, cols = _run(tmp_path, capsys, "sharegpt", sim.base_url, "phases.1.duration=5s")
    convs = json.loads((REPO / "scenarios" / "datasets" / "sharegpt_sample.json").read_text())
    answers = {
        len(c["conversations"][1]["value"].split()) for c in convs if len(c["conversations"]) == 2
    }
    assert set(cols.planned_output.tolist()) <= answers
    _check_usage(cols)
    ds = result["plan"]["workload"]["dataset"]
    assert ds["usable_rows"] == 30 and ds["output_tokens_from"] == "answers"
    assert "prompts: sharegpt dataset" in result["_stderr"]


def test_the_servers_prefix_cache_saves_work_where_the_trace_shares_prefixes_and_not_elsewhere(
    tmp_path, capsys
):
    mooncake = ("sim.speedup=20", "phases.0.arrival.time_scale=0.25")
    on = _modelled_busy_s(tmp_path, capsys, "trace_mooncake", True, *mooncake)
    off = _modelled_busy_s(tmp_path, capsys, "trace_mooncake", False, *mooncake)
    # 54.5 % of the prompt tokens are in blocks sent before: with caching the server computes about
    # half the prefill (measured: 0.57 of the busy time without caching)
    assert on < 0.8 * off, (on, off)
    # speedup 4: the busy time (~0.9 s, printed to 10 ms) is resolved to about 1 %
    azure = ("sim.speedup=4", "phases.0.arrival.duration=10s", "phases.0.arrival.time_scale=0.5")
    on = _modelled_busy_s(tmp_path, capsys, "trace_azure", True, *azure)
    off = _modelled_busy_s(tmp_path, capsys, "trace_azure", False, *azure)
    assert 0.9 * off < on < 1.1 * off, (on, off)  # nothing shared: caching changes (almost) nothing
