"""Issue 45: `run`'s exit status and terminal output. A missed SLO exits 99 (k6's convention,
--no-slo-exit turns it off), per run under --repeat; `--brief` ends with the SLO verdicts and
health warnings, and its figures are the saved vLLM JSON's; vLLM's --backend names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.report_brief import has_reasoning, health_lines, render_brief
from harness.analysis.slo_verdict import (
    SLO_FAIL_EXIT,
    fold_statuses,
    run_status,
    verdict_line,
)
from harness.cli import main
from harness.config.vllm_flags import BACKENDS_REFUSED, VLLM_BACKENDS, backend_endpoint
from harness.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
QUICK = [
    "--num-prompts",
    "8",
    "--max-concurrency",
    "4",
    "--input-len",
    "32",
    "--output-len",
    "6",
    "--set",
    "sim.speedup=50",
]


def _harness(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def _verdict(name: str, value: float | None, limit: float, ok: bool | None) -> dict[str, Any]:
    return {"name": name, "kind": "aggregate", "value_ms": value, "limit_ms": limit, "pass": ok}


# --- exit status ---------------------------------------------------------------------------


def test_a_missed_slo_exits_99_and_no_slo_exit_turns_it_off(tmp_path: Path) -> None:
    failed = _harness(tmp_path, *QUICK, "--slo", "ttft_p99=1us", "--out", "a.json")
    assert failed.returncode == SLO_FAIL_EXIT == 99, failed.stderr[-2000:]
    assert "SLO ttft_p99 <= 0.001 ms" in failed.stdout and "FAIL" in failed.stdout
    assert "exit 99" in failed.stderr and "--no-slo-exit" in failed.stderr
    assert failed.stdout.strip().splitlines()[-1] == str(tmp_path / "a.json")  # path still last
    off = _harness(tmp_path, *QUICK, "--slo", "ttft_p99=1us", "--no-slo-exit", "--quiet")
    assert off.returncode == 0, off.stderr[-2000:]
    met = _harness(tmp_path, *QUICK, "--slo", "ttft_p99=60s", "--quiet")
    assert met.returncode == 0, met.stderr[-2000:]


def test_repeat_reports_each_runs_verdict_and_exits_99(tmp_path: Path) -> None:
    proc = _harness(
        tmp_path, *QUICK, "--slo", "ttft_p99=1us", "--repeat", "2", "--out", "r.json", "--brief"
    )
    assert proc.returncode == SLO_FAIL_EXIT, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("run ") and ": SLO" in ln]
    assert [ln.split(":")[0] for ln in lines] == ["run 1 of 2", "run 2 of 2"], proc.stderr
    assert all("SLO FAIL: ttft_p99" in ln for ln in lines)
    assert "2 of 2 runs missed their SLO: exit 99" in proc.stderr


def test_statuses_fold_most_serious_first() -> None:
    assert fold_statuses([0, SLO_FAIL_EXIT, 0]) == SLO_FAIL_EXIT
    assert fold_statuses([SLO_FAIL_EXIT, 1]) == 1  # an error outranks a missed SLO
    assert fold_statuses([1, 2, SLO_FAIL_EXIT]) == 2
    assert fold_statuses([SLO_FAIL_EXIT, 130, 1]) == 130
    assert fold_statuses([]) == 0
    result = {"summary": {"slo": [_verdict("ttft_p99", 5.0, 1.0, False)]}}
    assert run_status(0, result, slo_exit=True) == SLO_FAIL_EXIT
    assert run_status(0, result, slo_exit=False) == 0
    assert run_status(1, result, slo_exit=True) == 1  # an error stays an error
    unjudged = {"summary": {"slo": [_verdict("ttfo_p99", None, 1.0, None)]}}
    assert run_status(0, unjudged, slo_exit=True) == 0


def test_verdict_line_lists_failures_first() -> None:
    line = verdict_line(
        [_verdict("ttft_p99", 10.0, 1000.0, True), _verdict("ttfo_p99", 2695.0, 2000.0, False)]
    )
    assert line == "SLO FAIL: ttfo_p99 2,695 ms > 2,000 ms; ttft_p99 10.00 ms <= 1,000 ms"
    per_request = [{"name": "ttft", "kind": "per_request", "limit_ms": 5.0, "attainment": 0.5}]
    assert verdict_line(per_request) is None  # goodput counts it; it judges nothing


# --- --brief ---------------------------------------------------------------------------------


def _parse_brief(text: str) -> dict[tuple[str, str], float]:
    """(section, label) -> number from a printed brief block; sections are the dashed headings."""
    out: dict[tuple[str, str], float] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("-"):
            section = line.strip("- ")
            continue
        label, _, value = line.rpartition("  ")
        try:
            out[(section, label.strip())] = float(value.strip().replace(",", ""))
        except ValueError:
            continue
    return out


BRIEF_SECTIONS = {
    "ttft": "time to first token (ms)",
    "tpot": "time per output token, first excluded (ms)",
    "itl": "inter-token latency (ms)",
    "e2el": "end-to-end latency (ms)",
}


def test_brief_figures_equal_the_saved_vllm_json(tmp_path: Path) -> None:
    proc = _harness(
        tmp_path,
        *QUICK,
        "--result-dir",
        "rd",
        "--save-result",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    block = proc.stdout[: proc.stdout.index("vllm bench serve result: ")]
    printed = _parse_brief(block)
    saved_line = next(
        ln for ln in proc.stdout.splitlines() if ln.startswith("vllm bench serve result: ")
    )
    doc = json.loads(Path(saved_line.split(": ", 1)[1]).read_text())
    compared = 0
    for name, heading in BRIEF_SECTIONS.items():
        for label, key in (("mean", "mean"), ("median", "median"), ("p90", "p90"), ("p99", "p99")):
            shown = printed[(heading, label)]
            assert shown == round(doc[f"{key}_{name}_ms"], 2), (name, label, shown)
            compared += 1
    assert compared == 16
    assert printed[("", "successful requests")] == doc["completed"]
    assert printed[("", "total generated tokens")] == doc["total_output_tokens"]
    assert printed[("", "request throughput (req/s)")] == round(doc["request_throughput"], 2)
    tail = block.rstrip().splitlines()
    at = next(i for i, ln in enumerate(tail) if ln.strip("- ") == "SLOs and health")
    assert tail[at + 1] == "SLO: none set" and set(tail[-1]) == {"="}  # the block's end
    health = tail[at + 2 : -1]  # a loaded machine may starve the simulator: a warning, said
    assert health == ["health: no warning fired"] or all(h.startswith("WARNING: ") for h in health)


def test_brief_ends_with_every_slo_verdict_and_warning() -> None:
    result = {
        "complete": False,
        "stop_reason": "interrupted",
        "target": {"base_url": "http://127.0.0.1:1", "model": "m"},
        "client": {"warnings": ["send lag p99 9.0 ms > 5 ms", "event-loop lag p99 30 ms"]},
        "summary": {
            "requests": {"completed": 3, "failed": 0},
            "latency_ms": {},
            "slo": [
                _verdict("ttfo_p99", 2695.0, 2000.0, False),
                {"name": "ttft", "kind": "per_request", "limit_ms": 500.0, "attainment": 0.9},
            ],
        },
    }
    tail = render_brief(result).splitlines()[-7:]
    assert tail[0].strip("- ") == "SLOs and health"
    assert tail[1] == "SLO ttfo_p99 <= 2,000 ms: 2,695 ms FAIL"
    assert tail[2] == "SLO ttft <= 500.0 ms per request: met by 90.0%"
    assert tail[3] == "WARNING: the run is INCOMPLETE (interrupted)"
    assert tail[4:6] == [
        "WARNING: send lag p99 9.0 ms > 5 ms",
        "WARNING: event-loop lag p99 30 ms",
    ]
    assert set(tail[6]) == {"="}
    assert health_lines({"summary": {}}) == ["SLO: none set", "health: no warning fired"]


def test_brief_shows_ttfo_where_the_run_reasoned() -> None:
    stats = {"count": 4, "mean": 900.0, "p50": 850.0, "p99": 1500.0}
    summary = {
        "requests": {"completed": 4, "failed": 0},
        "latency_ms": {"ttft": {"count": 4, "mean": 50.0, "p50": 40.0, "p99": 90.0}, "ttfo": stats},
        "tokens": {"channels": {"reasoning_requests": 4}},
    }
    assert has_reasoning(summary)
    text = render_brief({"summary": summary}, ["ttft", "itl"])
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if "TTFO" in ln)
    assert "time to first token" in lines[at - 4]  # right after TTFT's section
    assert lines[at + 2].split() == ["median", "850.00"]
    no_reasoning = {**summary, "tokens": {"channels": {"reasoning_requests": 0}}}
    assert "TTFO" not in render_brief({"summary": no_reasoning})


# --- vLLM's --backend ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "endpoint"),
    [
        ("openai-chat", "chat"),
        ("openai", "completions"),
        ("vllm", "completions"),
        ("sglang", "completions"),
        ("llama.cpp", "completions"),
        ("openai-embeddings", "embeddings"),
    ],
)
def test_vllm_backend_names_map_to_an_endpoint(backend: str, endpoint: str) -> None:
    assert backend_endpoint(backend, None) == endpoint == VLLM_BACKENDS[backend]
    assert backend_endpoint(backend, endpoint) == endpoint  # a pasted --endpoint that agrees
    assert backend_endpoint(None, "responses") == "responses"


@pytest.mark.parametrize("backend", ["tgi", "openai-audio", "vllm-rerank", "deepspeed-mii", "nope"])
def test_backends_with_no_equivalent_are_refused_in_one_line(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--num-prompts", "2", "--backend", backend, "--explain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--backend {backend}" in err[0], err
    if backend in BACKENDS_REFUSED:
        assert BACKENDS_REFUSED[backend].split(";")[0] in err[0]
    else:
        assert "openai-chat" in err[0]  # names the allowed ones


def test_backend_and_endpoint_that_disagree_are_refused() -> None:
    with pytest.raises(UsageError, match="--backend openai-chat posts to the chat endpoint"):
        backend_endpoint("openai-chat", "completions")


def test_a_pasted_vllm_command_runs(tmp_path: Path) -> None:
    proc = _harness(
        tmp_path,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        *QUICK,
        "--out",
        "v.json",
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "v.json").read_text())["target"]["endpoint"] == "chat"


# --- sweep ----------------------------------------------------------------------------------

SWEEP_BASE = """
name = "tiny"
seed = 4
[workload]
prompt_tokens = { dist = "fixed", value = 32 }
output_tokens = { dist = "fixed", value = 8 }
[[phases]]
name = "main"
requests = 6
arrival = { process = "poisson", rate = 20.0 }
[slo]
ttft_p99 = "LIMIT"
[sim]
gpu = "L4"
speedup = 50.0
"""


def _sweep(tmp_path: Path, limit: str, *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "base.toml").write_text(SWEEP_BASE.replace("LIMIT", limit))
    (tmp_path / "sw.toml").write_text(
        'name = "s"\nscenario = "base.toml"\n[load]\nrate = [10.0, 20.0]\n'
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "harness", "sweep", "sw.toml", "--out", f"o-{limit}", *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_sweep_prints_each_points_verdict_and_exits_99_when_one_missed(tmp_path: Path) -> None:
    missed = _sweep(tmp_path, "1us")
    assert missed.returncode == SLO_FAIL_EXIT, missed.stderr[-2000:]
    status = [ln for ln in missed.stderr.splitlines() if "] point " in ln and ": SLO" in ln]
    assert len(status) == 2 and all("SLO FAIL: ttft_p99" in ln for ln in status), status
    assert "2 sweep points missed the SLO: rate=10.0, rate=20.0: exit 99" in missed.stderr
    off = _sweep(tmp_path, "1us", "--resume", "--no-slo-exit", "--quiet")  # nothing reruns
    assert off.returncode == 0, off.stderr[-2000:]
    met = _sweep(tmp_path, "60s")
    assert met.returncode == 0, met.stderr[-2000:]
    assert sum("SLO PASS: ttft_p99" in ln for ln in met.stderr.splitlines()) == 2
