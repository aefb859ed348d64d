"""Agentic sessions: `[workload] agent`, and where each session's planned requests sit.

`agent = { steps = N, tool_time = "<duration>" | <dist>, tool_result_tokens = N | <dist>,
fan_out = { children = k, after_step = s, steps = n }, compact_at = T, summary_tokens = M }`

- Each arrival starts an agent session (open loop: each intended time; closed loop: each request
  slot a user takes). Its first request is a task of `prompt_tokens` and carries `tools` (the
  workload's `tools = N`, `tool_choice`). While the model answers with a tool call, the client
  waits the tool's time (`tool_time`, drawn per step), appends the assistant's call and a tool
  result of `tool_result_tokens` to the history, and sends the whole history again; an answer
  without a tool call (the final answer) or the `steps`-th request ends the session.
- `fan_out`: when the parent's step `after_step` ends in a tool call, `children` sub-agents
  start at once, each with the parent's history (a shared prefix) and a task of its own, each
  an agent of at most `fan_out.steps` steps; the parent goes on when the last has ended (their
  wall time is the parent's sub-agent time, not tool time).
- `compact_at`: before a request whose history has passed `compact_at` tokens, the history but
  the last tool call and its results is replaced by one summary message of `summary_tokens`.

The plan draws every size and wait ahead (`harness.workload.plan`): a session owns `requests`
consecutive planned requests (`Agent.requests`): the parent's steps, then each child's steps.
A request's `prompt_tokens` is its new message: the task (a session's or a child's first step)
or the tool result it sends back (later steps); its `think_s` is the tool time before it. What
the server decides (tool call or final answer, the call's text) is the engine's
(`harness.client.agent`). Records carry the session's id and the request's position in this
layout as `turn_index` (`Agent.position`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.config.validate import Table
from harness.workload.lengths import Fixed, LengthDist, parse_length
from harness.workload.waits import ThinkTime, parse_wait

MAX_STEPS = 200  # an agent loop longer than this is a typo; its history outgrows any context
MAX_CHILDREN = 64  # sub-agents per fan-out
DEFAULT_SUMMARY_TOKENS = 512  # a compaction's summary: a few paragraphs
MAX_COMPACT_TOKENS = 10_000_000


@dataclass(frozen=True, slots=True)
class Agent:
    steps: int  # the parent's step limit
    tool_result_tokens: LengthDist
    children: int = 0  # sub-agents per session (0: no fan-out)
    after_step: int = 0  # the parent's step whose tool call starts them
    child_steps: int = 0  # each child's step limit
    compact_at: int | None = None  # history tokens that trigger a compaction (None: never)
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS

    @property
    def requests(self) -> int:
        """Planned requests per session: the parent's steps, then each child's."""
        return self.steps + self.children * self.child_steps

    def position(self, j: int) -> tuple[int, int]:
        """(child, step) of a session's planned request j: child -1 for the parent's steps."""
        if j < self.steps:
            return -1, j
        c, i = divmod(j - self.steps, self.child_steps)
        return c, i

    def firsts(self) -> np.ndarray:
        """Bool per planned request of a session: the first step of the parent or of a child
        (a task message; the others send tool results)."""
        out = np.zeros(self.requests, dtype=bool)
        out[0] = True
        for c in range(self.children):
            out[self.steps + c * self.child_steps] = True
        return out

    def joins(self) -> np.ndarray:
        """Bool per planned request: the parent's step after the fan-out (sent at the join)."""
        out = np.zeros(self.requests, dtype=bool)
        if self.children:
            out[self.after_step + 1] = True
        return out

    def info(self) -> dict[str, object]:
        """What the result keeps (`plan.workload.agent`): the analysis reads the layout here."""
        return {
            "steps": self.steps,
            "tool_result_tokens_dist": str(self.tool_result_tokens),
            "children": self.children,
            "after_step": self.after_step,
            "child_steps": self.child_steps,
            "compact_at": self.compact_at,
            "summary_tokens": self.summary_tokens if self.compact_at is not None else None,
            "requests_per_session": self.requests,
        }

    def describe(self, tool_time: ThinkTime) -> str:
        out = (
            f"agent sessions of at most {self.steps} steps, tool time {tool_time}, "
            f"tool results {self.tool_result_tokens} tokens"
        )
        if self.children:
            out += (
                f", {self.children} sub-agents of at most {self.child_steps} steps after step "
                f"{self.after_step}"
            )
        if self.compact_at is not None:
            out += f", compaction past {self.compact_at} tokens to {self.summary_tokens}"
        return out

    def __str__(self) -> str:  # the plan's digest reads it
        return (
            f"agent({self.steps},{self.tool_result_tokens},{self.children},{self.after_step},"
            f"{self.child_steps},{self.compact_at},{self.summary_tokens})"
        )


def parse_agent(t: Table, base_dir: Path) -> tuple[Agent, ThinkTime]:
    """`[workload] agent` as the Agent and its tool time; ConfigError naming the key."""
    steps = t.int("steps", min=1, max=MAX_STEPS)
    tool_time = parse_wait(t, "tool_time")
    raw = t.raw("tool_result_tokens", None)
    if raw is None:
        t.fail("tool_result_tokens", "is required: a count (256) or a length distribution")
    results: LengthDist = (
        parse_length(t.table("tool_result_tokens"), base_dir)
        if isinstance(raw, dict)
        else Fixed(t.int("tool_result_tokens", min=1, max=MAX_COMPACT_TOKENS))
    )
    children = after = child_steps = 0
    ft = t.table("fan_out", None)
    if ft is not None:
        children = ft.int("children", min=1, max=MAX_CHILDREN)
        child_steps = ft.int("steps", min=1, max=MAX_STEPS)
        if steps < 2:
            t.fail("fan_out", "needs steps >= 2: the parent goes on after its sub-agents")
        after = ft.int("after_step", 0, min=0, max=steps - 2)
        ft.finish()
    compact_at = t.int("compact_at", None, min=1, max=MAX_COMPACT_TOKENS)
    summary = t.int("summary_tokens", DEFAULT_SUMMARY_TOKENS, min=1, max=MAX_COMPACT_TOKENS)
    if compact_at is None and t.has("summary_tokens"):
        t.fail("summary_tokens", "applies with compact_at only")
    if compact_at is not None and summary >= compact_at:
        t.fail("summary_tokens", f"must be below compact_at ({compact_at}), got {summary}")
    t.finish()
    return Agent(steps, results, children, after, child_steps, compact_at, summary), tool_time
