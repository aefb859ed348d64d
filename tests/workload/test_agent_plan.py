"""Agent sessions in the plan: every session the same layout (parent steps, then each child's),
tasks and tool results drawn ahead and seeded, tool times before later steps only, and
`[workload] agent` errors that name the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario

BASE = """
name = "t"
seed = SEED
[workload]
prompt_tokens = { dist = "fixed", value = 1000 }
output_tokens = { dist = "fixed", value = 8 }
tools = 1
agent = AGENT
[[phases]]
name = "p"
requests = 5
arrival = { process = "poisson", rate = 5 }
"""
AGENT = (
    '{ steps = 4, tool_time = { dist = "uniform", min = "1s", max = "2s" }, '
    'tool_result_tokens = { dist = "uniform", min = 10, max = 20 }, '
    "fan_out = { children = 2, after_step = 1, steps = 3 } }"
)


def _plan(tmp_path: Path, agent: str = AGENT, seed: int = 3, extra: str = ""):
    p = tmp_path / "a.toml"
    p.write_text(
        BASE.replace("AGENT", agent)
        .replace("SEED", str(seed))
        .replace("tools = 1", "tools = 1" + extra)
    )
    return build_plan(load_scenario(str(p), [], None))


def test_the_plan_is_deterministic_and_lays_every_session_out_alike(tmp_path: Path) -> None:
    a, b, other = _plan(tmp_path), _plan(tmp_path), _plan(tmp_path, seed=4)
    assert a.digest() == b.digest() != other.digest()
    pp = a.phases[0]
    sp = pp.sessions
    assert sp is not None and sp.agent is not None
    per = 4 + 2 * 3  # the parent's steps, then two children of three
    assert sp.agent.requests == per and pp.count == 5 * per
    assert np.array_equal(sp.starts, np.arange(6) * per)
    task = np.tile([1, 0, 0, 0, 1, 0, 0, 1, 0, 0], 5).astype(bool)  # parent 0, child 0s
    assert (pp.prompt_tokens[task] == 1000).all()
    assert ((pp.prompt_tokens[~task] >= 10) & (pp.prompt_tokens[~task] <= 20)).all()
    join = np.tile([0, 0, 1, 0, 0, 0, 0, 0, 0, 0], 5).astype(bool)  # the step after the fan-out
    assert (sp.think_s[task | join] == 0).all()
    assert ((sp.think_s[~(task | join)] >= 1) & (sp.think_s[~(task | join)] <= 2)).all()
    assert a.workload["agent"]["requests_per_session"] == per
    assert a.workload["agent"]["after_step"] == 1
    assert any(n.startswith("agent sessions:") for n in a.notes)


@pytest.mark.parametrize(
    ("agent", "extra", "message"),
    [
        # the step limit is a count
        (
            "{ steps = 0, tool_result_tokens = 8 }",
            "",
            "workload.agent.steps: expected a value >= 1",
        ),
        # tool results have a size
        ("{ steps = 3 }", "", "workload.agent.tool_result_tokens: is required"),
        # a fan-out after the last step could never join
        (
            "{ steps = 3, tool_result_tokens = 8, fan_out = { children = 2, steps = 2, after_step = 2 } }",
            "",
            "workload.agent.fan_out.after_step: expected a value <= 1",
        ),
        (
            "{ steps = 3, tool_result_tokens = 8, compact_at = 100, summary_tokens = 100 }",
            "",
            "workload.agent.summary_tokens: must be below compact_at",
        ),
        (
            "{ steps = 3, tool_result_tokens = 8, summary_tokens = 10 }",
            "",
            "workload.agent.summary_tokens: applies with compact_at only",
        ),
        (
            '{ steps = 3, tool_result_tokens = 8, tool_time = "-1s" }',
            "",
            "workload.agent.tool_time",
        ),
        ("{ steps = 3, tool_result_tokens = 8, turns = 3 }", "", "workload.agent.turns"),
        # an agent without tools has nothing to call
        ("{ steps = 3, tool_result_tokens = 8 }", "REMOVE", "workload.agent: needs tools = N"),
        (
            "{ steps = 3, tool_result_tokens = 8 }",
            "\nconversation = { turns = 2 }",
            "workload.agent: an agent session is a conversation of its own",
        ),
    ],
)
def test_agent_errors_name_the_key(tmp_path: Path, agent: str, extra: str, message: str) -> None:
    p = tmp_path / "a.toml"
    text = BASE.replace("AGENT", agent).replace("SEED", "3")
    text = (
        text.replace("tools = 1\n", "")
        if extra == "REMOVE"
        else text.replace("tools = 1", "tools = 1" + extra)
    )
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_scenario(str(p), [], None)


@pytest.mark.parametrize("endpoint", ["completions", "responses", "embeddings"])
def test_an_agent_needs_the_chat_endpoint(tmp_path: Path, endpoint: str) -> None:
    from harness.workload.scenario import check_endpoint_workload

    p = tmp_path / "a.toml"
    p.write_text(BASE.replace("AGENT", AGENT).replace("SEED", "3"))
    scn = load_scenario(str(p), [], None)
    check_endpoint_workload(scn, "chat")  # fine
    with pytest.raises(ConfigError) as exc:
        check_endpoint_workload(scn, endpoint)
    assert exc.value.key == "workload.agent" and f'"{endpoint}"' in str(exc.value)
