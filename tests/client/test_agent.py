"""Agent sessions (harness.client.agent) against a scripted server whose truth is known: the steps,
the tool time waited, the history sent back, fan-out and its join, compaction, the step limit,
and accounting when a stream is cut."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from harness.analysis.agents import agent_block
from harness.record.metrics import Columns
from harness.record.records import ErrorKind
from tests.scripted_server import DONE, Part, Request, event, scripted, sse

SCENARIO = """
name = "agent"
seed = 5
[workload]
prompt_tokens = {{ dist = "fixed", value = 12 }}
output_tokens = {{ dist = "fixed", value = 8 }}
tools = 1
[workload.agent]
{agent}
[[phases]]
name = "main"
requests = {sessions}
arrival = {{ process = "constant", rate = 50 }}
"""

TOOL_S = 0.02


def _plan(tmp: Path, agent: str, sessions: int = 2) -> tuple[Any, Any]:
    from harness.workload.plan import build_plan
    from harness.workload.scenario import load_scenario

    path = tmp / "agent.toml"
    path.write_text(SCENARIO.format(agent=agent, sessions=sessions))
    scn = load_scenario(str(path), [], None)
    return build_plan(scn), scn


def _run(url: str, tmp: Path, agent: str, sessions: int = 2) -> tuple[list[Any], Any, Any]:
    from harness.client.engine import Engine, EngineConfig
    from harness.client.state import Control
    from harness.config.target import Target, Timeouts

    plan, scn = _plan(tmp, agent, sessions)
    target = Target(
        "http",
        url,
        "m",
        "chat",
        timeouts=Timeouts(connect_s=2.0, first_token_s=5.0, idle_s=5.0, total_s=20.0),
    )
    records: list[Any] = []
    engine = Engine(plan, EngineConfig(target, scn.workload), records.append, Control())
    outcome = asyncio.run(engine.run())
    return records, outcome, plan


def tool_answer() -> list[Part]:
    """A tool call streamed in three events: the name, then the arguments in two pieces."""
    fn = [{"name": "tool_0", "arguments": ""}, {"arguments": '{"q": "a'}, {"arguments": ' b"}'}]
    events = [
        event(
            {
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": f}]}}],
                "usage": {"prompt_tokens": 9, "completion_tokens": k + 1},
            }
        )
        for k, f in enumerate(fn)
    ]
    return sse(*events, DONE)


def final_answer() -> list[Part]:
    events = [
        event(
            {
                "choices": [{"index": 0, "delta": {"content": "done"}}],
                "usage": {"prompt_tokens": 9, "completion_tokens": k + 1},
            }
        )
        for k in range(2)
    ]
    return sse(*events, DONE)


def calls_twice(i: int, req: Request) -> list[Part]:
    """Each agent calls a tool while its history holds fewer than two calls, then answers."""
    msgs = req.json()["messages"]
    calls = sum(1 for m in msgs if m["role"] == "assistant")
    return tool_answer() if calls < 2 else final_answer()


def _messages(srv: Any) -> list[list[dict[str, Any]]]:
    return [r.json()["messages"] for r in srv.requests]


def test_the_loop_waits_the_tool_time_sends_the_history_and_joins_its_sub_agents(
    tmp_path: Path,
) -> None:
    agent = (
        f'steps = 5\ntool_time = "{TOOL_S}s"\ntool_result_tokens = 7\n'
        "fan_out = { children = 2, after_step = 0, steps = 4 }"
    )
    with scripted(calls_twice) as srv:
        recs, outcome, plan = _run(srv.url, tmp_path, agent)
        msgs = _messages(srv)
    assert all(r.ok for r in recs)
    # two sessions: 3 parent steps (call, call, answer) and two children of 3 steps each
    assert len(recs) == 2 * (3 + 2 * 3)
    by = {(r.session_id, r.turn_index): r for r in recs}
    layout = plan.phases[0].sessions.agent
    for sid in {r.session_id for r in recs}:
        positions = sorted(t for s, t in by if s == sid)
        assert positions == [0, 1, 2, 5, 6, 7, 9, 10, 11]  # parent, child 0, child 1
        assert [layout.position(t) for t in positions[3:6]] == [(0, 0), (0, 1), (0, 2)]
        p = [by[(sid, t)] for t in (0, 1, 2)]
        children = [[by[(sid, t)] for t in c] for c in ((5, 6, 7), (9, 10, 11))]
        # each child starts on the parent's first answer; the parent goes on at the join
        join = max(c[-1].last_token_ns for c in children)
        assert p[1].intended_ns >= join
        for c in children:
            assert c[0].intended_ns == p[0].last_token_ns
            for a, b in zip(c, c[1:], strict=False):  # the tool time the plan drew, exactly
                assert b.intended_ns - a.last_token_ns == int(TOOL_S * 1e9)
        assert p[2].intended_ns - p[1].last_token_ns == int(TOOL_S * 1e9)
    # the history grows by the call and its result; a child starts on the parent's prefix
    firsts = [m for m in msgs if len(m) == 1]
    assert len(firsts) == 2
    for m in msgs:
        if m[-1]["role"] == "tool":
            call, result = m[-2], m[-1]
            assert call["tool_calls"][0]["function"] == {
                "name": "tool_0",
                "arguments": '{"q": "a b"}',
            }
            assert result["tool_call_id"] == call["tool_calls"][0]["id"]
            assert len(result["content"].split()) == 7
            assert m[:-2] in msgs  # the previous request's messages, as sent
        elif len(m) == 2:  # a child's first step: the parent's task, then its own
            assert m[0] in [f[0] for f in firsts] and m[1]["role"] == "user"
    acct = outcome.accounts[0]
    assert acct["begun"] == acct["recorded"] == [len(recs)]
    # the result's view of the same records: the split is exact by definition
    c = Columns.of(recs)
    ag = agent_block(c, np.ones(c.n, dtype=bool), layout.info())
    assert ag is not None
    assert ag["sessions"] == 2 and ag["ended"]["final_answer"] == 2
    assert ag["tool_time_ms"]["mean"] == pytest.approx(TOOL_S * 1e3)
    assert [s["requests"] for s in ag["by_step"]] == [2, 2, 2]
    assert [s["tool_call_share"] for s in ag["by_step"]] == [1.0, 1.0, 0.0]
    assert ag["by_step"][0]["ttfo_ms"]["count"] == 0  # a tool call has no answer token
    for s in recs:
        sess = [r for r in recs if r.session_id == s.session_id and r.turn_index < 5]
        total = max(r.last_token_ns for r in sess) - min(r.intended_ns for r in sess)
        model = sum(r.last_token_ns - r.intended_ns for r in sess)
        assert model + TOOL_S * 1e9 + (sess[1].intended_ns - sess[0].last_token_ns) == total


def test_the_step_limit_and_compaction(tmp_path: Path) -> None:
    agent = (
        'steps = 4\ntool_time = "0s"\ntool_result_tokens = 20\ncompact_at = 40\nsummary_tokens = 5'
    )
    with scripted(lambda i, r: tool_answer()) as srv:  # always a tool call
        recs, _, plan = _run(srv.url, tmp_path, agent, sessions=1)
        msgs = _messages(srv)
    assert [r.turn_index for r in sorted(recs, key=lambda r: r.seq)] == [0, 1, 2, 3]
    # step 1: task (12) + call + result (20) = 35 tokens; step 2 would carry 35 + 3 + 20 > 40
    assert [m["role"] for m in msgs[1]] == ["user", "assistant", "tool"]
    for m in msgs[2:]:
        assert [x["role"] for x in m] == ["user", "assistant", "tool"]
        assert len(m[0]["content"].split()) == 5  # the summary replaced the history
        assert m[0]["content"] != msgs[1][0]["content"]
    c = Columns.of(recs)
    ag = agent_block(c, np.ones(c.n, dtype=bool), plan.phases[0].sessions.agent.info())
    assert ag is not None and ag["ended"]["step_limit"] == 1


def test_a_cut_stream_ends_its_session_and_every_request_has_one_record(tmp_path: Path) -> None:
    def respond(i: int, req: Request) -> list[Part]:
        msgs = req.json()["messages"]
        if any(m["role"] == "tool" for m in msgs):  # every second step: cut mid-stream
            return tool_answer()[:2]
        return tool_answer()

    agent = (
        'steps = 5\ntool_time = "0s"\ntool_result_tokens = 4\nfan_out = { children = 2, steps = 2 }'
    )
    with scripted(respond) as srv:
        recs, outcome, _ = _run(srv.url, tmp_path, agent, sessions=3)
    # per session: step 0 (call), two children each cut at their step 1, the parent cut at step 1
    assert len(recs) == 3 * (1 + 2 * 2 + 1)
    assert len({r.seq for r in recs}) == len(recs)
    cut = [r for r in recs if not r.ok]
    assert {r.error for r in cut} == {ErrorKind.STREAM_CUT} and len(cut) == 3 * 3
    acct = outcome.accounts[0]
    assert acct["begun"] == acct["recorded"] == [len(recs)]
    assert outcome.complete
    c = Columns.of(recs)
    from harness.workload.agent import Agent
    from harness.workload.lengths import Fixed

    ag = agent_block(c, np.ones(c.n, dtype=bool), Agent(5, Fixed(4), 2, 0, 2).info())
    assert ag is not None and ag["ended"] == {
        "final_answer": 0,
        "step_limit": 0,
        "failed": 3,
        "stopped": 0,
    }


def test_the_request_body_carries_tools_and_our_own_call_ids(tmp_path: Path) -> None:
    agent = 'steps = 2\ntool_time = "0s"\ntool_result_tokens = 3'
    with scripted(lambda i, r: tool_answer()) as srv:
        _run(srv.url, tmp_path, agent, sessions=1)
        bodies = [orjson.loads(r.body) for r in srv.requests]
    assert all(b["tools"][0]["function"]["name"] == "tool_0" for b in bodies)
    assert bodies[1]["messages"][1]["tool_calls"][0]["id"].startswith("call_")
