"""scenarios/agent.toml on the simulator, in one process and in two worker processes: the same
sessions take the same steps (the simulator's tool-call decision is fixed by the request and
the seed), every request has one record, the history's prefix hits the simulator's prefix
cache, and the result's `agents` block fits the published schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.server.launcher import start_sim

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "agent.toml"
SETS = [
    "phases.1.requests=4",
    "phases.0.arrival.rate=20",
    "phases.1.arrival.rate=20",
    'workload.agent.tool_time="10ms"',
    "workload.agent.steps=4",
]


def _run(tmp_path: Path, url: str, name: str, *flags: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    argv = [sys.executable, "-m", "harness", "run", str(SCENARIO), "--out", str(out)]
    argv += ["--target", url, "--quiet", *flags]
    for s in SETS:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_agent_runs_alike_in_one_process_and_in_workers(tmp_path: Path) -> None:
    sim_args = ["--speedup", "20", "--tool-call-share", "0.75", "--seed", "26"]
    with start_sim(sim_args, tmp_path / "sim.log") as sim:
        one = _run(tmp_path, sim.base_url, "one")
        two = _run(tmp_path, sim.base_url, "two", "--workers", "2")
    assert two["options"]["workers"] == 2
    for r in (one, two):
        assert r["complete"] and r["accounting"]["balanced"]
        ag = r["summary"]["agents"]
        assert ag["sessions"] == 4 and ag["child_requests"] > 0
        assert sum(ag["ended"].values()) == 4 and ag["ended"]["failed"] == 0
        assert ag["by_step"][0]["requests"] == 4
        # the simulator reports cached tokens per request: the history of step 2 on is found
        shares = [s["cached_share"] for s in ag["by_step"]]
        assert all(x is not None for x in shares) and max(shares[1:]) > shares[0], shares
        totals = r["server_metrics"]["totals"]
        assert (
            totals["vllm:prefix_cache_hits_total"] > 0.5 * totals["vllm:prefix_cache_queries_total"]
        )
    a, b = one["summary"]["agents"], two["summary"]["agents"]
    assert a["ended"] == b["ended"] and a["requests"] == b["requests"]
    assert [s["requests"] for s in a["by_step"]] == [s["requests"] for s in b["by_step"]]
    _assert_schema_valid(two)


def _assert_schema_valid(result: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")  # in the test extra
    from harness.schema import RESULT_SCHEMA_PATH

    doc = {k: v for k, v in result.items() if not k.startswith("_")}
    errors = [
        f"{'.'.join(map(str, e.path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(
            json.loads(RESULT_SCHEMA_PATH.read_text())
        ).iter_errors(doc)
    ]
    assert errors == []
