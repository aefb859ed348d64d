"""scenarios/reasoning.toml runs on the simulator (started by the run) in both API styles: the
answers reason, then answer or call a tool, and the result counts each channel, agreeing with
the simulator's usage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "reasoning.toml"
pytestmark = pytest.mark.slow
SHORT = ['phases.0.duration="0.5s"', 'phases.1.duration="2.5s"', "sim.speedup=40"]


@pytest.mark.parametrize(
    "sets",
    [[], ['sim.api_style="openai-strict"', "workload.ignore_eos=false"]],
    ids=["vllm", "strict"],
)
def test_reasoning_scenario_on_the_simulator(tmp_path: Path, sets: list[str]) -> None:
    out = tmp_path / "r.json"
    argv = [sys.executable, "-m", "harness", "run", str(SCENARIO), "--out", str(out), "--quiet"]
    for s in [*SHORT, *sets]:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode in (0, 99), proc.stderr[-3000:]  # 99: an SLO missed, still a result
    s = json.loads(out.read_text())["summary"]
    ch = s["tokens"]["channels"]
    done = s["requests"]["completed"]
    assert done > 0 and ch["reasoning_requests"] == done  # every answer thought first
    assert ch["answer_requests"] > 0 and ch["tool_requests"] > 0  # tool_call_share 0.5
    assert ch["answer_requests"] + ch["tool_requests"] == done
    assert ch["usage_reasoning_tokens"] == ch["reasoning_tokens"]
    assert ch["reasoning_disagree_requests"] == 0
    lat = s["latency_ms"]
    assert lat["ttfo"]["count"] == ch["answer_requests"]
    assert lat["ttft_tool"]["count"] == ch["tool_requests"]
    assert lat["ttfo"]["p50"] > lat["ttft"]["p50"]  # 64-512 tokens of thought before answering
