"""A run's engine in this process: the plan sent under Ctrl-C / SIGTERM handling (where this is
the main thread) or a caller's stop, with the journal's flusher, the progress feed, the
`/metrics` scraper and capacity's live watch beside it. Sharded runs (workers, Ray) go through
`harness.orchestrate.sharded` instead."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from typing import Any

from harness.client.engine import Engine, EngineConfig
from harness.client.shard import CpuPeak, note_cpu, sample_cpu
from harness.client.state import CALLER_STOP_REASON, Control, Counters, Interrupts, RunOutcome
from harness.orchestrate.progress import Goal, LiveFeed, ProgressView
from harness.record.journal import JournalWriter
from harness.record.records import Record
from harness.workload.plan import Plan

STOP_POLL_S = 0.1  # a caller's stop is seen within this (the API's Ctrl-C, cancel)


async def watch_stop(stop: threading.Event, control: Control, stop_now: Callable[[], None]) -> None:
    """A caller's stop (the Python API: Ctrl-C in a notebook, a cancelled `arun`), as a first
    Ctrl-C would be: sending stops, requests in flight get the grace period. A long command's
    stop (`harness.orchestrate.stopping.CommandStop`, `hard`) stops at once, with its reason."""
    while not stop.is_set():
        await asyncio.sleep(STOP_POLL_S)
    if getattr(stop, "hard", False):
        control.hard = True
        control.stop(str(getattr(stop, "reason", "") or CALLER_STOP_REASON))
        stop_now()
    else:
        control.stop(CALLER_STOP_REASON)


async def execute_one_process(
    plan: Plan,
    cfg: EngineConfig,
    journal: JournalWriter,
    quiet: bool,
    scraper: Any = None,
    monitor: Any = None,
    feed: LiveFeed | None = None,
    stop: threading.Event | None = None,
) -> RunOutcome:
    control = Control()
    counters = Counters()
    feed = feed or LiveFeed(ProgressView(Goal.of(plan), quiet))
    loop = asyncio.get_running_loop()
    interrupts = Interrupts(cfg.grace_s, quiet)

    def cancel_in_flight() -> None:
        for t in list(engine._tasks):
            t.cancel()

    def on_signal(signum: int) -> None:
        reason, hard = interrupts.on(signum)
        if hard:
            control.hard = True
        control.stop(reason)
        if hard:
            cancel_in_flight()

    # Ctrl-C and SIGTERM stop the run gracefully -- where this is the main thread; a run started
    # from a worker thread (the Python API inside a notebook's loop) is stopped by its caller, and
    # so is a long command's run (capacity's probes, a sweep's points: they hold the signals).
    in_main = threading.current_thread() is threading.main_thread() and stop is None
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
    sink: Callable[[Record], None] = journal.write_record
    if monitor is not None or feed.metrics is not None:

        def observed(rec: Record) -> None:
            journal.write_record(rec)
            feed.observe(rec)
            if monitor is not None:
                monitor.observe(rec)

        sink = observed

    engine = Engine(plan, cfg, sink, control, counters, events=journal.write_line)

    def on_journal_failure(msg: str) -> None:
        control.hard = True
        control.stop(msg)

    flusher = asyncio.create_task(journal.run_flusher(on_journal_failure))
    prog = asyncio.create_task(feed.run(counters))
    side = [flusher, prog] + ([asyncio.create_task(scraper.run())] if scraper is not None else [])
    cpu = CpuPeak()  # the process's busiest second (the result's client.scale_out)
    side.append(asyncio.create_task(sample_cpu(cpu)))
    if stop is not None:
        side.append(asyncio.create_task(watch_stop(stop, control, cancel_in_flight)))
    if monitor is not None:
        latest = scraper.latest_values if scraper is not None else (lambda: (None, 0.0))
        interval_s = scraper.interval_s if scraper is not None else 1.0
        side.append(asyncio.create_task(monitor.watch(counters, control, latest, interval_s)))
    try:
        if scraper is not None:  # the server's histograms are read from this first poll on
            await scraper.wait_ready()
        outcome = await engine.run()
        note_cpu(outcome, cpu)
    finally:
        for t in side:
            t.cancel()
        await asyncio.gather(*side, return_exceptions=True)
        feed.close()
        if in_main:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
    return outcome


def run_loop(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)
