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
builds the Record from the attempt, once (`_record`), passing the error detail, which quotes
the server, through `Target.redactor()` (harness.redact: secrets masked, control characters
escaped): nothing after the engine sees an echoed key. A failed request never aborts the run.
Finished Records go to the `sink` (the journal) at once.

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
from dataclasses import dataclass, replace
from typing import Any

from harness.client.embeddings import build_embeddings_body, embeddings_bytes_bound
from harness.client.endpoints import (
    ENDPOINT_PATHS,
    accept_header,
    build_generation_body,
    decoder_for,
)
from harness.client.fasthttp import Exchange
from harness.client.retry import jitter_u, retry_wait_s
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
    UNBOUNDED,
    Attempt,
    AttemptState,
    Transport,
    choose_http_client,
    classify_exception,
    internal_detail,
)
from harness.client.transport_aiohttp import AiohttpTransport
from harness.client.transport_fast import FastTransport
from harness.config.scenario import RetryPolicy
from harness.config.target import Target
from harness.record.records import ErrorKind, Record
from harness.record.usage import completion_limit, events_cut_flag, stream_bytes_bound, vet_counts
from harness.workload.plan import PhasePlan, Plan
from harness.workload.prompts import prompt_seed
from harness.workload.scenario import Workload

START_LEAD_NS = 50_000_000  # t0 is this far after setup, so the first sends are not late
SPIN_NS = 0  # timers aim this early, then yield until the clock says go
# (uvloop timers have 1 ms resolution; see _sleep_until)
LOOP_PROBE_INTERVAL_S = 0.05  # event-loop lag probe period
DEFAULT_GRACE_S = 10.0  # in-flight requests may finish this long after a stop
AIOHTTP_MIN_POOL = 100  # aiohttp's connection limit: the plan's peak concurrency, at least this
DRAIN_MIN_S = 60.0  # after its last phase, a run waits this long for requests in flight ...
DRAIN_FACTOR = 2.0  # ... or this many times its longest finished request, if that is longer
STOPPED_DETAIL = "in flight when the run stopped"
MAX_TASK_ERRORS = 5  # exceptions kept per shard of requests that died without a record


def now_ns() -> int:
    return time.perf_counter_ns()


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


class Engine:
    def __init__(
        self,
        plan: Plan,
        cfg: EngineConfig,
        sink: Callable[[Record], None],
        control: Control,
        counters: Counters | None = None,
    ) -> None:
        self.plan = plan
        self.cfg = cfg
        self.sink = sink
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

    def _rel_now(self) -> int:
        return now_ns() - self.t0

    async def _sleep_until(self, rel_ns: int) -> bool:
        """Sleep until t0 + rel_ns or a stop. Returns False if stopped.

        uvloop's timers have 1 ms resolution: they fire up to ~0.4 ms early and usually
        0.1-1 ms late. A timer that fired early is followed by yielding to the loop (`sleep(0)`:
        reads and other callbacks still run) until the clock reaches the target, so nothing
        is sent before its intended time. Aiming earlier (SPIN_NS > 0) and yielding the rest
        took the send lag p50 from ~0.4 to ~0.2 ms but cost ~50 % more client CPU at 190
        requests/s and did not improve its p99 (BENCHMARKS.md, timing_open), so SPIN_NS is 0."""
        target = self.t0 + rel_ns
        delay_ns = target - now_ns() - SPIN_NS
        if delay_ns > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_ns / 1e9):
                    await self.control.stop_event.wait()
        while now_ns() < target and not self.control.stopped:
            await asyncio.sleep(0)
        return not self.control.stopped

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
        if self.http_client == "fast":
            fast: Transport[Exchange, bytes] = FastTransport(
                t, self._url, self._headers, self.cfg.request_id_prefix, self.counters, decoder
            )
            return fast
        slow: Transport[AttemptState, tuple[bytes, dict[str, str]]] = AiohttpTransport(
            t,
            self._url,
            self._headers,
            self.cfg.request_id_prefix,
            self.counters,
            pool_limit=max(self.plan.peak_concurrency_hint, AIOHTTP_MIN_POOL),
            decoder=decoder,
        )
        return slow

    def _body(
        self,
        seq: int,
        prompt_tokens: int,
        output_tokens: int,
        history: tuple[tuple[str, str], ...] = (),
        inputs: list[int] | None = None,
    ) -> bytes:
        wl = self.cfg.workload
        if self._embeddings:  # a batch of inputs, each its own text
            lengths = inputs if inputs is not None else [prompt_tokens]
            texts = [self.plan.prompt_text(lengths[0], seq)] + [
                self.plan.prompts.text(
                    self.plan.prompts.content_tokens(n),
                    prompt_seed(self.plan.seed, seq) ^ (j << 40),
                )
                for j, n in enumerate(lengths[1:], 1)
            ]
            return build_embeddings_body(
                model=self.cfg.target.model or "", inputs=texts, extra=wl.extra_body
            )
        return self._generation_body(
            output_tokens, prompt=self.plan.prompt_text(prompt_tokens, seq), history=history
        )

    def _agent_body(self, seq: int, output_tokens: int, messages: list[dict[str, Any]]) -> bytes:
        """An agent step's body: the system prompt, then `messages` (harness.client.agent)."""
        return self._generation_body(output_tokens, messages=messages)

    def _generation_body(
        self,
        output_tokens: int,
        prompt: str = "",
        history: tuple[tuple[str, str], ...] = (),
        messages: list[dict[str, Any]] | None = None,
    ) -> bytes:
        wl = self.cfg.workload
        return build_generation_body(
            endpoint=self.cfg.target.endpoint,
            model=self.cfg.target.model or "",
            prompt=prompt,
            system_prompt=self.plan.system_prompt,
            max_tokens=output_tokens,
            ignore_eos=wl.ignore_eos,
            continuous_usage=self.cfg.continuous_usage,
            temperature=wl.temperature,
            top_p=wl.top_p,
            extra=wl.extra_body,
            max_tokens_key=self.cfg.max_tokens_key,
            history=history,
            messages=messages,
        )

    def _inputs(self, pp: PhasePlan, k: int) -> list[int] | None:
        """An embeddings request's input lengths (None for a generation request)."""
        return pp.inputs(k) if self._embeddings else None

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

    # -- one request -----------------------------------------------------------------------

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
    ) -> Record | None:
        """Send one request (and its retries); return its final Record (None: never sent).

        Exactly one final Record is emitted, whatever happens: an exception inside (our bug, or
        retry arithmetic beyond what a float holds) ends the request as INTERNAL, keeping what
        its last attempt saw."""
        self._begun[phase] += 1
        if sem is not None:
            try:
                await sem.acquire()
            except asyncio.CancelledError:
                self._emit(self._not_sent(seq, phase, intended, prompt_tokens, output_tokens))
                raise
            if self.control.stopped:
                sem.release()
                self._emit(self._not_sent(seq, phase, intended, prompt_tokens, output_tokens))
                return None
        attempt = 0
        last: Record | None = None  # the last attempt's record, until it is emitted
        try:
            while True:
                last, retry_after = await self._attempt(
                    seq,
                    phase,
                    intended,
                    body,
                    prompt_tokens,
                    output_tokens,
                    attempt,
                    request if attempt == 0 else None,
                )
                rec = last
                if not self._should_retry(rec, attempt):
                    last = None
                    self._emit(rec)
                    return rec
                policy = self.cfg.retry
                wait_s, _ = retry_wait_s(
                    retry_after,
                    attempt,
                    policy.backoff_s,
                    policy.max_wait_s,
                    jitter_u(self.plan.seed, seq, attempt),
                )
                if wait_s > 0:
                    # A stop during the wait (Retry-After or backoff) makes this attempt the
                    # request's final outcome; otherwise the request would vanish from the journal.
                    try:
                        waited = await self._sleep_until(self._rel_now() + int(wait_s * 1e9))
                    except asyncio.CancelledError:
                        last = None
                        self._emit(rec)
                        raise
                    if not waited:
                        last = None
                        self._emit(rec)
                        return rec
                last = None
                self._emit(_with_retried(rec))
                attempt += 1
        except Exception as exc:  # noqa: BLE001 - our bug inside one request: it is still recorded
            detail = internal_detail(exc)
            if last is not None:  # after an attempt, before its record went out (retry arithmetic)
                final = replace(
                    last,
                    error=ErrorKind.INTERNAL,
                    error_detail=f"{detail} (after attempt {attempt}: {last.error_class})",
                )
            else:
                final = Record(
                    seq=seq,
                    phase=phase,
                    intended_ns=intended,
                    sent_ns=None,
                    end_ns=self._rel_now(),
                    error=ErrorKind.INTERNAL,
                    error_detail=detail,
                    planned_prompt_tokens=prompt_tokens + self._system_tokens,
                    planned_output_tokens=output_tokens,
                    attempt=attempt,
                )
            self._emit(final)
            return final
        finally:
            if sem is not None:
                sem.release()

    def _answer_text(self, seq: int) -> list[str] | None:
        """Where a multi-turn request's answer text goes (emptied for each attempt); None for a
        single-turn request, whose text nobody reads."""
        text = self._texts.get(seq)
        if text is not None:
            text.clear()
        return text

    def _tool_calls(self, seq: int) -> list[list[str]] | None:
        """Where an agent request's tool calls go (emptied for each attempt); None otherwise."""
        calls = self._calls.get(seq)
        if calls is not None:
            calls.clear()
        return calls

    def _should_retry(self, rec: Record, attempt: int) -> bool:
        policy = self.cfg.retry
        if rec.error is None or attempt >= policy.max or not policy.on or self.control.stopped:
            return False
        cls = rec.error_class or ""
        return (
            (
                rec.status is not None
                and str(rec.status) in policy.on
                and rec.error is ErrorKind.HTTP_STATUS
            )
            or cls in policy.on
            or (cls.startswith("timeout") and "timeout" in policy.on)
        )

    def _emit(self, rec: Record) -> None:
        if self._turn_of:
            tag = self._turn_of.get(rec.seq)
            if tag is not None:
                rec = replace(rec, session_id=tag[0], turn_index=tag[1])
        c = self.counters
        if rec.error is None:
            c.completed += 1
            if rec.end_ns is not None:  # for the drain limit: the longest request or session
                start = rec.intended_ns
                if rec.session_id is not None:
                    start = self._session_start.setdefault(rec.session_id, start)
                self._longest_ns = max(self._longest_ns, rec.end_ns - start)
        elif not rec.retried:
            c.failed += 1
        if not rec.retried:
            self._recorded[rec.phase] += 1
        self.sink(rec)

    async def _attempt(
        self,
        seq: int,
        phase: int,
        intended: int,
        body: bytes,
        prompt_tokens: int,
        output_tokens: int,
        attempt: int,
        request: object = None,
    ) -> tuple[Record, float | None]:
        """One attempt through the transport; its Record, and the server's Retry-After."""
        transport = self._transport
        counters = self.counters
        a: Attempt = transport.new_attempt(self.t0)
        a.dec.text = self._answer_text(seq)
        if self._calls:
            a.dec.calls = self._tool_calls(seq)
        bounds = self._bounds.get(output_tokens)
        if bounds is None:
            bounds = self._bounds[output_tokens] = self._stream_bounds(output_tokens)
        a.max_body_bytes, a.max_token_events = bounds
        counters.in_flight += 1
        began = now_ns() - self.t0
        counters.sent += 1
        try:
            await transport.send(
                a, request if request is not None else transport.prepare(seq, attempt, body)
            )
        except Exception as exc:  # noqa: BLE001 - a transport never raises for a server; our bug
            transport.abort(a)
            a.error, a.detail = classify_exception(exc)
            a.end_ns = now_ns() - self.t0
        except asyncio.CancelledError:
            transport.abort(a)
            counters.in_flight -= 1
            self._emit(
                self._record(
                    a,
                    seq,
                    phase,
                    intended,
                    began,
                    prompt_tokens,
                    output_tokens,
                    attempt,
                    len(body),
                    cancelled=True,
                )
            )
            raise
        counters.in_flight -= 1
        return self._record(
            a, seq, phase, intended, began, prompt_tokens, output_tokens, attempt, len(body)
        ), a.retry_after_s

    def _stream_bounds(self, output_tokens: int) -> tuple[int, int]:
        """An attempt's bounds (`Attempt.max_body_bytes`, `.max_token_events`) for a request of
        `output_tokens`: worked out once per length (`_bounds`), not per attempt."""
        if self._embeddings:
            return embeddings_bytes_bound(self._batch), UNBOUNDED
        events = completion_limit(output_tokens) if output_tokens > 0 else UNBOUNDED
        return stream_bytes_bound(output_tokens), events

    def _record(
        self,
        a: Attempt,
        seq: int,
        phase: int,
        intended: int,
        began: int,
        prompt_tokens: int,
        output_tokens: int,
        attempt: int,
        request_bytes: int,
        cancelled: bool = False,
    ) -> Record:
        """The Record of an attempt: built here, once, for every transport. A cancelled attempt
        (the run stopped, or the drain limit passed) ends now, with what it had received. The
        server's counts are vetted (`harness.record.usage.vet_counts`): one not believed is
        replaced by the client's own and named in `usage_flag`."""
        dec = a.dec
        chunk_ns, chunk_tokens = a.chunk_ns, a.chunk_tokens
        error: ErrorKind | None
        if cancelled:
            error, detail, end = ErrorKind.CANCELLED, self._cancel_detail, self._rel_now()
        else:
            error, detail = a.error, a.detail
            end = chunk_ns[-1] if (chunk_ns and error is None) else a.end_ns
        n_emb = getattr(dec, "n_embeddings", None) if self._embeddings else None
        if error is None and n_emb is not None and n_emb != self._batch:
            error = ErrorKind.MALFORMED
            detail = f"the answer has {n_emb} embeddings for the {self._batch} inputs sent"
        events = len(chunk_tokens)
        chunk_sum = sum(chunk_tokens)
        if cancelled:
            out_tokens = dec.completion_tokens or chunk_sum
        else:
            out_tokens = dec.completion_tokens if dec.completion_tokens is not None else chunk_sum
        sent = a.sent_ns is not None
        v = vet_counts(
            output_tokens=out_tokens,
            prompt_tokens=dec.prompt_tokens or 0,
            n_events=events,
            chunk_sum=chunk_sum,
            max_tokens=output_tokens,
            received_bytes=a.received_bytes if a.headers_ns is not None else None,
            request_bytes=request_bytes if sent else None,
            flags=(*dec.usage_flags, events_cut_flag(output_tokens))
            if a.events_cut
            else dec.usage_flags,
            cached_tokens=dec.cached_tokens,
        )
        return Record(
            seq=seq,
            phase=phase,
            intended_ns=intended,
            sent_ns=a.sent_ns if sent else began,
            headers_ns=a.headers_ns,
            chunk_ns=tuple(chunk_ns),
            chunk_tokens=(1,) * events if v.own_chunks else tuple(chunk_tokens),
            end_ns=end,
            status=a.status,
            error=error,
            error_detail=self._redact(detail),
            prompt_tokens=v.prompt_tokens,
            output_tokens=v.output_tokens,
            planned_prompt_tokens=prompt_tokens + self._system_tokens,
            planned_output_tokens=output_tokens,
            usage_per_chunk=dec.usage_per_chunk and not v.own_chunks,
            attempt=attempt,
            retry_after_s=None if cancelled else a.retry_after_s,
            request_bytes=request_bytes if sent else None,
            received_bytes=a.received_bytes if a.headers_ns is not None else None,
            usage_flag=v.flag,
            channel_runs=tuple(r for r in dec.channel_runs if r[0] < events)
            if dec.channel_runs
            else (),
            usage_reasoning_tokens=dec.reasoning_tokens,
            cached_tokens=v.cached_tokens,
        )

    def _not_sent(
        self, seq: int, phase: int, intended: int, prompt_tokens: int, output_tokens: int
    ) -> Record:
        return Record(
            seq=seq,
            phase=phase,
            intended_ns=intended,
            sent_ns=None,
            end_ns=self._rel_now(),
            error=ErrorKind.NOT_SENT,
            error_detail="stopped while waiting for max_concurrency",
            planned_prompt_tokens=prompt_tokens + self._system_tokens,
            planned_output_tokens=output_tokens,
        )


def _with_retried(rec: Record) -> Record:
    return replace(rec, retried=True)


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
