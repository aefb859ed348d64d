"""The plan: deterministic by seed, phases laid out as the scenario says."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.workload.plan import build_plan
from harness.workload.prompts import WORDS, shared_prefix, synthesize
from harness.workload.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]


def _is_scenario(path: Path) -> bool:
    """Sweep files (which name a base `scenario`) live beside scenarios but are not one."""
    import tomllib

    return "scenario" not in tomllib.loads(path.read_text(encoding="utf-8"))


SCENARIOS = sorted(p for p in (REPO / "scenarios").glob("*.toml") if _is_scenario(p))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_shipped_scenario_loads_and_plans_deterministically(path):
    a = build_plan(load_scenario(path))
    b = build_plan(load_scenario(path))
    assert a.digest() == b.digest()
    assert a.total_requests > 0


def test_seed_changes_the_plan():
    p = REPO / "scenarios" / "burst.toml"
    assert build_plan(load_scenario(p)).digest() != build_plan(load_scenario(p, seed=8)).digest()


def test_phase_layout(write_scenario):
    path = write_scenario("""
name = "t"
seed = 3
[workload]
prompt_tokens = { dist = "fixed", value = 10 }
output_tokens = { dist = "uniform", min = 5, max = 9 }
[[phases]]
name = "a"
duration = "2s"
arrival = { process = "constant", rate = 2 }
[[phases]]
name = "b"
requests = 5
arrival = { process = "poisson", rate = 100 }
[[phases]]
name = "c"
requests = 7
arrival = { process = "closed", users = 3 }
""")
    plan = build_plan(load_scenario(path))
    a, b, c = plan.phases
    assert a.offsets_s.tolist() == [0.0, 0.5, 1.0, 1.5] and a.duration_s == 2.0
    assert b.count == 5 and b.first_seq == 4 and b.duration_s == pytest.approx(b.offsets_s[-1])
    assert c.closed and c.count == 7 and c.users == 3 and c.first_seq == 9
    assert plan.total_requests == 16
    assert set(a.prompt_tokens.tolist()) == {10}
    assert a.output_tokens.min() >= 5 and a.output_tokens.max() <= 9


def test_trace_phase_takes_lengths_from_the_trace():
    plan = build_plan(load_scenario(REPO / "scenarios" / "trace.toml"))
    ph = plan.phases[0]
    lines = (REPO / "scenarios" / "traces" / "sample.jsonl").read_text().splitlines()
    import json

    first = json.loads(lines[0])
    assert ph.count == len(lines)
    assert ph.offsets_s[0] == pytest.approx(first["t"])
    assert (
        ph.prompt_tokens[0] == first["prompt_tokens"]
        and ph.output_tokens[0] == first["output_tokens"]
    )


def test_time_scale_stretches_a_trace():
    p = REPO / "scenarios" / "trace.toml"
    a = build_plan(load_scenario(p)).phases[0].offsets_s
    b = build_plan(load_scenario(p, ["phases.0.arrival.time_scale=2.0"])).phases[0].offsets_s
    assert np.allclose(b, 2 * a)


def test_prompts_are_distinct_and_sized():
    a, b = synthesize(100, 1), synthesize(100, 2)
    assert a != b and len(a.split()) == 100 and len(b.split()) == 100
    assert synthesize(100, 1) == a
    assert all(w in WORDS for w in a.split())
    assert len(shared_prefix(64, 7).split()) == 64 and shared_prefix(0, 7) == ""
    assert len(set(WORDS)) == len(WORDS)
