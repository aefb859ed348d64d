"""A sharded run (worker processes or Ray actors) seen from the runner: the shards run, the
server's /metrics scraper polls from a thread of this process, the progress line shows the
shards' combined counters, and everything lands in the one journal."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

from harness.client.engine import EngineConfig
from harness.client.state import Counters, RunOutcome
from harness.client.workers import run_workers
from harness.errors import RunAborted
from harness.server.scrape import READY_WAIT_S
from harness.workload.plan import Plan


class ScraperThread:
    """The Prometheus scraper of a worker or Ray run, in a thread of the parent with its own
    event loop (the parent's main thread waits on pipes, not on a loop). Its journal lines go
    through a queue that the parent drains into the journal whenever it flushes, so the journal
    is only ever written from the main thread."""

    def __init__(self, scraper: Any) -> None:
        self.scraper = scraper
        self.queue: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        scraper.write = self.queue.put
        self._ready = threading.Event()
        self._loop: Any = None
        self._task: Any = None
        self._thread = threading.Thread(target=self._main, name="harness-scraper", daemon=True)

    def _main(self) -> None:
        import asyncio

        loop = asyncio.new_event_loop()
        self._loop = loop
        self._task = loop.create_task(self.scraper.run())
        self._ready.set()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            loop.run_until_complete(self._task)
        loop.close()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5)
        first_poll = getattr(self.scraper, "ready", None)
        if first_poll is not None:  # the server's histograms are read from the first poll on
            first_poll.wait(READY_WAIT_S)

    def drain(self, write_line: Callable[[dict[str, Any]], None]) -> None:
        while True:
            try:
                write_line(self.queue.get_nowait())
            except queue.Empty:
                return

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout=10)


def execute(
    plan: Plan,
    cfg: EngineConfig,
    n: int,
    journal: Any,
    quiet: bool,
    ray_address: str | None = None,
    scraper: Any = None,
    progress: Callable[[Counters, float], None] | None = None,
    on_lines: Callable[[bytes], None] | None = None,
    stop: threading.Event | None = None,
) -> RunOutcome:
    """Run in n worker processes (or n Ray actors), journal as they go;
    `scraper` (harness.server.scrape.Scraper) polls the server's /metrics from this process;
    `progress(counters summed over the shards, elapsed s)` is called once a second (the runner's
    live feed, harness.orchestrate.progress: the progress line and the live metrics);
    `on_lines` sees the journal lines as they come (the live metrics' records); `stop`, set from
    another thread, stops the shards as a first Ctrl-C does (the Python API)."""
    side = ScraperThread(scraper) if scraper is not None else None

    def flush() -> None:
        if side is not None:
            side.drain(journal.write_line)
        journal.flush()

    write_lines = journal.write_encoded
    if on_lines is not None:

        def write_lines(lines: bytes) -> None:
            journal.write_encoded(lines)
            on_lines(lines)

    if side is not None:
        side.start()
    try:
        try:
            if ray_address is not None:
                from harness.client.raycluster import run_ray

                outcome = run_ray(
                    plan,
                    cfg,
                    n,
                    ray_address,
                    write_lines,
                    journal.write_line,
                    flush,
                    quiet,
                    progress,
                    stop,
                )
            else:
                outcome = run_workers(plan, cfg, n, write_lines, flush, quiet, progress, stop)
        except RunAborted as exc:  # a worker (process or Ray actor) failed
            if side is not None:
                side.stop()
                side.drain(journal.write_line)
            journal.close()  # no end line: read as an interrupted run
            raise RunAborted(
                f"{exc}; the records before it are in {journal.path} "
                f"(python -m harness report {journal.path})"
            ) from None
    finally:
        if side is not None:
            side.stop()
            side.drain(journal.write_line)
    return outcome


__all__ = ["ScraperThread", "execute"]
