"""Multi-turn sessions in the plan: sessions laid out turn after turn, seeded draws, think times
before later turns only, a ShareGPT conversation's own turns, and the history a turn carries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.client.openai import build_body
from harness.client.session import kept_history
from harness.errors import ConfigError
from harness.workload.conversation import MAX_TURNS
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
MULTI = REPO / "tests" / "data" / "datasets" / "sharegpt_multiturn.json"

BASE = """
name = "t"
seed = 3
[workload]
prompt_tokens = { dist = "uniform", min = 10, max = 20 }
output_tokens = { dist = "fixed", value = 8 }
conversation = CONV
[[phases]]
name = "p"
PHASE
"""
OPEN = 'requests = 40\narrival = { process = "poisson", rate = 5 }'


def _plan(write_scenario, conv: str, phase: str = OPEN, seed: int = 3):
    return build_plan(
        load_scenario(
            write_scenario(
                BASE.replace("CONV", conv)
                .replace("PHASE", phase)
                .replace("seed = 3", f"seed = {seed}")
            )
        )
    )


def test_open_loop_arrivals_start_sessions_and_turns_are_laid_out_in_order(write_scenario):
    plan = _plan(
        write_scenario, '{ turns = { dist = "uniform", min = 1, max = 5 }, think_time = "2s" }'
    )
    pp = plan.phases[0]
    sp = pp.sessions
    assert sp is not None and sp.count == 40 == len(pp.offsets_s)  # requests = 40 -> 40 sessions
    turns = np.diff(sp.starts)
    assert turns.min() >= 1 and turns.max() <= 5 and len(set(turns.tolist())) > 1
    assert (
        pp.count == turns.sum() == plan.total_requests == len(pp.output_tokens)
    )  # requests apart from sessions
    assert (sp.think_s[sp.starts[:-1]] == 0).all()  # no wait before a first turn
    later = np.ones(pp.count, dtype=bool)
    later[sp.starts[:-1]] = False
    assert (sp.think_s[later] == 2.0).all()
    assert plan.workload["conversation"]["phases"]["p"] == {
        "sessions_planned": 40,
        "requests_planned": pp.count,
    }
    assert any("multi-turn sessions" in n and "40 sessions" in n for n in plan.notes)


def test_sessions_are_seeded(write_scenario):
    conv = '{ turns = { dist = "uniform", min = 1, max = 5 }, think_time = { dist = "exponential", mean = "1s" } }'
    a, b = _plan(write_scenario, conv), _plan(write_scenario, conv)
    assert a.digest() == b.digest()
    assert a.digest() != _plan(write_scenario, conv, seed=4).digest()
    think = a.phases[0].sessions.think_s
    assert think.min() == 0 and 0.5 < think[think > 0].mean() < 2.0


def test_closed_loop_requests_count_sessions(write_scenario):
    plan = _plan(
        write_scenario, "{ turns = 3 }", 'requests = 6\narrival = { process = "closed", users = 2 }'
    )
    pp = plan.phases[0]
    assert (
        pp.closed and pp.sessions.count == 6 and pp.count == 18 == plan.total_requests
    )  # 6 sessions x 3 turns


def test_sharegpt_conversations_give_the_turns(write_scenario):
    path = write_scenario(f"""
name = "t"
[workload]
dataset = {{ format = "sharegpt", file = "{MULTI}", order = "file" }}
conversation = {{ think_time = "0s" }}
[[phases]]
name = "p"
requests = 4
arrival = {{ process = "constant", rate = 10 }}
""")
    plan = build_plan(load_scenario(path))
    pp = plan.phases[0]
    convs = json.loads(MULTI.read_text())
    # m3's last human message has no answer to take a length from: its session has 1 turn
    assert np.diff(pp.sessions.starts).tolist() == [3, 2, 1, 1]
    humans = [
        t["value"]
        for c in convs
        for i, t in enumerate(c["conversations"])
        if t["from"] == "human" and i + 1 < len(c["conversations"])
    ]
    texts = [plan.prompt_text(int(pp.prompt_tokens[k]), pp.first_seq + k) for k in range(pp.count)]
    assert texts == humans
    answers = [t["value"] for c in convs for t in c["conversations"] if t["from"] == "gpt"]
    assert pp.output_tokens.tolist() == [len(a.split()) for a in answers]  # the answers' lengths
    # `turns` caps a conversation's turns
    capped = build_plan(
        load_scenario(
            write_scenario(
                path.read_text().replace('think_time = "0s"', "turns = 2"), "capped.toml"
            )
        )
    )
    assert np.diff(capped.phases[0].sessions.starts).tolist() == [2, 2, 1, 1]


def test_turns_must_come_from_somewhere_and_traces_do_not_start_sessions(write_scenario):
    with pytest.raises(ConfigError, match="workload.conversation.turns: is required"):
        _plan(write_scenario, '{ think_time = "1s" }')
    with pytest.raises(ConfigError, match=f"expected a value <= {MAX_TURNS}"):
        _plan(write_scenario, f"{{ turns = {MAX_TURNS + 1} }}")
    with pytest.raises(ConfigError, match="last_n: applies to history"):
        _plan(write_scenario, "{ turns = 2, last_n = 1 }")


def test_history_full_or_last_n_and_the_body_it_makes():
    past = [("u0", "a0", 4), ("u1", "a1", 4), ("u2", "a2", 4)]
    assert kept_history(past, "full", 0) == past
    assert kept_history(past, "last_n", 2) == past[1:]
    common = dict(
        model="m",
        system_prompt="sys",
        max_tokens=5,
        ignore_eos=True,
        continuous_usage=True,
        temperature=None,
        top_p=None,
        extra={},
    )
    chat = json.loads(
        build_body(endpoint="chat", prompt="u3", history=[("u1", "a1"), ("u2", "a2")], **common)
    )
    assert chat["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "u3"},
    ]
    comp = json.loads(
        build_body(endpoint="completions", prompt="u3", history=[("u1", "a1")], **common)
    )
    assert comp["prompt"] == "sys u1 a1 u3"
    assert (
        json.loads(build_body(endpoint="completions", prompt="u3", **common))["prompt"] == "sys u3"
    )


def test_later_turns_step_over_unanswered_messages_and_stop_outside_the_filters():
    """A human message without an answer is one step, not two (with output lengths set, it is a
    turn of its own); a turn outside min/max_prompt_tokens or min/max_output_tokens ends the
    conversation, as the first turn would have been skipped."""
    from harness.workload.datasets import sharegpt_later_turns
    from harness.workload.prompts import PromptMaker

    maker = PromptMaker(None)
    conv = [
        {"from": "human", "value": "a"},
        {"from": "gpt", "value": "b"},
        {"from": "human", "value": "B"},
        {"from": "human", "value": "C"},
        {"from": "gpt", "value": "c c"},
    ]
    assert [t[0] for t in sharegpt_later_turns(conv, maker, need_answers=False)] == ["B", "C"]
    assert sharegpt_later_turns(conv, maker, need_answers=True) == ()  # B has no answer: the end
    unanswered_first = [{"from": "human", "value": "A"}, {"from": "human", "value": "B"}]
    assert [t[0] for t in sharegpt_later_turns(unanswered_first, maker, need_answers=False)] == [
        "B"
    ]
    long = [
        {"from": "human", "value": "a"},
        {"from": "gpt", "value": "b"},
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "x"},
        {"from": "human", "value": " ".join(["w"] * 50)},
        {"from": "gpt", "value": "y"},
        {"from": "human", "value": "r"},
        {"from": "gpt", "value": " ".join(["z"] * 50)},
    ]
    bounds = {"prompt": (1, 10), "output": (1, 10)}
    assert [t[0] for t in sharegpt_later_turns(long, maker, need_answers=True, bounds=bounds)] == [
        "q"
    ]
    assert len(sharegpt_later_turns(long, maker, need_answers=True)) == 3


def test_later_turns_are_read_only_for_sessions(write_scenario):
    """Without [workload] conversation a ShareGPT file's later turns are neither counted nor kept."""
    path = write_scenario(f"""
name = "t"
[workload]
dataset = {{ format = "sharegpt", file = "{MULTI}", order = "file" }}
[[phases]]
name = "p"
requests = 4
arrival = {{ process = "constant", rate = 10 }}
""")
    assert load_scenario(path).workload.sources.dataset.table.later_turns == ()
