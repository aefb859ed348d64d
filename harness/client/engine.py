"""The engine: execute a Plan against a Target, stamping every token as it arrives.

Theory of operation
-------------------
The engine is the only client module that awaits, opens connections or reads the clock. It
reads one monotonic clock, `time.perf_counter_ns()`, and stores every time as ns since `t0`,
the run's start.

*Open-loop phases* have their intended send times fixed by the plan. A scheduler coroutine
walks them in order, sleeping until each absolute time (`t0 + phase start + offset`), and
starts one task per request; a late wake-up never shifts later requests. Requests that find
the phase's `max_concurrency` cap full wait for a slot, and that wait shows as send lag.

*Closed-loop phases* run N user coroutines; each sends its next request when its last one
ended plus think time, which is that request's intended time.

Each request task builds its body before its intended time, stamps `sent` just before the
request is written, `headers` when the status line is in, then reads the body with
`readany()`: one clock read per socket read, and every SSE event parsed out of that read gets
that stamp (never a stamp after JSON parsing). Failures become an ErrorKind on the Record
(`classify_exception` is the one place foreign exceptions are mapped); a failed request never
aborts the run. Finished Records go to the `sink` (the journal) at once.

Stopping: `Control.stop()` (first Ctrl-C, SIGTERM, a journal failure) ends sending; requests
in flight get `grace_s` to finish, then are cancelled and recorded as CANCELLED. Requests still
waiting for a concurrency slot are recorded as NOT_SENT.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import aiohttp

from harness.client.adapt import Adaptation, RequestShape, negotiate
from harness.client.fasthttp import Exchange, FastClient, Origin, request_head_prefix
from harness.client.openai import (
    ENDPOINT_PATHS,
    StreamDecoder,
    StreamError,
    build_body,
    error_message,
)
from harness.client.retry import jitter_u, parse_retry_after, retry_wait_s
from harness.client.session import run_closed_sessions, run_open_sessions
from harness.client.shard import (
    WHOLE,
    Shard,
    closed_request_in_shard,
    closed_users,
    in_shard,
    owned_below,
)
from harness.client.sse import SSEError, SSESplitter
from harness.client.state import Control, Counters, Interrupts, RunOutcome  # noqa: F401 - Interrupts: re-exported
from harness.config.scenario import RetryPolicy
from harness.config.target import Target
from harness.record.records import ErrorKind, Record
from harness.workload.plan import PhasePlan, Plan
from harness.workload.scenario import Workload

START_LEAD_NS = 50_000_000        # t0 is this far after setup, so the first sends are not late
SPIN_NS = 0                       # timers aim this early, then yield until the clock says go
                                  # (uvloop timers have 1 ms resolution; see _sleep_until)
LOOP_PROBE_INTERVAL_S = 0.05      # event-loop lag probe period
DEFAULT_GRACE_S = 10.0            # in-flight requests may finish this long after a stop
READ_BUFSIZE = 1 << 18            # aiohttp read buffer; long streams of big chunks stay unpaused
ERROR_BODY_LIMIT = 64 * 1024      # bytes of an error response kept for its message


def now_ns() -> int:
    return time.perf_counter_ns()


def classify_exception(exc: BaseException) -> tuple[ErrorKind, str]:
    """Map any exception raised while talking to a server to an ErrorKind and a short detail.

    Our own StreamError/SSEError carry their kind. Anything not listed is our bug and is
    re-raised by the caller.
    """
    if isinstance(exc, StreamError):
        return exc.kind, exc.detail
    if isinstance(exc, SSEError):
        return ErrorKind.BODY_TOO_LARGE, str(exc)
    detail = f"{type(exc).__name__}: {exc}"[:300]
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ClientProxyConnectionError):
        return ErrorKind.CONNECT, detail
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ErrorKind.TIMEOUT_CONNECT, detail
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return ErrorKind.TIMEOUT_IDLE, detail
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError
                  | aiohttp.ClientOSError | ConnectionError):
        return ErrorKind.STREAM_CUT, detail
    if isinstance(exc, aiohttp.ClientResponseError):
        if exc.status and exc.status >= 400:
            return ErrorKind.HTTP_STATUS, detail
        return ErrorKind.MALFORMED, detail
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.ClientConnectionError | OSError):
        return ErrorKind.CONNECT, detail
    if isinstance(exc, aiohttp.ClientError | ValueError | UnicodeDecodeError):
        return ErrorKind.MALFORMED, detail
    raise TypeError(f"unmapped exception {type(exc).__name__}") from exc


@dataclass(frozen=True)
class EngineConfig:
    target: Target
    workload: Workload
    retry: RetryPolicy = RetryPolicy()
    continuous_usage: bool = True
    grace_s: float = DEFAULT_GRACE_S
    request_id_prefix: str = "harness"
    http_client: str = "auto"        # "fast" (plain http only), "aiohttp", or "auto": fast for http://
    shard: Shard = WHOLE             # (index, count): this process runs one shard of the plan (client.shard)
    max_tokens_key: str = "max_tokens"  # "max_completion_tokens" where the target refuses the old name


HTTP_CLIENTS = ("auto", "fast", "aiohttp")
PRECONNECT_WINDOW_S = 1.0         # the pool is warmed for the first phase's first second ...
PRECONNECT_MAX = 1024             # ... up to this many (servers and gateways cap connections) ...
PRECONNECT_BUDGET_S = 5.0         # ... opened within this long before t0


def preconnect_count(plan: Plan, shard: Shard) -> int:
    """Connections this shard needs at once at the start: the first phase's closed-loop user
    slots, or its open-loop requests intended in the first PRECONNECT_WINDOW_S (capped by
    max_concurrency), at most PRECONNECT_MAX."""
    if not plan.phases:
        return 0
    p = plan.phases[0]
    if p.closed:
        n = len(closed_users(p.users, shard))
    else:
        k = int((p.offsets_s < PRECONNECT_WINDOW_S).sum())
        n = owned_below(k, shard)
        if p.max_concurrency:
            n = min(n, -(-p.max_concurrency // shard[1]))
    return min(n, PRECONNECT_MAX)


def choose_http_client(name: str, base_url: str) -> str:
    """'fast' or 'aiohttp' for a target. Raises ValueError for fast with https or an unknown name."""
    if name not in HTTP_CLIENTS:
        raise ValueError(f"expected one of {', '.join(HTTP_CLIENTS)}, got {name!r}")
    plain = base_url.startswith("http://")
    if name == "auto":
        return "fast" if plain else "aiohttp"
    if name == "fast" and not plain:
        raise ValueError(f"fast supports http:// targets only (got {base_url}); use aiohttp for https")
    return name


class Engine:
    def __init__(self, plan: Plan, cfg: EngineConfig, sink: Callable[[Record], None],
                 control: Control, counters: Counters | None = None) -> None:
        self.plan = plan
        self.cfg = cfg
        self.sink = sink
        self.control = control
        self.counters = counters or Counters()
        self.t0 = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._url = cfg.target.url(ENDPOINT_PATHS[cfg.target.endpoint])
        self._headers = cfg.target.request_headers({"Content-Type": "application/json",
                                                     "Accept": "text/event-stream"})
        self._loop_lag: list[int] = []
        self.http_client = choose_http_client(cfg.http_client, cfg.target.base_url)
        self._fast: FastClient | None = None
        self._head_prefix = b""
        self._request_id_prefix = cfg.request_id_prefix.encode("latin-1", "replace")
        self._system_tokens = plan.system_prompt_tokens
        self.preconnected = 0
        self._texts: dict[int, list[str]] = {}              # multi-turn: seq -> its answer's text
        self._turn_of: dict[int, tuple[int, int]] = {}      # multi-turn: seq -> (session id, turn)

    # -- the run ---------------------------------------------------------------------------

    async def run(self, t0_ns: int | None = None, t0_wall_s: float | None = None) -> RunOutcome:
        """Execute the plan (this engine's shard of it). `t0_ns` (perf_counter_ns, a shared
        start for worker processes on one machine) replaces the default `now + START_LEAD_NS`."""
        if self.http_client == "fast":
            origin = Origin.of(self._url)
            self._fast = FastClient(origin, self.cfg.target.timeouts.connect_s)
            self._head_prefix = request_head_prefix(origin, self._headers)
        limit = max(self.plan.peak_concurrency_hint, 100)
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ssl=None if self.cfg.target.tls_verify else False,
                                         ttl_dns_cache=300, enable_cleanup_closed=False)
        timeout = aiohttp.ClientTimeout(total=None, connect=self.cfg.target.timeouts.connect_s)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                             read_bufsize=READ_BUFSIZE, auto_decompress=False,
                                             skip_auto_headers=("User-Agent",))
        if self._fast is not None:
            # Warm the pool before t0: connection set-up (and the server's accept backlog) then
            # lands in no measured request. With a given t0 (workers), stop short of it.
            deadline = (now_ns() + int(PRECONNECT_BUDGET_S * 1e9) if t0_ns is None
                        else t0_ns - START_LEAD_NS // 2)
            self.preconnected = await self._fast.preconnect(
                preconnect_count(self.plan, self.cfg.shard), deadline)
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
                    phase_end = self._rel_now() if pp.requests is not None else phase_start + int(pp.duration_s * 1e9)  # type: ignore[operator]
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
            await self.session.close()
            if self._fast is not None:
                await self._fast.close()
            gc.unfreeze()
        end = self._rel_now()
        return RunOutcome(self.t0, t0_wall, end, starts, ends, not self.control.stopped,
                          self.control.reason, _cpu_s() - cpu0, self._loop_lag)

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

    async def _drain(self) -> None:
        """Wait for requests in flight; after a stop, give them grace_s, then cancel."""
        if not self._tasks:
            return
        if not self.control.stopped:
            waiter = asyncio.ensure_future(asyncio.wait(set(self._tasks)))
            stopper = asyncio.ensure_future(self.control.stop_event.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if waiter.done():
                return
            waiter.cancel()
        pending = set(self._tasks)
        if pending and not self.control.hard:
            await asyncio.wait(pending, timeout=self.cfg.grace_s)
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
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
        if pp.sessions is not None:     # multi-turn: harness.client.session
            await run_open_sessions(self, pp, phase_start, sem)
            return
        intended = (pp.offsets_s * 1e9).astype("int64") + phase_start
        prompts = pp.prompt_tokens.tolist()
        outputs = pp.output_tokens.tolist()
        shard = self.cfg.shard
        for k, t_ns in enumerate(intended.tolist()):
            if shard[1] > 1 and not in_shard(k, shard):
                continue
            seq = pp.first_seq + k
            body = self._body(seq, prompts[k], outputs[k])
            wire = self._wire(seq, 0, body)     # the whole request, before the intended time
            if not await self._sleep_until(t_ns):
                return
            self._spawn(self._request(seq, pp.index, t_ns, body, prompts[k], outputs[k], sem, wire))

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _wire(self, seq: int, attempt: int, body: bytes) -> bytes | None:
        """The lean path's whole request (request line, headers, body) for one write; None on
        the aiohttp path."""
        if self._fast is None:
            return None
        return b"%sX-Request-Id: %s-%d-%d\r\nContent-Length: %d\r\n\r\n%s" % (
            self._head_prefix, self._request_id_prefix, seq, attempt, len(body), body)

    def _body(self, seq: int, prompt_tokens: int, output_tokens: int,
              history: tuple[tuple[str, str], ...] = ()) -> bytes:
        wl = self.cfg.workload
        return build_body(
            endpoint=self.cfg.target.endpoint, model=self.cfg.target.model or "",
            prompt=self.plan.prompt_text(prompt_tokens, seq),
            system_prompt=self.plan.system_prompt, max_tokens=output_tokens,
            ignore_eos=wl.ignore_eos, continuous_usage=self.cfg.continuous_usage,
            temperature=wl.temperature, top_p=wl.top_p, extra=wl.extra_body,
            max_tokens_key=self.cfg.max_tokens_key, history=history)

    # -- closed loop -----------------------------------------------------------------------

    async def _run_closed(self, pp: PhasePlan, phase_start: int) -> None:
        if pp.sessions is not None:     # multi-turn: harness.client.session
            await run_closed_sessions(self, pp, phase_start, closed_users(pp.users, self.cfg.shard))
            return
        end_ns = phase_start + int(pp.duration_s * 1e9) if pp.duration_s is not None else None
        limit = pp.requests
        shard = self.cfg.shard
        think_ns = int(pp.think_s * 1e9)
        prompts = pp.prompt_tokens.tolist()
        outputs = pp.output_tokens.tolist()

        def shard_ks() -> Iterator[int]:
            """This shard's request indices: those whose user slot (k mod users) it runs, so a
            shard with more user slots takes proportionally more requests."""
            k = 0
            while limit is None or k < limit:
                if shard[1] == 1 or closed_request_in_shard(k, pp.users, shard):
                    yield k
                k += 1

        ks = shard_ks()
        await self._sleep_until(phase_start)

        def claim() -> tuple[int, bytes, int, int, bytes | None] | None:
            """The next request of this phase with its body built, or None when none is left."""
            if self.control.stopped:
                return None
            k = next(ks, None)
            if k is None:
                return None
            i = k % len(prompts)
            seq = pp.first_seq + k
            body = self._body(seq, prompts[i], outputs[i])
            return seq, body, prompts[i], outputs[i], self._wire(seq, 0, body)

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
                seq, body, p_tok, o_tok, wire = nxt
                task = asyncio.get_running_loop().create_task(
                    self._request(seq, pp.index, intended, body, p_tok, o_tok, None, wire))
                self._tasks.add(task)
                nxt = claim()
                try:
                    await asyncio.shield(task)
                finally:
                    self._tasks.discard(task)
                intended = self._rel_now() + think_ns

        users = [asyncio.create_task(user()) for _ in closed_users(pp.users, shard)]
        try:
            await asyncio.gather(*users)
        finally:
            for u in users:
                u.cancel()

    # -- one request -----------------------------------------------------------------------

    async def _request(self, seq: int, phase: int, intended: int, body: bytes, prompt_tokens: int,
                       output_tokens: int, sem: asyncio.Semaphore | None, wire: bytes | None = None
                       ) -> Record | None:
        """Send one request (and its retries); return its final Record (None: never sent)."""
        if sem is not None:
            try:
                await sem.acquire()
            except asyncio.CancelledError:
                self._emit(Record(seq, phase, intended, None, end_ns=self._rel_now(),
                                  error=ErrorKind.NOT_SENT, error_detail="stopped while waiting for max_concurrency",
                                  planned_prompt_tokens=prompt_tokens + self._system_tokens, planned_output_tokens=output_tokens))
                raise
            if self.control.stopped:
                sem.release()
                self._emit(Record(seq, phase, intended, None, end_ns=self._rel_now(),
                                  error=ErrorKind.NOT_SENT, error_detail="stopped while waiting for max_concurrency",
                                  planned_prompt_tokens=prompt_tokens + self._system_tokens, planned_output_tokens=output_tokens))
                return None
        try:
            attempt = 0
            while True:
                rec, retry_after = await self._attempt(seq, phase, intended, body, prompt_tokens,
                                                       output_tokens, attempt, wire if attempt == 0 else None)
                if not self._should_retry(rec, attempt):
                    self._emit(rec)
                    return rec
                policy = self.cfg.retry
                wait_s, _ = retry_wait_s(retry_after, attempt, policy.backoff_s, policy.max_wait_s,
                                         jitter_u(self.plan.seed, seq, attempt))
                if wait_s > 0:
                    # A stop during the wait (Retry-After or backoff) makes this attempt the
                    # request's final outcome; otherwise the request would vanish from the journal.
                    try:
                        waited = await self._sleep_until(self._rel_now() + int(wait_s * 1e9))
                    except asyncio.CancelledError:
                        self._emit(rec)
                        raise
                    if not waited:
                        self._emit(rec)
                        return rec
                self._emit(_with_retried(rec))
                attempt += 1
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

    def _should_retry(self, rec: Record, attempt: int) -> bool:
        policy = self.cfg.retry
        if rec.error is None or attempt >= policy.max or not policy.on or self.control.stopped:
            return False
        cls = rec.error_class or ""
        return ((rec.status is not None and str(rec.status) in policy.on and rec.error is ErrorKind.HTTP_STATUS)
                or cls in policy.on or (cls.startswith("timeout") and "timeout" in policy.on))

    def _emit(self, rec: Record) -> None:
        if self._turn_of:
            tag = self._turn_of.get(rec.seq)
            if tag is not None:
                rec = replace(rec, session_id=tag[0], turn_index=tag[1])
        c = self.counters
        if rec.error is None:
            c.completed += 1
        elif not rec.retried:
            c.failed += 1
        self.sink(rec)

    async def _attempt(self, seq: int, phase: int, intended: int, body: bytes, prompt_tokens: int,
                       output_tokens: int, attempt: int, wire: bytes | None = None) -> tuple[Record, float | None]:
        if self._fast is not None:
            return await self._attempt_fast(seq, phase, intended, prompt_tokens, output_tokens, attempt,
                                            wire or self._wire(seq, attempt, body))  # type: ignore[arg-type]
        t0 = self.t0
        to = self.cfg.target.timeouts
        loop = asyncio.get_running_loop()
        chunk_ns: array[int] = array("q")
        chunk_tokens: array[int] = array("q")
        headers_ns: int | None = None
        status: int | None = None
        error: ErrorKind | None = None
        detail = ""
        retry_after: float | None = None
        dec = StreamDecoder()
        dec.text = self._answer_text(seq)
        counters = self.counters
        headers = dict(self._headers)
        headers["X-Request-Id"] = f"{self.cfg.request_id_prefix}-{seq}-{attempt}"
        counters.in_flight += 1
        start_loop = loop.time()
        total_deadline = start_loop + to.total_s
        first_deadline = min(start_loop + to.first_token_s, total_deadline)
        sent = now_ns() - t0
        counters.sent += 1
        try:
            async with asyncio.timeout_at(first_deadline) as cm:
                async with self.session.post(self._url, data=body, headers=headers) as resp:
                    headers_ns = now_ns() - t0
                    status = resp.status
                    if status != 200:
                        error = ErrorKind.HTTP_STATUS
                        raw = await resp.content.read(ERROR_BODY_LIMIT)
                        detail = f"HTTP {status}: {error_message(raw)}"
                        retry_after = parse_retry_after(resp.headers.get("Retry-After"),
                                                        resp.headers.get("retry-after-ms"), time.time())
                    else:
                        splitter = SSESplitter()
                        content = resp.content
                        on_event = dec.on_event
                        idle = to.idle_s
                        while True:
                            data = await content.readany()
                            stamp = now_ns() - t0
                            if not data:
                                break
                            for ev in splitter.feed(data):
                                n = on_event(ev.data)
                                if n:
                                    chunk_ns.append(stamp)
                                    chunk_tokens.append(n)
                                    counters.output_tokens += n
                            if dec.done:
                                break
                            if chunk_ns:
                                cm.reschedule(min(loop.time() + idle, total_deadline))
                        if not dec.done:
                            error = ErrorKind.STREAM_CUT
                            detail = "the stream ended before data: [DONE]" + (
                                " (mid-event)" if splitter.close() else "")
        except TimeoutError:
            if not chunk_ns and loop.time() >= first_deadline - 1e-3 and first_deadline < total_deadline:
                error, detail = ErrorKind.TIMEOUT_FIRST_TOKEN, f"no token within {to.first_token_s:g}s"
            elif loop.time() >= total_deadline - 1e-3:
                error, detail = ErrorKind.TIMEOUT_TOTAL, f"request exceeded {to.total_s:g}s"
            else:
                error, detail = ErrorKind.TIMEOUT_IDLE, f"no data for {to.idle_s:g}s"
        except asyncio.CancelledError:
            counters.in_flight -= 1
            rec = Record(seq, phase, intended, sent, headers_ns, tuple(chunk_ns), tuple(chunk_tokens),
                         now_ns() - t0, status, ErrorKind.CANCELLED, "in flight when the run stopped",
                         dec.prompt_tokens or 0, dec.completion_tokens or sum(chunk_tokens),
                         prompt_tokens + self._system_tokens, output_tokens, dec.usage_per_chunk, attempt)
            self._emit(rec)
            raise
        except Exception as exc:  # noqa: BLE001 - mapped in one place; unmapped ones re-raise
            error, detail = classify_exception(exc)
        counters.in_flight -= 1
        end = now_ns() - t0
        out_tokens = dec.completion_tokens if dec.completion_tokens is not None else sum(chunk_tokens)
        rec = Record(seq, phase, intended, sent, headers_ns, tuple(chunk_ns), tuple(chunk_tokens),
                     chunk_ns[-1] if (chunk_ns and error is None) else end, status, error, detail,
                     dec.prompt_tokens or 0, out_tokens, prompt_tokens + self._system_tokens, output_tokens,
                     dec.usage_per_chunk, attempt, retry_after_s=retry_after)
        return rec, retry_after

    async def _attempt_fast(self, seq: int, phase: int, intended: int, prompt_tokens: int,
                            output_tokens: int, attempt: int, wire: bytes) -> tuple[Record, float | None]:
        """One attempt on the lean HTTP path (`harness.client.fasthttp`): the connection's
        callback stamps, parses and decodes each read; this coroutine wakes once, at the end.
        `sent` is stamped by FastClient.send right before its one write; when no connection
        could be made, it is the time the attempt began."""
        t0 = self.t0
        to = self.cfg.target.timeouts
        loop = asyncio.get_running_loop()
        counters = self.counters
        ex = Exchange(t0, counters, loop.create_future())
        ex.dec.text = self._answer_text(seq)
        counters.in_flight += 1
        began = now_ns() - t0
        counters.sent += 1

        def arm(e: Exchange, sent_abs: int) -> None:
            e.arm(loop, sent_abs, to.first_token_s, to.idle_s, to.total_s)

        error: ErrorKind | None
        try:
            await self._fast.send(ex, wire, arm)  # type: ignore[union-attr]
            error, detail = ex.error, ex.detail
            end = ex.end_ns
        except asyncio.CancelledError:
            ex.abort()
            counters.in_flight -= 1
            dec = ex.dec
            sent = ex.sent_ns if ex.sent_ns is not None else began
            rec = Record(seq, phase, intended, sent, ex.headers_ns, tuple(ex.chunk_ns),
                         tuple(ex.chunk_tokens), now_ns() - t0, ex.status, ErrorKind.CANCELLED,
                         "in flight when the run stopped", dec.prompt_tokens or 0,
                         dec.completion_tokens or sum(ex.chunk_tokens),
                         prompt_tokens + self._system_tokens, output_tokens, dec.usage_per_chunk, attempt)
            self._emit(rec)
            raise
        except Exception as exc:  # noqa: BLE001 - mapped in one place; unmapped ones re-raise
            ex.abort()
            error, detail = classify_exception(exc)
            end = now_ns() - t0
        counters.in_flight -= 1
        dec = ex.dec
        sent = ex.sent_ns if ex.sent_ns is not None else began
        chunk_ns, chunk_tokens = ex.chunk_ns, ex.chunk_tokens
        out_tokens = dec.completion_tokens if dec.completion_tokens is not None else sum(chunk_tokens)
        rec = Record(seq, phase, intended, sent, ex.headers_ns, tuple(chunk_ns), tuple(chunk_tokens),
                     chunk_ns[-1] if (chunk_ns and error is None) else end, ex.status, error, detail,
                     dec.prompt_tokens or 0, out_tokens, prompt_tokens + self._system_tokens,
                     output_tokens, dec.usage_per_chunk, attempt, retry_after_s=ex.retry_after_s)
        return rec, ex.retry_after_s


def _with_retried(rec: Record) -> Record:
    return replace(rec, retried=True)


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def raise_open_file_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit where allowed; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass(frozen=True)
class ProbeResult:
    model: str | None
    continuous_usage: bool
    per_chunk_usage: bool
    error: str | None = None
    status: int | None = None
    shape: RequestShape | None = None           # the request shape the target accepted
    adaptations: tuple[Adaptation, ...] = ()    # what had to change for it to accept it


PROBE_ATTEMPTS = 3          # a 429, 5xx, cut stream or refused connection is tried again ...
PROBE_BACKOFF_S = 1.0       # ... after this long (doubling), before the run is refused
_PROBE_TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)


async def probe_target(target: Target, workload: Workload, timeout_s: float = 60.0) -> ProbeResult:
    """`_probe_once`, tried again on transient failures (rate limits, 5xx, cut streams, a server
    still starting), so one unlucky answer does not refuse a whole run."""
    delay = PROBE_BACKOFF_S
    for attempt in range(PROBE_ATTEMPTS):
        result = await _probe_once(target, workload, timeout_s)
        transient = (result.status in _PROBE_TRANSIENT_STATUS
                     or (result.error is not None and result.status is None))
        if result.error is None or not transient or attempt == PROBE_ATTEMPTS - 1:
            return result
        await asyncio.sleep(delay)
        delay *= 2
    return result


PROBE_PROMPT = "Say hello."
PROBE_MAX_TOKENS = 2


async def _probe_once(target: Target, workload: Workload, timeout_s: float) -> ProbeResult:
    """Before the run (not measured): find the model if none was given, and send one tiny
    streaming request in the run's real shape (`harness.client.adapt.RequestShape`: its
    `ignore_eos`, per-chunk usage, sampling and extra_body). Arguments the target refuses are
    left out one by one (`negotiate`); the result says which, and the shape that was accepted."""
    headers = target.request_headers({"Content-Type": "application/json"})
    timeout = aiohttp.ClientTimeout(total=timeout_s, connect=target.timeouts.connect_s)
    connector = aiohttp.TCPConnector(ssl=None if target.tls_verify else False)
    model = target.model
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        try:
            if model is None:
                async with session.get(target.url("/v1/models"), headers=headers) as resp:
                    raw = await resp.read()
                    if resp.status != 200:
                        return ProbeResult(None, False, False, f"GET /v1/models: HTTP {resp.status}: "
                                           f"{error_message(raw)}", resp.status)
                    import orjson

                    data = orjson.loads(raw).get("data") or []
                    if not data:
                        return ProbeResult(None, False, False, "GET /v1/models lists no model; give --model", 200)
                    model = str(data[0]["id"])
            url = target.url(ENDPOINT_PATHS[target.endpoint])

            async def post(shape: RequestShape) -> tuple[int, bytes]:
                body = shape.body(endpoint=target.endpoint, model=model or "", prompt=PROBE_PROMPT,
                                  max_tokens=PROBE_MAX_TOKENS, temperature=workload.temperature,
                                  top_p=workload.top_p)
                async with session.post(url, data=body, headers=headers) as resp:
                    return resp.status, await resp.read()

            shape = RequestShape(workload.ignore_eos, True, dict(workload.extra_body))
            n = await negotiate(post, shape, target.endpoint)
            if n.status == 200 and n.error is None:
                dec = StreamDecoder()
                for ev in SSESplitter().feed(n.body):
                    with contextlib.suppress(StreamError):
                        dec.on_event(ev.data)
                return ProbeResult(model, n.shape.continuous_usage, dec.usage_per_chunk,
                                   shape=n.shape, adaptations=n.adaptations)
            return ProbeResult(model, False, False, n.error or f"HTTP {n.status}: {error_message(n.body)}",
                               n.status, n.shape, n.adaptations)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            kind, detail = classify_exception(exc) if not isinstance(exc, TimeoutError) else (
                ErrorKind.TIMEOUT_TOTAL, f"no answer within {timeout_s:g}s")
            return ProbeResult(model, False, False, f"{kind.value}: {detail}")
