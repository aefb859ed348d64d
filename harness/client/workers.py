"""Worker processes: one plan, N processes, one journal, as if one process had run it.

Theory of operation
-------------------
`run --workers N` starts N processes (spawned, so nothing of the parent's event loop is
inherited). Each gets the whole Plan and a shard index; the engine runs only its shard:
open-loop request k of a phase belongs to worker k mod N (round-robin keeps the arrival shape:
each worker sees the same rate curve, 1/N as dense), closed-loop user slot u to worker u mod N
(with a request count, request k goes with user slot k mod users, so no worker idles while
another still has its users' work). Sequence numbers, prompts and lengths are the plan's, so
the union of the shards is exactly the single-process run's set of requests.

All workers share one absolute start: each reports `ready`, then the parent sends
`t0 = perf_counter_ns() + lead` (CLOCK_MONOTONIC, the same clock in every process on a machine),
and every Record time is relative to that one t0. Workers encode finished Records as journal
lines and send them over their pipe every FLUSH_INTERVAL_S with a counters snapshot; the
parent appends the bytes to the one journal (a killed run loses at most that interval) and
shows combined progress. The result is built from the journal exactly as for one process, so
histograms and percentiles are those of the union of the records: the merge is exact by
construction, not an approximation of merged summaries.

Stopping: the parent catches SIGINT/SIGTERM (workers ignore SIGINT) and forwards `stop` (then
`hard` on a second Ctrl-C) down the pipes; each worker's engine stops as the single-process
engine does.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from harness.client.engine import START_LEAD_NS, Engine, EngineConfig
from harness.client.shard import (
    FLUSH_INTERVAL_S,
    combined_counters,
    merge_outcomes,
    outcome_dict,
    run_shard,
)
from harness.client.state import (
    CallerStop,
    Control,
    Counters,
    Interrupts,
    RunOutcome,
)
from harness.errors import RunAborted
from harness.workload.plan import Plan

READY_TIMEOUT_S = 120.0  # spawned workers import harness and open nothing: seconds at most
STREAMS_PER_WORKER = 1000  # `auto`: paced streams one process follows with headroom
REQUESTS_PER_S_PER_WORKER = 4000  # `auto`: request starts per second one process sustains
STARTUP_LEAD_NS = 200_000_000  # t0 this far after the start message, so no worker starts late


@dataclass(frozen=True)
class WorkerChoice:
    """How many workers a run has, and how that number was chosen (one phrase, for the result
    and the report's scale-out line)."""

    n: int
    why: str


def plan_need(plan: Plan) -> tuple[int, float, float]:
    """(workers the plan needs, its peak streams, its peak request rate /s). Peak streams:
    closed users or concurrency caps, else the open-loop arrivals in flight at once assuming
    each stream lasts its output length at 50 tokens/s."""
    need, peak_streams, peak_rate = 1, 0.0, 0.0
    for p in plan.phases:
        streams: float
        if p.closed:
            streams = p.users
            rate = 0.0
        else:
            dur = max(p.duration_s or 0.0, 1e-3)
            rate = p.count / dur
            mean_out = float(p.output_tokens.mean()) if p.count else 0.0
            streams = rate * mean_out / 50.0
            if p.max_concurrency:
                streams = min(streams, p.max_concurrency)
        need = max(
            need,
            math.ceil(streams / STREAMS_PER_WORKER),
            math.ceil(rate / REQUESTS_PER_S_PER_WORKER),
        )
        peak_streams, peak_rate = max(peak_streams, streams), max(peak_rate, rate)
    return need, peak_streams, peak_rate


def auto_choice(plan: Plan, cpus: int | None = None, reserved: int = 0) -> WorkerChoice:
    """`--workers auto`: enough workers for the plan's peak streams and request rate, at most
    one per CPU less `reserved` (the built-in simulator's, when it runs on this machine), at
    least one; `why` says the CPUs, what was left aside and what the plan needs."""
    cpus = cpus or os.cpu_count() or 1
    usable = max(1, cpus - reserved)
    need, streams, rate = plan_need(plan)
    n = min(need, usable)
    left = f", {reserved} left for the simulator" if reserved else ""
    capped = f", capped at {n}" if n < need else ""
    return WorkerChoice(
        n,
        f"auto: {cpus} CPUs{left}; the plan's peak ({streams:.3g} streams, {rate:.3g} req/s) "
        f"needs {need}{capped}",
    )


def auto_workers(plan: Plan, cpus: int | None = None, reserved: int = 0) -> int:
    """Worker count for `--workers auto` (auto_choice's)."""
    return auto_choice(plan, cpus, reserved).n


def parse_workers(value: str | int | None, plan: Plan, reserved: int = 0) -> int:
    """`--workers` value -> count. Raises ValueError naming the allowed values."""
    return choose_workers(value, plan, "--workers", reserved).n


def choose_workers(
    value: str | int | None, plan: Plan, source: str, reserved: int = 0
) -> WorkerChoice:
    """`--workers` (or config.toml's `workers`, named by `source`) value -> the choice: None is
    one process, `auto` auto_choice's. Raises ValueError naming the allowed values."""
    if value is None:
        return WorkerChoice(1, "one process, the default")
    if isinstance(value, str) and value.strip().lower() == "auto":
        return auto_choice(plan, reserved=reserved)
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f'expected a whole number >= 1 or "auto", got {value!r}') from None
    if n < 1 or n > 1024:
        raise ValueError(f'expected 1..1024 or "auto", got {n}')
    return WorkerChoice(n, f"{source} {n}")


# --- worker side ------------------------------------------------------------------------------


class _Sender:
    """Sends a worker's messages to the parent from a thread of its own, in order.

    The records pipe is blocking and never seen by the event loop: a batch larger than the pipe
    buffer waits for the parent to read it in this thread, not in the loop (which would stall
    every stream's stamps) and not as a failed non-blocking write."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.q: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="harness-sender", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (m := self.q.get()) is not None:
            try:
                self.conn.send(m)
            except OSError:
                return  # the parent went away; the control pipe tells the loop

    def put(self, m: tuple[Any, ...]) -> None:
        self.q.put(m)

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()


def _worker_main(ctl: Connection, out: Connection, plan: Plan, cfg: EngineConfig) -> None:
    """One worker: `ctl` brings the parent's start and stop messages (watched by the loop),
    `out` takes ready, records, done and error (written only by the sender thread once the run
    starts)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sender: _Sender | None = None
    try:
        out.send(("ready", os.getpid()))
        msg = ctl.recv()
        if msg[0] != "start":
            return
        _, t0_ns, t0_wall_s = msg
        sender = _Sender(out)

        async def main() -> RunOutcome:
            import asyncio

            control = Control()
            loop = asyncio.get_running_loop()

            def on_message() -> None:
                try:
                    m = ctl.recv()
                except (EOFError, OSError):
                    control.hard = True
                    control.stop("the parent process went away")
                    loop.remove_reader(ctl.fileno())
                    return
                if m[0] == "hard":
                    control.hard = True
                if m[0] in ("stop", "hard"):
                    control.stop(m[1])

            loop.add_reader(ctl.fileno(), on_message)

            def ship(lines: bytes, counters: dict[str, Any]) -> None:
                sender.put(("recs", lines, counters))

            try:
                return await run_shard(
                    lambda sink, counters: Engine(
                        plan, cfg, sink, control, counters, events=sink.event
                    ).run(t0_ns=t0_ns, t0_wall_s=t0_wall_s),
                    ship,
                )
            finally:
                loop.remove_reader(ctl.fileno())

        try:
            import uvloop

            outcome = uvloop.run(main())
        except ImportError:
            import asyncio

            outcome = asyncio.run(main())
        sender.put(("done", outcome_dict(outcome)))
        sender.close()
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the run
        if sender is not None:
            sender.close()
        with contextlib.suppress(OSError, EOFError):
            out.send(("error", traceback.format_exc()[-2000:]))
        raise
    finally:
        ctl.close()
        out.close()


# --- parent side ------------------------------------------------------------------------------


@dataclass
class _Worker:
    proc: Any
    conn: Connection  # from the worker: ready, records, done, error
    ctl: Connection  # to the worker: start, stop, hard
    counters: dict[str, Any]
    outcome: dict[str, Any] | None = None
    error: str | None = None


def run_workers(
    plan: Plan,
    cfg: EngineConfig,
    n: int,
    write_lines: Callable[[bytes], None],
    flush: Callable[[], None],
    quiet: bool,
    progress: Callable[[Counters, float], None] | None = None,
    stop: threading.Event | None = None,
) -> RunOutcome:
    """Run the plan in n worker processes; journal lines go to write_lines as they come.
    `stop`, set from another thread, stops the workers as a first Ctrl-C does (the Python API).

    Raises RunAborted (one line: the worker, and its exception or exit status) when a worker
    fails to start, fails or dies; the others are stopped at once, and the records shipped
    before that are already in the journal.
    """
    workers = _spawn(plan, cfg, n)
    interrupts = Interrupts(cfg.grace_s, quiet)

    def on_signal(signum: int, _frame: Any) -> None:
        reason, hard = interrupts.on(signum)
        _tell(workers, ("hard" if hard else "stop", reason))

    in_main = threading.current_thread() is threading.main_thread()  # signals: main thread only
    in_main = in_main and not CallerStop(stop).holds_signals  # a long command holds them
    old = (
        {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    )
    try:
        _await_ready(workers)
        t0_ns = time.perf_counter_ns() + START_LEAD_NS + STARTUP_LEAD_NS
        t0_wall_s = time.time() + (START_LEAD_NS + STARTUP_LEAD_NS) / 1e9
        for w in workers:
            w.ctl.send(("start", t0_ns, t0_wall_s))
        _follow(workers, write_lines, flush, progress, CallerStop(stop))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _reap(workers)
    failed = [w for w in workers if w.error is not None]
    if failed:
        w = failed[0]
        what = w.error or f"it died without a result ({_exit_text(w.proc.exitcode)})"
        raise RunAborted(f"worker {w.proc.name} failed: {what}")
    return merge_outcomes([w.outcome for w in workers if w.outcome is not None], t0_ns, t0_wall_s)


def _spawn(plan: Plan, cfg: EngineConfig, n: int) -> list[_Worker]:
    """n spawned worker processes, each with its shard, its control pipe and its output pipe."""
    ctx = mp.get_context("spawn")
    workers: list[_Worker] = []
    for i in range(n):
        ctl_r, ctl_w = ctx.Pipe(duplex=False)
        out_r, out_w = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_worker_main,
            args=(ctl_r, out_w, plan, replace(cfg, shard=(i, n))),
            name=f"harness-worker-{i}",
            daemon=True,
        )
        proc.start()
        ctl_r.close()
        out_w.close()
        workers.append(_Worker(proc, out_r, ctl_w, {}))
    return workers


def _tell(workers: list[_Worker], msg: tuple[str, str], but: _Worker | None = None) -> None:
    """A stop message to every worker still running (except `but`)."""
    for w in workers:
        if w is not but and w.outcome is None and w.error is None:
            with contextlib.suppress(OSError, BrokenPipeError):
                w.ctl.send(msg)


def _await_ready(workers: list[_Worker]) -> None:
    """Every worker's `ready`, within READY_TIMEOUT_S. Raises RunAborted for one that failed to
    start (its exception or exit status) or did not answer in time."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    for w in workers:
        left = deadline - time.monotonic()
        if not w.conn.poll(max(left, 0)):
            raise RunAborted(f"worker {w.proc.name} did not start within {READY_TIMEOUT_S:g}s")
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            msg = ("died",)
        if msg[0] != "ready":
            w.proc.join(timeout=5)
            raise RunAborted(
                f"worker {w.proc.name} failed to start: "
                f"{_last_line(msg[-1]) if msg[0] == 'error' else _exit_text(w.proc.exitcode)}"
            )


def _receive(w: _Worker, write_lines: Callable[[bytes], None], workers: list[_Worker]) -> bool:
    """One message from a worker: records are written, done and error kept (an error or a
    death stops the others at once). Returns False once the worker has nothing more to send."""
    try:
        msg = w.conn.recv()
    except (EOFError, OSError):
        if w.outcome is None and w.error is None:
            w.error = ""  # died: the exit status is known after join
            _tell(workers, ("hard", f"worker {w.proc.name} failed"), but=w)
        return False
    if msg[0] == "recs":
        if msg[1]:
            write_lines(msg[1])
        w.counters = msg[2]
        return True
    if msg[0] == "done":
        w.outcome = msg[1]
        return False
    if msg[0] == "error":
        w.error = _last_line(msg[1])
        _tell(workers, ("hard", f"worker {w.proc.name} failed"), but=w)
        return False
    return True


def _follow(
    workers: list[_Worker],
    write_lines: Callable[[bytes], None],
    flush: Callable[[], None],
    progress: Callable[[Counters, float], None] | None,
    caller: CallerStop,
) -> None:
    """Receive from the workers until each has ended; flush the journal twice a second and show
    the combined progress once a second (and once at the end, where the run ended)."""
    last_flush = last_progress = t_start = time.monotonic()
    live = {w.conn: w for w in workers}
    while live:
        if caller.due():
            reason, hard = caller.what()
            _tell(workers, ("hard" if hard else "stop", reason))
        ready = wait(list(live), timeout=FLUSH_INTERVAL_S)
        for conn, w in [(c, w) for c, w in live.items() if c in ready]:
            if not _receive(w, write_lines, workers):
                del live[conn]
        now = time.monotonic()
        if now - last_flush >= 0.5:
            flush()
            last_flush = now
        if progress is not None and now - last_progress >= 1.0:
            progress(combined_counters([w.counters for w in workers]), now - t_start)
            last_progress = now
    flush()
    if progress is not None:  # the final counts, so the last line drawn says where it ended
        progress(combined_counters([w.counters for w in workers]), time.monotonic() - t_start)


def _reap(workers: list[_Worker]) -> None:
    """Every worker process joined (killed after 5 s) and its pipes closed."""
    for w in workers:
        w.proc.join(timeout=5)
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join()
        w.conn.close()
        w.ctl.close()


def _last_line(tb: str) -> str:
    """The exception line of a formatted traceback (what a one-line error shows)."""
    lines = [ln.strip() for ln in str(tb).strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "unknown error"


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"
