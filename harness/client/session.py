"""Multi-turn sessions in the engine: one task per session sends its turns one after the other.

Theory of operation
-------------------
The plan fixes what it can (`harness.workload.conversation`): when a session starts (an
open-loop arrival, or the request slot a closed-loop user takes), how many turns it has, each
turn's new user message (its length and seed, or a dataset's text), output length and think
time. What only the server decides is done here: turn t + 1 is intended at turn t's last token
plus its think time, and carries the history -- the earlier user messages and the assistant text
actually streamed back (every earlier turn, or the last `last_n`).

Each turn is one request of the engine (`Engine._request`: the same stamps, retries and
journal), tagged with the session's id (the seq of its first turn) and the turn's index. A turn
that fails ends its session: there is no answer to continue from. Its record says why; the
session's later turns are not sent, and the result counts sessions apart from requests.

Sequence numbers: a phase's request k (session s's turn t is k = starts[s] + t) is seq
`first_seq + k`; a duration-bound closed loop that cycles its pool of sessions adds
`cycle * requests per pool` (its phase reserves `SEQ_RESERVE_OPEN_ENDED` seq numbers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

import numpy as np

from harness.client.agent import run_agent
from harness.client.shard import closed_requests_of_shard, in_shard
from harness.record.records import Record
from harness.workload.plan import PhasePlan, Plan


class SessionHost(Protocol):
    """What a session needs of the engine (harness.client.engine.Engine). Its methods restate
    RequestRunner's (`_body`, `_request`) and the engine's signatures: a Protocol cannot borrow a
    class's, and the Protocol keeps the engine out of this module's imports."""

    plan: Plan
    cfg: Any
    control: Any
    _tasks: set[asyncio.Task[object]]
    _texts: dict[int, list[str]]
    _turn_of: dict[int, tuple[int, int]]
    _calls: dict[int, list[list[str]]]

    def _rel_now(self) -> int: ...
    async def _sleep_until(self, rel_ns: int) -> bool: ...
    def _spawn(self, coro: Coroutine[Any, Any, object]) -> asyncio.Task[object]: ...
    def _body(
        self,
        seq: int,
        prompt_tokens: int,
        output_tokens: int,
        history: tuple[tuple[str, str], ...] = (),
    ) -> bytes: ...
    def _agent_body(
        self, seq: int, output_tokens: int, messages: list[dict[str, Any]]
    ) -> bytes: ...
    async def _request(
        self,
        seq: int,
        phase: int,
        intended: int,
        body: bytes,
        prompt_tokens: int,
        output_tokens: int,
        sem: asyncio.Semaphore | None,
        request: object = None,
    ) -> Record | None: ...


def kept_history(
    past: list[tuple[str, str, int]], history: str, last_n: int
) -> list[tuple[str, str, int]]:
    """The earlier turns a request carries: all of them ("full") or the last `last_n`."""
    return past if history == "full" else past[-last_n:]


async def run_session(
    host: SessionHost,
    pp: PhasePlan,
    s: int,
    cycle: int,
    intended: int,
    sem: asyncio.Semaphore | None,
) -> None:
    """Session s of phase pp (pass `cycle` of a cycled pool), its first turn intended at `intended`."""
    sp = pp.sessions
    assert sp is not None
    base = int(sp.starts[s])
    seq0 = pp.first_seq + cycle * pp.count + base
    if sp.agent is not None:  # an agent's loop (harness.client.agent)
        await run_agent(host, pp, sp.agent, seq0, base, intended, sem)
        return
    prompts, outputs = pp.prompt_tokens, pp.output_tokens
    past: list[tuple[str, str, int]] = []  # (user message, answer text, tokens of both)
    last_token = intended  # the previous turn's last token (set after turn 0)
    for t in range(sp.turns(s)):
        k = base + t
        seq = seq0 + t
        if t:
            intended = last_token + int(sp.think_s[k] * 1e9)
            if not await host._sleep_until(intended):
                return
        kept = kept_history(past, sp.history, sp.last_n)
        p_tok, o_tok = int(prompts[k]), int(outputs[k])
        body = host._body(seq, p_tok, o_tok, tuple((u, a) for u, a, _ in kept))
        host._texts[seq] = []
        host._turn_of[seq] = (seq0, t)
        try:
            rec = await host._request(
                seq, pp.index, intended, body, p_tok + sum(n for _, _, n in kept), o_tok, sem
            )
            answer = "".join(host._texts[seq])
        finally:
            del host._texts[seq]
            del host._turn_of[seq]
        if rec is None or not rec.ok or rec.last_token_ns is None:
            return
        last_token = rec.last_token_ns
        past.append((host.plan.prompt_text(p_tok, seq), answer, p_tok + rec.output_tokens))


async def run_open_sessions(
    host: SessionHost, pp: PhasePlan, phase_start: int, sem: asyncio.Semaphore | None
) -> None:
    """Start each session of an open-loop phase at its intended time (this shard's: session s
    with s mod N == index); its later turns follow the answers."""
    intended = (pp.offsets_s * 1e9).astype(np.int64) + phase_start
    shard = host.cfg.shard
    for s, t_ns in enumerate(intended.tolist()):
        if shard[1] > 1 and not in_shard(s, shard):  # the shard rule, applied to sessions
            continue
        if not await host._sleep_until(t_ns):
            return
        host._spawn(run_session(host, pp, s, 0, t_ns, sem))


async def run_closed_sessions(
    host: SessionHost, pp: PhasePlan, phase_start: int, users: list[int]
) -> None:
    """Closed loop over sessions: each user (of this shard's `users` slots) runs a whole session,
    waits its think time, and takes the next; `requests` counts sessions. A duration-bound phase
    starts no session after its end and cycles its pool of sessions."""
    sp = pp.sessions
    assert sp is not None
    end_ns = phase_start + int(pp.duration_s * 1e9) if pp.duration_s is not None else None
    limit = pp.requests
    shard = host.cfg.shard
    think_ns = int(pp.think_s * 1e9)
    n = sp.count

    ks = closed_requests_of_shard(limit, pp.users, shard)
    await host._sleep_until(phase_start)

    async def user() -> None:
        intended = host._rel_now()
        while not host.control.stopped:
            k = next(ks, None)
            if k is None or (end_ns is not None and intended >= end_ns):
                return
            if not await host._sleep_until(intended):
                return
            task = asyncio.get_running_loop().create_task(
                run_session(host, pp, k % n, k // n, intended, None)
            )
            host._tasks.add(task)
            try:
                await asyncio.shield(task)
            finally:
                host._tasks.discard(task)
            intended = host._rel_now() + think_ns

    tasks = [asyncio.create_task(user()) for _ in users]
    try:
        await asyncio.gather(*tasks)
    finally:
        for u in tasks:
            u.cancel()
