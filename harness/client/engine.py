"""The engine: execute a Plan against a Target, stamping every token as it arrives.

Theory of operation
-------------------
The engine decides when each request is sent, and builds its Record. Every time in a run is
read from one monotonic clock, `time.perf_counter_ns()`: by the engine for its schedule, and by
the transport behind the seam below for the stamps, where the bytes arrive; all are stored as
ns since `t0`, the run's start. Connections are the transports' (`fasthttp`, aiohttp); the
sessions of multi-turn phases are `harness.client.session`'s. The parsers (`sse`, `http1`,
`openai`) never await nor read the clock.

*Open-loop phases* have their intended send times fixed by the plan. A scheduler coroutine
walks them in order, sleeping until each absolute time (`t0 + phase start + offset`), and
starts one task per request; a late wake-up never shifts later requests. Requests that find
the phase's `max_concurrency` cap full wait for a slot, and that wait shows as send lag.

*Closed-loop phases* run N user coroutines; each sends its next request when its last one
ended plus think time, which is that request's intended time.

Each request is built before its intended time (`Transport.prepare`: the body, and on the lean
path the whole request). An attempt goes through the transport (`harness.client.transport`:
the seam; aiohttp or the lean client behind it), which stamps `sent` just before the request is
written, `headers` when the status line is in, and one stamp per socket read for every SSE
event parsed out of that read (never a stamp after JSON parsing). Failures become an ErrorKind
(`transport.classify_exception` is the one place foreign exceptions are mapped); the engine
builds the Record from the attempt, once (`_record`, in harness.client.request: one request
from its body to its Record, the half of the engine this class inherits), passing the error
detail, which quotes the server, through `Target.redactor()` (harness.redact: secrets masked, control characters
escaped): nothing after the engine sees an echoed key. A failed request never aborts the run.
Finished Records go to the `sink` (the journal) at once. An answer the transport later finds
suspect (stray bytes followed it on its connection: harness.client.keepalive) goes to `events`
as a `suspect` journal line naming its (seq, attempt); the journal's vetting sets that record
aside (harness.record.journal_vet).

Accounting: every request the engine takes up ends in exactly one final Record, whatever
happens inside it -- an exception that is our bug (the transport, the decoder, the retry
arithmetic, the engine) is recorded as INTERNAL with the exception named. The engine counts,
per phase, the requests it took up and the final Records it emitted (`RunOutcome.accounts`);
`harness.analysis.accounting` holds them against the plan and the journal.

Server counts: each Record's usage counts are vetted (`harness.record.usage`), and each
attempt's stream is bounded in bytes by the `max_tokens` it asked for.

Stopping: `Control.stop()` (first Ctrl-C, SIGTERM, a journal failure) ends sending; requests
in flight get `grace_s` to finish, then are cancelled and recorded as CANCELLED. Requests still
waiting for a concurrency slot are recorded as NOT_SENT. A run that was not stopped drains for
at most `drain_limit_s` after its last phase (the drain limit: DRAIN_MIN_S, or DRAIN_FACTOR
times the longest request -- or multi-turn session -- that finished, whichever is longer); what
is still in flight then is cancelled and recorded as CANCELLED, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from harness.client.endpoints import ENDPOINT_PATHS, accept_header, decoder_for
from harness.client.fasthttp import Exchange
from harness.client.request import SPIN_NS, RequestRunner, now_ns
from harness.client.session import run_closed_sessions, run_open_sessions
from harness.client.shard import (
    PRECONNECT_BUDGET_S,
    WHOLE,
    Shard,
    closed_requests_of_shard,
    closed_users,
    in_shard,
    preconnect_count,
)
from harness.client.state import Control, Counters, RunOutcome
from harness.client.transport import (
    ACCEPT_ENCODING,
    AttemptState,
    Transport,
    TransportSetup,
    choose_http_client,
    internal_detail,
)
from harness.client.transport_aiohttp import AiohttpTransport
from harness.client.transport_fast import FastTransport
from harness.config.scenario import RetryPolicy
from harness.config.target import Target
from harness.record.records import Record
from harness.workload.plan import PhasePlan, Plan
from harness.workload.scenario import Workload

__all__ = ["SPIN_NS", "START_LEAD_NS", "Engine", "EngineConfig", "now_ns", "preconnect_count"]

START_LEAD_NS = 50_000_000  # t0 is this far after setup, so the first sends are not late
LOOP_PROBE_INTERVAL_S = 0.05  # event-loop lag probe period
DEFAULT_GRACE_S = 10.0  # in-flight requests may finish this long after a stop
AIOHTTP_MIN_POOL = 100  # aiohttp's connection limit: the plan's peak concurrency, at least this
DRAIN_MIN_S = 60.0  # after its last phase, a run waits this long for requests in flight ...
DRAIN_FACTOR = 2.0  # ... or this many times its longest finished request, if that is longer
STOPPED_DETAIL = "in flight when the run stopped"
MAX_TASK_ERRORS = 5  # exceptions kept per shard of requests that died without a record
SUSPECT_WHY = "stray bytes on its connection after its answer: it may be another request's"


@dataclass(frozen=True)
class EngineConfig:
    target: Target
    workload: Workload
    retry: RetryPolicy = RetryPolicy()
    continuous_usage: bool = True
    grace_s: float = DEFAULT_GRACE_S
    request_id_prefix: str = "harness"
    http_client: str = "auto"  # "fast" (plain http only), "aiohttp", or "auto": fast for http://
    shard: Shard = WHOLE  # (index, count): this process runs one shard of the plan (client.shard)
    max_tokens_key: str = (
        "max_tokens"  # "max_completion_tokens" where the target refuses the old name
    )


class Engine(RequestRunner):
    def __init__(
        self,
        plan: Plan,
        cfg: EngineConfig,
        sink: Callable[[Record], None],
        control: Control,
        counters: Counters | None = None,
        events: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """`events`: where journal lines other than records go (a `suspect` line); None: nowhere."""
        self.plan = plan
        self.cfg = cfg
        self.sink = sink
        self.events = events
        self.control = control
        self.counters = counters or Counters()
        self.t0 = 0
        # every request (Record | None) and session task in flight, for _drain and a hard stop
        self._tasks: set[asyncio.Task[object]] = set()
        self._url = cfg.target.url(ENDPOINT_PATHS[cfg.target.endpoint])
        # embeddings: one JSON answer per request, a batch of workload.batch inputs
        self._embeddings = cfg.target.endpoint == "embeddings"
        self._batch = cfg.workload.batch
        self._headers = cfg.target.request_headers(
            {
                "Content-Type": "application/json",
                "Accept": accept_header(cfg.target.endpoint),
                "Accept-Encoding": ACCEPT_ENCODING,
            }
        )
        self._redact = cfg.target.redactor()  # for server text in error details (`_record`)
        self._loop_lag: list[int] = []
        self.http_client = choose_http_client(cfg.http_client, cfg.target.base_url)
        self._transport = self._make_transport()
        self._system_tokens = plan.system_prompt_tokens
        self.preconnected = 0
        self._texts: dict[int, list[str]] = {}  # multi-turn: seq -> its answer's text
        self._turn_of: dict[int, tuple[int, int]] = {}  # multi-turn: seq -> (session id, turn)
        self._calls: dict[int, list[list[str]]] = {}  # agents: seq -> its tool calls
        n_phases = len(plan.phases)
        self._begun = [0] * n_phases  # requests taken up, per phase
        self._recorded = [0] * n_phases  # final records emitted, per phase
        self._task_errors: list[str] = []  # exceptions that ended a request task (our bugs)
        self._longest_ns = 0  # the longest finished request (or session), intended to end
        self._session_start: dict[int, int] = {}  # multi-turn: session id -> its intended start
        self._cancel_detail = STOPPED_DETAIL
        self._bounds: dict[int, tuple[int, int]] = {}  # output tokens -> `_stream_bounds`

    # -- the run ---------------------------------------------------------------------------

    async def run(self, t0_ns: int | None = None, t0_wall_s: float | None = None) -> RunOutcome:
        """Execute the plan (this engine's shard of it). `t0_ns` (perf_counter_ns, a shared
        start for worker processes on one machine) replaces the default `now + START_LEAD_NS`."""
        # The transport gets ready before t0 (the lean one warms its pool, so connection set-up
        # lands in no measured request). With a given t0 (workers), it stops short of it.
        deadline = (
            now_ns() + int(PRECONNECT_BUDGET_S * 1e9)
            if t0_ns is None
            else t0_ns - START_LEAD_NS // 2
        )
        self.preconnected = await self._transport.open(
            preconnect_count(self.plan, self.cfg.shard), deadline
        )
        gc.collect()
        gc.freeze()
        cpu0 = _cpu_s()
        if t0_ns is None:
            self.t0 = now_ns() + START_LEAD_NS
            t0_wall = time.time() + START_LEAD_NS / 1e9
        else:
            self.t0 = t0_ns
            t0_wall = t0_wall_s if t0_wall_s is not None else time.time() + (t0_ns - now_ns()) / 1e9
        probe = asyncio.create_task(self._probe_loop())
        starts: list[int] = []
        ends: list[int] = []
        try:
            phase_start = 0
            for pp in self.plan.phases:
                if self.control.stopped:
                    break
                starts.append(phase_start)
                self.counters.phase = pp.name
                if pp.closed:
                    await self._run_closed(pp, phase_start)
                    if pp.requests is None and pp.duration_s is not None:
                        phase_end = phase_start + int(pp.duration_s * 1e9)
                    else:  # count-bound: it ended when its last request did
                        phase_end = self._rel_now()
                else:
                    await self._run_open(pp, phase_start)
                    phase_end = phase_start + int((pp.duration_s or 0.0) * 1e9)
                    await self._sleep_until(phase_end)
                ends.append(min(phase_end, self._rel_now()) if self.control.stopped else phase_end)
                phase_start = ends[-1]
            await self._drain()
        finally:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
            await self._transport.close()
            gc.unfreeze()
        end = self._rel_now()
        return RunOutcome(
            self.t0,
            t0_wall,
            end,
            starts,
            ends,
            not self.control.stopped,
            self.control.reason,
            _cpu_s() - cpu0,
            self._loop_lag,
            [
                {
                    "shard": list(self.cfg.shard),
                    "begun": list(self._begun),
                    "recorded": list(self._recorded),
                    "errors": self._task_errors[:MAX_TASK_ERRORS],
                    # connections closed for bytes nobody asked for (harness.client.keepalive)
                    "stale_connections": self._transport.stale_connections,
                }
            ],
        )

    def drain_limit_s(self) -> float:
        """How long a finished run waits for what is in flight: DRAIN_MIN_S, or DRAIN_FACTOR
        times the longest request (or multi-turn session) that finished, if longer."""
        return max(DRAIN_MIN_S, DRAIN_FACTOR * self._longest_ns / 1e9)

    async def _drain(self) -> None:
        """Wait for requests in flight, at most the drain limit (then cancel them); after a
        stop, give them grace_s, then cancel."""
        if not self._tasks:
            return
        if not self.control.stopped:
            limit_s = self.drain_limit_s()
            waiter = asyncio.ensure_future(asyncio.wait(set(self._tasks), timeout=limit_s))
            stopper = asyncio.ensure_future(self.control.stop_event.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if waiter.done():
                await self._cut_drain(limit_s)
                return
            waiter.cancel()
        pending = set(self._tasks)
        if pending and not self.control.hard:
            await asyncio.wait(pending, timeout=self.cfg.grace_s)
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    async def _cut_drain(self, limit_s: float) -> None:
        """The drain limit passed: cancel what is still in flight, recorded as CANCELLED."""
        if not self._tasks:
            return
        self._cancel_detail = (
            f"still in flight {limit_s:g}s after the last phase ended (the drain limit)"
        )
        for t in list(self._tasks):
            t.cancel()
        await asyncio.wait(set(self._tasks))

    async def _probe_loop(self) -> None:
        """Event-loop lag: how late a periodic timer fires. A busy loop delays every stamp."""
        interval_ns = int(LOOP_PROBE_INTERVAL_S * 1e9)
        while True:
            due = now_ns() + interval_ns
            await asyncio.sleep(LOOP_PROBE_INTERVAL_S)
            self._loop_lag.append(max(now_ns() - due, 0))

    # -- open loop -------------------------------------------------------------------------

    async def _run_open(self, pp: PhasePlan, phase_start: int) -> None:
        sem = asyncio.Semaphore(pp.max_concurrency) if pp.max_concurrency else None
        if pp.sessions is not None:  # multi-turn: harness.client.session
            await run_open_sessions(self, pp, phase_start, sem)
            return
        intended = (pp.offsets_s * 1e9).astype("int64") + phase_start
        prompts = pp.prompt_tokens.tolist()
        outputs = [0] * len(prompts) if self._embeddings else pp.output_tokens.tolist()
        shard = self.cfg.shard
        for k, t_ns in enumerate(intended.tolist()):
            if shard[1] > 1 and not in_shard(k, shard):
                continue
            seq = pp.first_seq + k
            body = self._body(seq, prompts[k], outputs[k], inputs=self._inputs(pp, k))
            request = self._transport.prepare(
                seq, 0, body
            )  # the whole request, before the intended time
            if not await self._sleep_until(t_ns):
                return
            self._spawn(
                self._request(seq, pp.index, t_ns, body, prompts[k], outputs[k], sem, request)
            )

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> asyncio.Task[object]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[object]) -> None:
        """A request (or session) task ended. An exception here escaped `_request`'s own net (a
        bug in recording itself): it is kept for the run's account, whose counts then show the
        request without a record; nothing is left to "Task exception was never retrieved"."""
        self._tasks.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                self._task_errors.append(internal_detail(exc))

    def _make_transport(self) -> Transport[Any, Any]:
        """The transport `http_client` names (harness.client.transport: the seam).

        `Any`: each transport takes back only its own attempts and requests, and the engine only
        hands back what it got from the same transport; Python's types cannot say "some A" (no
        existential types), so the engine reads attempts through the `Attempt` protocol
        (`_attempt`), and each transport is checked against `Transport` with its own types here."""
        t = self.cfg.target
        decoder = decoder_for(t.endpoint)
        setup = TransportSetup(
            t,
            self._url,
            self._headers,
            self.cfg.request_id_prefix,
            self.counters,
            decoder,
            on_suspect=self._suspect,
        )
        if self.http_client == "fast":
            fast: Transport[Exchange, bytes] = FastTransport(setup)
            return fast
        slow: Transport[AttemptState, tuple[bytes, dict[str, str]]] = AiohttpTransport(
            setup, pool_limit=max(self.plan.peak_concurrency_hint, AIOHTTP_MIN_POOL)
        )
        return slow

    def _suspect(self, rid: tuple[int, int]) -> None:
        """The answer of (seq, attempt) `rid` is suspect (harness.client.keepalive): journaled."""
        if self.events is not None:
            self.events({"t": "suspect", "seq": rid[0], "a": rid[1], "why": SUSPECT_WHY})

    # -- closed loop -----------------------------------------------------------------------

    async def _run_closed(self, pp: PhasePlan, phase_start: int) -> None:
        if pp.sessions is not None:  # multi-turn: harness.client.session
            await run_closed_sessions(self, pp, phase_start, closed_users(pp.users, self.cfg.shard))
            return
        end_ns = phase_start + int(pp.duration_s * 1e9) if pp.duration_s is not None else None
        limit = pp.requests
        shard = self.cfg.shard
        think_ns = int(pp.think_s * 1e9)
        prompts = pp.prompt_tokens.tolist()
        outputs = [0] * len(prompts) if self._embeddings else pp.output_tokens.tolist()

        ks = closed_requests_of_shard(limit, pp.users, shard)
        await self._sleep_until(phase_start)

        def claim() -> tuple[int, bytes, int, int, object] | None:
            """The next request of this phase with its body built, or None when none is left."""
            if self.control.stopped:
                return None
            k = next(ks, None)
            if k is None:
                return None
            i = k % len(prompts)
            seq = pp.first_seq + k
            body = self._body(seq, prompts[i], outputs[i], inputs=self._inputs(pp, i))
            return seq, body, prompts[i], outputs[i], self._transport.prepare(seq, 0, body)

        async def user() -> None:
            # The next body is built while the current request is in flight, so a user's
            # intended time (last end + think time) is not delayed by our own work.
            nxt = claim()
            intended = self._rel_now()
            while nxt is not None:
                if end_ns is not None and intended >= end_ns:
                    return
                if not await self._sleep_until(intended):
                    return
                seq, body, p_tok, o_tok, request = nxt
                task = asyncio.get_running_loop().create_task(
                    self._request(seq, pp.index, intended, body, p_tok, o_tok, None, request)
                )
                self._tasks.add(task)
                nxt = claim()
                try:
                    await asyncio.shield(task)  # cancelling this user leaves the request be
                except asyncio.CancelledError:
                    if task.cancelled():  # the request was cut (hard stop, drain limit)
                        return
                    raise
                except Exception as exc:  # noqa: BLE001 - a request task died (our bug): the
                    self._task_errors.append(internal_detail(exc))  # account shows it
                finally:
                    self._tasks.discard(task)
                intended = self._rel_now() + think_ns

        users = [asyncio.create_task(user()) for _ in closed_users(pp.users, shard)]
        try:
            if end_ns is not None:  # after the phase's end, its last requests drain (limited)
                await asyncio.wait(users, timeout=max(end_ns - self._rel_now(), 0) / 1e9)
                left = {u for u in users if not u.done()}
                if left and not self.control.stopped:
                    limit_s = self.drain_limit_s()
                    waiter = asyncio.ensure_future(asyncio.wait(left))
                    stopper = asyncio.ensure_future(self.control.stop_event.wait())
                    await asyncio.wait(
                        {waiter, stopper}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED
                    )
                    stopper.cancel()
                    waiter.cancel()
                    if not self.control.stopped and not all(u.done() for u in left):
                        await self._cut_drain(limit_s)
            await asyncio.gather(*users)
        finally:
            for u in users:
                u.cancel()


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
