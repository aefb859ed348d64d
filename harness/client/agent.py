"""Agent sessions in the engine: one task per session runs its tool-call loop.

Theory of operation
-------------------
The plan fixes each session's layout and draws (`harness.workload.agent`): the task's length,
each step's output length, the tool time before each step and the tool result it sends back.
What only the server decides is done here. A step is one request of the engine
(`Engine._request`: the same stamps, retries, journal and accounting), tagged with the session's
id (the seq of its first request) and its position in the session's layout (`turn_index`).

The loop: send the history (the task first); an answer with tool calls (`delta.tool_calls`,
kept by the decoder as [name, arguments]) is appended as the assistant's message, the client
waits the step's tool time from the answer's last token, appends one tool result per call (the
next step's planned `prompt_tokens`, shared out among the calls) and sends the whole history
again. An answer without a tool call is the final answer; the step limit ends the loop too.
A step that fails ends its session (nothing to continue from): its later steps are never sent,
as a multi-turn session's turns are not.

Fan-out: the parent's step `after_step`, answered with a tool call, starts `children` sub-agent
loops at once, each on the parent's history so far (a prefix the server may have cached) plus a
task of its own; the parent sends its next step when the last child has ended, with the results
of its calls. Compaction: before a step whose history holds more than `compact_at` tokens (as
planned and as the server counted the answers), everything before the last tool call becomes
one summary message of `summary_tokens`.

Tool-call ids are the client's own (`call_<seq>_<i>`): what the server sends back is kept as
text (the function's name and arguments, bounded by the stream's byte limit), never used as an id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harness.record.records import Record
from harness.workload.agent import Agent
from harness.workload.plan import PhasePlan
from harness.workload.prompts import prompt_seed

SUMMARY_SALT = 0x5EED_0001  # a summary's words differ from the request's own tool result's
RESULT_SALT = 0x5EED_0100  # ... and each call's result from the others'
DEFAULT_TOOL = "tool_0"  # the name sent back for a call whose name never came


Message = dict[str, Any]


def text_of(host: Any, n_tokens: int, seq: int, salt: int) -> str:
    """n_tokens of synthetic text, seeded by the request and a salt."""
    plan = host.plan
    n = plan.prompts.content_tokens(n_tokens)
    return str(plan.prompts.text(n, prompt_seed(plan.seed, seq) ^ salt))


def call_message(seq: int, answer: str, calls: list[list[str]]) -> Message:
    """The assistant's message for an answer with tool calls."""
    return {
        "role": "assistant",
        "content": answer or None,
        "tool_calls": [
            {
                "id": f"call_{seq}_{i}",
                "type": "function",
                "function": {"name": name or DEFAULT_TOOL, "arguments": args},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }


def result_messages(host: Any, seq: int, n_calls: int, tokens: int) -> list[tuple[Message, int]]:
    """One tool result per call of request `seq`, `tokens` shared out among them."""
    each = max(tokens // max(n_calls, 1), 1)
    return [
        (
            {
                "role": "tool",
                "tool_call_id": f"call_{seq}_{i}",
                "content": text_of(host, each, seq, RESULT_SALT + i),
            },
            each,
        )
        for i in range(n_calls)
    ]


def compacted(
    history: list[tuple[Message, int]], host: Any, seq: int, summary_tokens: int
) -> list[tuple[Message, int]]:
    """The history with everything before its last assistant message replaced by a summary."""
    last = max((i for i, (m, _) in enumerate(history) if m["role"] == "assistant"), default=0)
    summary = {"role": "user", "content": text_of(host, summary_tokens, seq, SUMMARY_SALT)}
    return [(summary, summary_tokens), *history[last:]]


async def run_agent(
    host: Any,
    pp: PhasePlan,
    ag: Agent,
    seq0: int,
    base: int,
    intended: int,
    sem: asyncio.Semaphore | None,
) -> None:
    """The agent session of phase pp whose first request is `seq0` (its layout from the plan's
    `base`), intended to start at `intended` (harness.client.session.run_session)."""
    await _loop(host, pp, ag, seq0, base, -1, intended, [], sem)


async def _loop(
    host: Any,
    pp: PhasePlan,
    ag: Agent,
    seq0: int,
    base: int,
    child: int,
    intended: int,
    history: list[tuple[Message, int]],
    sem: asyncio.Semaphore | None,
) -> int | None:
    """One agent's loop (the parent's: child -1) on `history` (a child's: the parent's so far).
    Returns when its last step ended (None: it failed or the run stopped)."""
    sp = pp.sessions
    assert sp is not None
    pos0 = 0 if child < 0 else ag.steps + child * ag.child_steps
    n_steps = ag.steps if child < 0 else ag.child_steps
    prompts, outputs = pp.prompt_tokens, pp.output_tokens
    system = int(host.plan.system_prompt_tokens)
    last = intended
    for i in range(n_steps):
        j = pos0 + i
        k, seq = base + j, seq0 + j
        p_tok, o_tok = int(prompts[k]), int(outputs[k])
        if i == 0:
            history = [*history, ({"role": "user", "content": text_of(host, p_tok, seq, 0)}, p_tok)]
        else:
            intended = last + int(sp.think_s[k] * 1e9)
            if not await host._sleep_until(intended):
                return None
        if ag.compact_at is not None and i and system + sum(n for _, n in history) > ag.compact_at:
            history = compacted(history, host, seq, ag.summary_tokens)
        body = host._agent_body(seq, o_tok, [m for m, _ in history])
        host._texts[seq] = []
        host._calls[seq] = []
        host._turn_of[seq] = (seq0, j)
        try:
            rec: Record | None = await host._request(
                seq, pp.index, intended, body, sum(n for _, n in history), o_tok, sem
            )
            answer = "".join(host._texts[seq])
            calls = list(host._calls[seq])
        finally:
            del host._texts[seq]
            del host._calls[seq]
            del host._turn_of[seq]
        if rec is None or not rec.ok or rec.last_token_ns is None:
            return None
        last = rec.last_token_ns
        if not calls or i == n_steps - 1:  # the final answer, or the step limit
            return last
        call = (call_message(seq, answer, calls), rec.output_tokens)
        if child < 0 and ag.children and i == ag.after_step:
            await asyncio.gather(
                *(
                    _loop(host, pp, ag, seq0, base, c, last, history, sem)
                    for c in range(ag.children)
                )
            )
            last = host._rel_now()  # the join: the parent's next step is sent now
        history = [*history, call, *result_messages(host, seq, len(calls), int(prompts[k + 1]))]
    return last
