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


def auto_workers(plan: Plan, cpus: int | None = None) -> int:
    """Worker count for `--workers auto`: enough for the plan's peak streams and request rate,
    at most one per CPU. Peak streams: closed users or concurrency caps, else the open-loop
    arrivals in flight at once assuming each stream lasts its output length at 50 tokens/s."""
    cpus = cpus or os.cpu_count() or 1
    need = 1
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
    return max(1, min(need, cpus))


def parse_workers(value: str | int | None, plan: Plan) -> int:
    """`--workers` value -> count. Raises ValueError naming the allowed values."""
    if value is None:
        return 1
    if isinstance(value, str) and value.strip().lower() == "auto":
        return auto_workers(plan)
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f'expected a whole number >= 1 or "auto", got {value!r}') from None
    if n < 1 or n > 1024:
        raise ValueError(f'expected 1..1024 or "auto", got {n}')
    return n


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
                    lambda sink, counters: Engine(plan, cfg, sink, control, counters).run(
                        t0_ns=t0_ns, t0_wall_s=t0_wall_s
                    ),
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
    interrupts = Interrupts(cfg.grace_s, quiet)

    def tell(msg: tuple[str, str]) -> None:
        for w in workers:
            if w.outcome is None and w.error is None:
                with contextlib.suppress(OSError, BrokenPipeError):
                    w.ctl.send(msg)

    def on_signal(signum: int, _frame: Any) -> None:
        reason, hard = interrupts.on(signum)
        tell(("hard" if hard else "stop", reason))

    def stop_others(failed: _Worker) -> None:
        for other in workers:
            if other is not failed and other.outcome is None and other.error is None:
                with contextlib.suppress(OSError):
                    other.ctl.send(("hard", f"worker {failed.proc.name} failed"))

    in_main = threading.current_thread() is threading.main_thread()  # signals: main thread only
    in_main = in_main and not CallerStop(stop).holds_signals  # a long command holds them
    old = (
        {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    )
    try:
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
        t0_ns = time.perf_counter_ns() + START_LEAD_NS + STARTUP_LEAD_NS
        t0_wall_s = time.time() + (START_LEAD_NS + STARTUP_LEAD_NS) / 1e9
        for w in workers:
            w.ctl.send(("start", t0_ns, t0_wall_s))
        last_flush = last_progress = time.monotonic()
        t_start = last_progress
        live = {w.conn: w for w in workers}
        caller = CallerStop(stop)
        while live:
            if caller.due():
                reason, hard = caller.what()
                tell(("hard" if hard else "stop", reason))
            ready = wait(list(live), timeout=FLUSH_INTERVAL_S)
            for conn, w in [(c, w) for c, w in live.items() if c in ready]:
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    if w.outcome is None and w.error is None:
                        w.error = ""  # died: the exit status is known after join
                        stop_others(w)
                    del live[conn]
                    continue
                if msg[0] == "recs":
                    if msg[1]:
                        write_lines(msg[1])
                    w.counters = msg[2]
                elif msg[0] == "done":
                    w.outcome = msg[1]
                    del live[conn]
                elif msg[0] == "error":
                    w.error = _last_line(msg[1])
                    del live[conn]
                    stop_others(w)
            now = time.monotonic()
            if now - last_flush >= 0.5:
                flush()
                last_flush = now
            if progress is not None and now - last_progress >= 1.0:
                progress(combined_counters([w.counters for w in workers]), now - t_start)
                last_progress = now
        flush()
        if (
            progress is not None
        ):  # the final counts, so the last line drawn says where the run ended
            progress(combined_counters([w.counters for w in workers]), time.monotonic() - t_start)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for w in workers:
            w.proc.join(timeout=5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
            w.conn.close()
            w.ctl.close()
    failed = [w for w in workers if w.error is not None]
    if failed:
        w = failed[0]
        what = w.error or f"it died without a result ({_exit_text(w.proc.exitcode)})"
        raise RunAborted(f"worker {w.proc.name} failed: {what}")
    return merge_outcomes([w.outcome for w in workers if w.outcome is not None], t0_ns, t0_wall_s)


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
