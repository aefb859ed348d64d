"""Multi-turn sessions: `[workload] conversation`, and the per-session draws the plan makes.

`conversation = { turns = <dist>, think_time = "<duration>" | <dist>, history = "full" | "last_n",
last_n = N }`

- Each arrival of a phase (open loop: each intended time; closed loop: each request slot a user
  takes; `requests = N`: N sessions) starts a session. A session sends `turns` requests, one
  after the other; `turns` is a length distribution (`{ dist = "uniform", min = 2, max = 6 }`)
  or a plain count (`turns = 3`), at most MAX_TURNS.
- A turn's request carries the history -- the earlier user messages and the assistant text
  actually streamed back -- and then a new user message of `prompt_tokens` (drawn per turn).
  `history = "full"` keeps every earlier turn; `"last_n"` keeps the last `last_n` turns.
- The next turn is intended at the previous turn's last token plus the think time:
  `think_time = "2s"` (fixed), or `{ dist = "uniform", min = "1s", max = "5s" }`,
  `{ dist = "exponential", mean = "2s" }`; drawn per turn in the plan.
- With a ShareGPT dataset, the conversation's own human messages are the turns (its answers'
  lengths the output lengths, unless `output_tokens` is set); `turns`, when given, caps them.

What can be planned is planned here, seeded (turn counts, think times, user-message lengths);
what depends on the server (the answers' text, when they end) is the engine's
(`harness.client.session`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.config.validate import Table
from harness.workload.agent import Agent
from harness.workload.lengths import Fixed, LengthDist, parse_length
from harness.workload.waits import ThinkTime, parse_wait

HISTORY_MODES = ("full", "last_n")
MAX_TURNS = 1000  # a session longer than this is a typo, and its history outgrows any context


@dataclass(frozen=True, slots=True)
class Conversation:
    turns: LengthDist | None  # None: a dataset's conversations give the turns, uncapped
    think: ThinkTime
    history: str  # "full" | "last_n"
    last_n: int = 0  # turns of history kept with "last_n"
    agent: Agent | None = None  # agentic sessions (harness.workload.agent): turns are steps

    def draw_turns(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Turns of n sessions (int64, 1..MAX_TURNS); MAX_TURNS each when `turns` is not given."""
        if self.turns is None:
            return np.full(n, MAX_TURNS, dtype=np.int64)
        return np.clip(self.turns.sample(n, rng), 1, MAX_TURNS).astype(np.int64)

    def describe(self) -> str:
        if self.agent is not None:
            return self.agent.describe(self.think)
        keep = (
            "full history" if self.history == "full" else f"history of the last {self.last_n} turns"
        )
        turns = "turns from the dataset" if self.turns is None else f"turns {self.turns}"
        return f"{turns}, think time {self.think}, {keep}"


def parse_conversation(t: Table, base_dir: Path, has_dataset: bool) -> Conversation:
    """`[workload] conversation`; ConfigError naming the key and what is allowed."""
    turns: LengthDist | None
    raw = t.raw("turns", None)
    if raw is None:
        if not has_dataset:
            t.fail(
                "turns",
                'is required: a count (turns = 3) or a distribution ({ dist = "uniform", '
                "min = 2, max = 6 }); only a dataset's conversations can give the turns instead",
            )
        turns = None
    elif isinstance(raw, dict):
        turns = parse_length(t.table("turns"), base_dir)
    else:
        turns = Fixed(t.int("turns", min=1, max=MAX_TURNS))
    think = parse_wait(t)
    history = t.str("history", "full", choices=HISTORY_MODES)
    last_n = 0
    if history == "last_n":
        last_n = t.int("last_n", min=1, max=MAX_TURNS)
    elif t.has("last_n"):
        t.fail("last_n", 'applies to history = "last_n" only')
    t.finish()
    return Conversation(turns, think, history, last_n)


@dataclass(frozen=True, slots=True, eq=False)
class SessionPlan:
    """A phase's sessions, drawn ahead: session s owns the phase's requests starts[s] ..
    starts[s + 1] - 1, its turns in order; `think_s` is the wait before each request (0 for a
    session's first)."""

    starts: np.ndarray  # int64, sessions + 1
    think_s: np.ndarray  # float64, one per request
    history: str  # "full" | "last_n"
    last_n: int = 0
    agent: Agent | None = None  # agentic sessions: the layout of each session's requests

    @property
    def count(self) -> int:
        """Sessions planned (closed loop with a duration: the pool, cycled)."""
        return len(self.starts) - 1

    def turns(self, s: int) -> int:
        return int(self.starts[s + 1] - self.starts[s])

    def digest_bytes(self) -> bytes:
        return (
            f"sessions|{self.history}|{self.last_n}|{self.agent}|".encode()
            + self.starts.tobytes()
            + self.think_s.tobytes()
        )


def session_layout(turns: np.ndarray, think: np.ndarray, conv: Conversation) -> SessionPlan:
    """The SessionPlan of sessions with these turn counts; `think` holds one draw per request
    (a session's first is set to 0)."""
    starts = np.zeros(len(turns) + 1, dtype=np.int64)
    np.cumsum(turns, out=starts[1:])
    think = think.astype(np.float64, copy=True)
    think[starts[:-1]] = 0.0
    return SessionPlan(starts, think, conv.history, conv.last_n, conv.agent)
