"""The simulator's step loop: an asyncio task that drives the pure scheduler in real time.

Theory of operation
-------------------
HTTP handlers `submit` requests (they enter the scheduler's API-server intake at the current
model time, and its waiting queue once their intake is done: scheduler.py, "The API server")
and get a `RequestHandle` to await. The loop runs one `Scheduler.step(now)`, sleeps until the
step's modelled end (`duration / speedup` after its start), then hands each request its new
token by bumping `handle.produced` and waking the handler, which writes the SSE event -- at the
step's `delivered_s` when the modelled API server is behind (a timer, so the next step need
not wait for it). Model time is `(time.perf_counter() - lag_s) * speedup`.

Steps are laid end to end on an absolute timeline: a step starts where the previous one was
planned to end, so the event loop's ~1 ms timer granularity does not accumulate. When the loop
falls behind by more than `LATE_TOLERANCE_S` (CPU starved), the wall-clock timeline restarts
from now but the model's does not: the model's clock lags the wall clock by `lag_s`, no step
of the model is paused or stretched, and a request enters the model at its wall-clock arrival
(in the model's future while it lags: the API server's intake holds it until the model's
clock gets there). So the model serves exactly the load it was sent, at its times. While it
lags, each step takes 1 / (1 + CATCH_UP) of its wall time until the lag is gone. Every token
is delivered late by exactly the lag when it was made, logged (`lag_points_ns`) so that a
client takes it out of each stamp (t - lag(t), harness.analysis.compare_health). With nothing
to do the loop waits for the next submission, and an idle model's clock jumps to its next
intake or the wall clock, whichever is first (`_idle_until`): idle time pays the lag back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections import deque

import numpy as np

from harness.sim.metrics import SimMetrics
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from harness.sim.settings import ResolvedSim
from harness.sim.truth import RequestTruth

LATE_TOLERANCE_S = 0.005  # behind the model timeline by more than this: restart it from now
# A delivery due less than this (real seconds) after its step's end goes out at the end: below
# the event loop's timer granularity (~1 ms) a timer would only add its own jitter.
DELIVERY_SLACK_S = 0.001
WAKE_LATE_BIN_MS = 0.25  # wake-up lateness is counted in bins this wide (real ms) ...
WAKE_LATE_BINS = 4000  # ... up to 1 s (the last bin: that or more)
CATCH_UP = 0.25  # behind its model, the simulator runs it this much faster than the wall clock
LAG_POINT_S = 0.001  # a point of the lag's log at least every time it changed by this much
DEFAULT_NATURAL_OUTPUT_TOKENS = 256  # mean answer length when EOS is honoured (ignore_eos off)


def output_target(max_tokens: int, ignore_eos: bool, rng: np.random.Generator) -> tuple[int, str]:
    """How many tokens to generate and the finish reason.

    ignore_eos: exactly `max_tokens` ("length"). Otherwise the model "emits EOS" after a
    seeded, exponentially distributed length (mean DEFAULT_NATURAL_OUTPUT_TOKENS): if that
    comes before `max_tokens` the answer ends there with "stop".
    """
    if ignore_eos:
        return max_tokens, "length"
    natural = 1 + int(rng.exponential(DEFAULT_NATURAL_OUTPUT_TOKENS))
    if natural < max_tokens:
        return natural, "stop"
    return max_tokens, "length"


class RequestHandle:
    """A request in flight: the handler awaits `wait()` and reads `produced`/`finished`."""

    __slots__ = (
        "rid",
        "req",
        "truth",
        "produced",
        "finished",
        "last_ns",
        "first_ns",
        "_waiter",
        "_queued_ns",
    )

    def __init__(self, rid: int, truth: RequestTruth, req: SimRequest | None = None) -> None:
        self.rid = rid
        self.req = req
        self.truth = truth
        self.produced = 0
        self.finished = False
        self.last_ns = 0
        self.first_ns = 0
        self._waiter: asyncio.Future[None] | None = None
        self._queued_ns = truth.arrival_ns

    async def wait(self, consumed: int) -> None:
        """Return once more than `consumed` tokens exist or the request finished."""
        if self.produced > consumed or self.finished:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)


class SimEngine:
    """Owns the scheduler, the step loop task and the metrics it feeds."""

    def __init__(self, resolved: ResolvedSim, metrics: SimMetrics) -> None:
        self.resolved = resolved
        self.speedup = resolved.settings.speedup
        self.scheduler = Scheduler(SchedulerConfig.from_resolved(resolved), resolved.roofline)
        self.metrics = metrics
        metrics.gauges = lambda: (
            self.scheduler.num_running,
            self.scheduler.num_waiting,
            self.scheduler.kv_usage,
        )
        self.handles: dict[int, RequestHandle] = {}
        # deliveries behind the API server, oldest first, each with its timer
        self._pending: deque[tuple[asyncio.TimerHandle, np.ndarray, list[int]]] = deque()
        self._next_rid = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.steps = 0
        self.model_s = 0.0  # modelled time of all steps (divided by speedup: real seconds)
        self.lost_s = 0.0  # real seconds the loop fell behind the model, all told
        # how far the model's clock lags the wall clock now (real seconds; it catches up at
        # CATCH_UP), and its log: (perf_counter_ns, lag ns) points, flat, the lag linear
        # between them. A token delivered at t was made at model time t - lag(t), so a client
        # takes lag(t) out of each stamp it caused (harness.analysis.compare_health).
        self.lag_s = 0.0
        self.lag_points_ns: array[int] = array("q")
        self._lag_logged = 0.0
        # How late each step's wake-up came, counted in bins of WAKE_LATE_BIN_MS real ms (the last
        # bin: that or more): lateness under LATE_TOLERANCE_S is absorbed by the timeline, so `lost_s` never
        # sees it, yet each such wake-up delays that step's tokens, which a tail percentile of
        # ITL or TTFT shows (x speedup in model time).
        self.wake_late_bins = [0] * WAKE_LATE_BINS

    def wake_late_ms_at(self, q: float) -> float:
        """The q-quantile (0-1) of the steps' wake-up lateness in real ms, to the upper edge of its
        bin (0 before any step): the simulator's own contribution to a latency on a busy
        machine."""
        total = sum(self.wake_late_bins)
        if total == 0:
            return 0.0
        need, seen = q * total, 0
        for i, count in enumerate(self.wake_late_bins):
            seen += count
            if seen >= need:
                return (i + 1) * WAKE_LATE_BIN_MS
        return WAKE_LATE_BINS * WAKE_LATE_BIN_MS

    def _lag_point(self, at_s: float, force: bool = False) -> None:
        """Log the lag now (at wall time `at_s`): always at a gap's ends (`force`), otherwise
        when it changed by LAG_POINT_S since the last point or reached zero."""
        if (
            force
            or abs(self.lag_s - self._lag_logged) >= LAG_POINT_S
            or (self.lag_s == 0.0 and self._lag_logged > 0.0)
        ):
            self.lag_points_ns.extend((round(at_s * 1e9), round(self.lag_s * 1e9)))
            self._lag_logged = self.lag_s

    def _fell_behind(self, planned_end_s: float, start_s: float) -> None:
        """The loop woke `start - planned_end` late: the model's clock lags that much more."""
        self.lost_s += start_s - planned_end_s
        self._lag_point(planned_end_s, force=True)
        self.lag_s += start_s - planned_end_s
        self._lag_point(start_s, force=True)

    def _idle_until(self, now_s: float, next_intake_model_s: float | None) -> None:
        """The model has nothing to do until its next intake (model seconds; None: until a
        submission, which enters at the wall clock): its clock jumps there at once, and the lag
        shrinks by the idle time it skips (never below zero: the model never runs ahead of the
        wall clock). Without this an idle model kept its lag for ever, and every later request
        queued in the intake for it (a capacity search after one starved probe failed every
        probe, down to 1 request a second)."""
        if self.lag_s <= 0.0:
            return
        lag = 0.0
        if next_intake_model_s is not None:
            lag = min(self.lag_s, max(now_s - next_intake_model_s / self.speedup, 0.0))
        if lag < self.lag_s:
            self._lag_point(now_s, force=True)
            self.lag_s = lag
            self._lag_point(now_s, force=True)

    def _wall_of(self, duration_wall_s: float) -> float:
        """A step's wall time: its model time / speedup, less what it catches up of the lag
        (it runs CATCH_UP faster while behind, never past the wall clock)."""
        back = min(duration_wall_s * CATCH_UP / (1 + CATCH_UP), self.lag_s)
        self.lag_s -= back
        return duration_wall_s - back

    def lag_text(self) -> str:
        """The lag's log as the log line carries it: `at:lag` in ns, space-separated."""
        g = self.lag_points_ns
        return " ".join(f"{g[i]}:{g[i + 1]}" for i in range(0, len(g), 2))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sim-step-loop")

    def model_now_s(self) -> float:
        """Now on the wall clock, in model seconds: where a request enters the model (while
        the model lags, in its future: the intake holds it until the model gets there)."""
        return time.perf_counter() * self.speedup

    async def stop(self) -> None:
        for timer, _, _ in self._pending:
            timer.cancel()
        self._pending.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for h in self.handles.values():
            h.finished = True
            h.wake()

    def submit(self, truth: RequestTruth, block_hashes: tuple[int, ...] = ()) -> RequestHandle:
        rid = self._next_rid
        self._next_rid += 1
        req = SimRequest(rid, truth.prompt_tokens, truth.target_tokens, block_hashes)
        handle = RequestHandle(rid, truth, req)
        self.handles[rid] = handle
        self.scheduler.add(req, self.model_now_s())
        self._wake.set()
        return handle

    def abort(self, handle: RequestHandle) -> None:
        """The client went away (or a fault cut it off): free its place in the engine."""
        if self.handles.pop(handle.rid, None) is not None:
            self.scheduler.abort(handle.rid)
            self.metrics.success["abort"] += 1
            self._wake.set()

    async def _loop(self) -> None:
        planned_end: float | None = None
        sched = self.scheduler
        while True:
            if sched.idle:
                self._wake.clear()
                await self._wake.wait()
                planned_end = None
                self._idle_until(time.perf_counter(), None)  # nothing was in the model
            start = time.perf_counter()
            if planned_end is not None:
                if start - planned_end < LATE_TOLERANCE_S:
                    start = planned_end
                else:
                    self._fell_behind(planned_end, start)
            start_ns = time.perf_counter_ns()
            out = sched.step((start - self.lag_s) * self.speedup)  # the model's clock lags
            self.steps += 1
            if out.duration_s <= 0:  # nothing could be scheduled: wait for a change
                self._wake.clear()
                nxt = sched.next_intake_s
                self._idle_until(start, nxt)
                if nxt is None:
                    await self._wake.wait()
                else:  # the next request leaves the API server then (or a new one comes)
                    with contextlib.suppress(TimeoutError):
                        due = nxt / self.speedup + self.lag_s  # the wall clock's then
                        timeout = max(due - time.perf_counter(), 0.0)
                        await asyncio.wait_for(self._wake.wait(), timeout)
                planned_end = None
                continue
            for rid in out.admitted:
                h = self.handles.get(rid)
                if h is not None:
                    h.truth.scheduled_ns = start_ns
                    if h.req is not None:
                        h.truth.cached_tokens = h.req.cached_tokens
            for rid in out.preempted:
                h = self.handles.get(rid)
                if h is not None:
                    h.truth.preemptions += 1
            self.metrics.preemptions += len(out.preempted)
            end = start + self._wall_of(out.duration_s / self.speedup)
            self._lag_point(end)
            self.model_s += out.duration_s / self.speedup
            delay = end - time.perf_counter()
            await asyncio.sleep(max(delay, 0.0))
            late_bin = int((time.perf_counter() - end) * 1e3 / WAKE_LATE_BIN_MS)
            self.wake_late_bins[min(max(late_bin, 0), WAKE_LATE_BINS - 1)] += 1
            planned_end = end
            behind = (out.delivered_s - out.end_s) / self.speedup
            if self._pending or behind > DELIVERY_SLACK_S:
                # the API server streams these later; the engine goes on
                loop = asyncio.get_running_loop()
                timer = loop.call_at(loop.time() + behind, self._deliver_later)
                self._pending.append((timer, out.emitted, out.finished))
            else:
                self._deliver(out.emitted, out.finished)
            self.metrics.iteration_tokens.observe([out.num_scheduled_tokens])

    def _deliver_later(self) -> None:
        """A timer fired: deliver the oldest pending step's tokens (one timer per pending step,
        so deliveries keep the steps' order whichever timer fires first)."""
        _, emitted, finished = self._pending.popleft()
        self._deliver(emitted, finished)

    def _deliver(self, emitted: np.ndarray, finished: list[int]) -> None:
        now_ns = time.perf_counter_ns()
        handles = self.handles
        itl: list[int] = []
        ttft: list[int] = []
        for rid in emitted.tolist():
            h = handles.get(rid)
            if h is None:
                continue
            if h.produced:
                itl.append(now_ns - h.last_ns)
            else:
                ttft.append(now_ns - h.truth.arrival_ns)
                h.first_ns = now_ns
                self.metrics.prompt_tokens += h.truth.prompt_tokens
            h.produced += 1
            h.last_ns = now_ns
            h.wake()
        self.metrics.generation_tokens += len(emitted)
        if itl:
            self.metrics.itl.observe(np.asarray(itl, dtype=float) * 1e-9)
        if ttft:
            self.metrics.ttft.observe(np.asarray(ttft, dtype=float) * 1e-9)
        sched = self.scheduler
        self.metrics.prefix_cache_queries = sched.prefix_cache_queries
        self.metrics.prefix_cache_hits = sched.prefix_cache_hits
        for rid in finished:
            h = handles.pop(rid, None)
            if h is None:
                continue
            h.finished = True
            # As vLLM, at the request's end: queue = queued -> first scheduled, prefill = first
            # scheduled -> first token, decode = first -> last token (preemptions included).
            scheduled = h.truth.scheduled_ns or h._queued_ns
            self.metrics.e2e.observe([(now_ns - h.truth.arrival_ns) * 1e-9])
            self.metrics.queue.observe([(scheduled - h._queued_ns) * 1e-9])
            self.metrics.prefill.observe([(h.first_ns - scheduled) * 1e-9])
            self.metrics.decode.observe([(now_ns - h.first_ns) * 1e-9])
            # vLLM's engine finishes a tool call as "stop": "tool_calls" is its OpenAI layer's word
            reason = h.truth.finish_reason or "length"
            self.metrics.success["stop" if reason == "tool_calls" else reason] += 1
            h.wake()
