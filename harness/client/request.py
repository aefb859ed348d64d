"""One request of a run: its body, its attempts and retries, and its one final Record.

`RequestRunner` is the half of the engine (harness.client.engine.Engine, its subclass) that
takes one request from its body to its Record: `_request` sends it (and its retries, on the
run's one clock: `_rel_now`, `_sleep_until`), `_attempt` goes through the transport once, and
`_record` builds the Record of an attempt, once, for every transport (vetting the server's
counts and redacting server text). `_emit` hands each Record to the sink and keeps the run's
account. The engine decides *when* requests are sent (open and closed loops, sessions, the
drain); everything here runs once per request or attempt, never per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness.client.embeddings import build_embeddings_body, embeddings_bytes_bound
from harness.client.endpoints import build_generation_body
from harness.client.retry import jitter_u, retry_wait_s
from harness.client.state import Control, Counters
from harness.client.transport import (
    UNBOUNDED,
    Attempt,
    Transport,
    classify_exception,
    internal_detail,
)
from harness.record.records import ErrorKind, Record
from harness.record.usage import completion_limit, events_cut_flag, stream_bytes_bound, vet_counts
from harness.redact import Redactor
from harness.workload.plan import PhasePlan, Plan
from harness.workload.prompts import prompt_seed

SPIN_NS = 0  # timers aim this early, then yield until the clock says go
# (uvloop timers have 1 ms resolution; see _sleep_until)


def now_ns() -> int:
    return time.perf_counter_ns()


@dataclass(frozen=True, slots=True)
class Ask:
    """One request as the engine asked for it: what each of its attempts, and each Record of
    them, repeats (`_request` makes it once per request)."""

    seq: int
    phase: int
    intended: int
    body: bytes
    prompt_tokens: int
    output_tokens: int


class RequestRunner:
    """One request from its body to its Record (the engine's state it reads, declared here)."""

    plan: Plan
    cfg: Any  # harness.client.engine.EngineConfig
    sink: Callable[[Record], None]
    control: Control
    counters: Counters
    t0: int
    _transport: Transport[Any, Any]
    _embeddings: bool
    _batch: int
    _redact: Redactor
    _system_tokens: int
    _texts: dict[int, list[str]]
    _turn_of: dict[int, tuple[int, int]]
    _calls: dict[int, list[list[str]]]
    _begun: list[int]
    _recorded: list[int]
    _longest_ns: int
    _session_start: dict[int, int]
    _cancel_detail: str
    _bounds: dict[int, tuple[int, int]]

    # -- the run's clock -------------------------------------------------------------------

    def _rel_now(self) -> int:
        return now_ns() - self.t0

    async def _sleep_until(self, rel_ns: int) -> bool:
        """Sleep until t0 + rel_ns or a stop. Returns False if stopped.

        uvloop's timers have 1 ms resolution: they fire up to ~0.4 ms early and usually
        0.1-1 ms late. A timer that fired early is followed by yielding to the loop (`sleep(0)`:
        reads and other callbacks still run) until the clock reaches the target, so nothing
        is sent before its intended time. Aiming earlier (SPIN_NS > 0) and yielding the rest
        took the send lag p50 from ~0.4 to ~0.2 ms but cost ~50 % more client CPU at 190
        requests/s and did not improve its p99 (docs/history/benchmarks-log.md, timing_open), so SPIN_NS is 0."""
        target = self.t0 + rel_ns
        delay_ns = target - now_ns() - SPIN_NS
        if delay_ns > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_ns / 1e9):
                    await self.control.stop_event.wait()
        while now_ns() < target and not self.control.stopped:
            await asyncio.sleep(0)
        return not self.control.stopped

    # -- its body ------------------------------------------------------------------------

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
        ask = Ask(seq, phase, intended, body, prompt_tokens, output_tokens)
        if sem is not None and not await self._take_slot(sem, ask):
            return None
        attempt = 0
        last: Record | None = None  # the last attempt's record, until it is emitted
        try:
            while True:
                last, retry_after = await self._attempt(
                    ask, attempt, request if attempt == 0 else None
                )
                rec = last
                if not self._should_retry(rec, attempt):
                    last = None
                    self._emit(rec)
                    return rec
                wait_s = self._retry_wait_s(seq, attempt, retry_after)
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
            final = self._internal(exc, last, attempt, ask)
            self._emit(final)
            return final
        finally:
            if sem is not None:
                sem.release()

    async def _take_slot(self, sem: asyncio.Semaphore, ask: Ask) -> bool:
        """Wait for a `max_concurrency` slot. False when the run stopped meanwhile (the slot is
        given back and the request recorded as NOT_SENT); cancelled while waiting, the same."""
        try:
            await sem.acquire()
        except asyncio.CancelledError:
            self._emit(self._not_sent(ask))
            raise
        if self.control.stopped:
            sem.release()
            self._emit(self._not_sent(ask))
            return False
        return True

    def _internal(self, exc: Exception, last: Record | None, attempt: int, ask: Ask) -> Record:
        """The final Record of a request that an exception (our bug) ended: INTERNAL, keeping
        what its last attempt saw when there was one."""
        detail = internal_detail(exc)
        if last is not None:  # after an attempt, before its record went out (retry arithmetic)
            return replace(
                last,
                error=ErrorKind.INTERNAL,
                error_detail=f"{detail} (after attempt {attempt}: {last.error_class})",
            )
        return self._unsent(ask, ErrorKind.INTERNAL, detail, attempt)

    def _retry_wait_s(self, seq: int, attempt: int, retry_after: float | None) -> float:
        """How long to wait before the retry after `attempt` (Retry-After or backoff, jittered)."""
        policy = self.cfg.retry
        wait_s, _ = retry_wait_s(
            retry_after,
            attempt,
            policy.backoff_s,
            policy.max_wait_s,
            jitter_u(self.plan.seed, seq, attempt),
        )
        return wait_s

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
        self, ask: Ask, attempt: int, request: object = None
    ) -> tuple[Record, float | None]:
        """One attempt through the transport; its Record, and the server's Retry-After."""
        seq, output_tokens = ask.seq, ask.output_tokens
        transport = self._transport
        counters = self.counters
        a: Attempt = transport.new_attempt(self.t0)
        a.rid = (seq, attempt)  # named if its answer turns out suspect (client.keepalive)
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
                a, request if request is not None else transport.prepare(seq, attempt, ask.body)
            )
        except Exception as exc:  # noqa: BLE001 - a transport never raises for a server; our bug
            transport.abort(a)
            a.error, a.detail = classify_exception(exc)
            a.end_ns = now_ns() - self.t0
        except asyncio.CancelledError:
            transport.abort(a)
            counters.in_flight -= 1
            self._emit(self._record(a, ask, began, attempt, cancelled=True))
            raise
        counters.in_flight -= 1
        return self._record(a, ask, began, attempt), a.retry_after_s

    def _stream_bounds(self, output_tokens: int) -> tuple[int, int]:
        """An attempt's bounds (`Attempt.max_body_bytes`, `.max_token_events`) for a request of
        `output_tokens`: worked out once per length (`_bounds`), not per attempt."""
        if self._embeddings:
            return embeddings_bytes_bound(self._batch), UNBOUNDED
        events = completion_limit(output_tokens) if output_tokens > 0 else UNBOUNDED
        return stream_bytes_bound(output_tokens), events

    def _record(
        self, a: Attempt, ask: Ask, began: int, attempt: int, cancelled: bool = False
    ) -> Record:
        """The Record of an attempt: built here, once, for every transport. A cancelled attempt
        (the run stopped, or the drain limit passed) ends now, with what it had received. The
        server's counts are vetted (`harness.record.usage.vet_counts`): one not believed is
        replaced by the client's own and named in `usage_flag`."""
        dec = a.dec
        output_tokens, request_bytes = ask.output_tokens, len(ask.body)
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
            seq=ask.seq,
            phase=ask.phase,
            intended_ns=ask.intended,
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
            planned_prompt_tokens=ask.prompt_tokens + self._system_tokens,
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

    def _not_sent(self, ask: Ask) -> Record:
        return self._unsent(ask, ErrorKind.NOT_SENT, "stopped while waiting for max_concurrency")

    def _unsent(self, ask: Ask, error: ErrorKind, detail: str, attempt: int = 0) -> Record:
        """The Record of a request that ended, now, with nothing sent (or nothing kept)."""
        return Record(
            seq=ask.seq,
            phase=ask.phase,
            intended_ns=ask.intended,
            sent_ns=None,
            end_ns=self._rel_now(),
            error=error,
            error_detail=detail,
            planned_prompt_tokens=ask.prompt_tokens + self._system_tokens,
            planned_output_tokens=ask.output_tokens,
            attempt=attempt,
        )


def _with_retried(rec: Record) -> Record:
    return replace(rec, retried=True)
