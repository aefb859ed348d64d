"""The progress line a run prints on stderr once a second, the same for one process, worker
processes and Ray: one place to change how a run shows itself while it goes.

On a terminal the line is rewritten in place; elsewhere (a log, CI) every fifth line is printed.
"""

from __future__ import annotations

import asyncio
import sys
import time

from harness.client.state import Counters

PROGRESS_INTERVAL_S = 1.0
PRINT_EVERY_N_OFF_TTY = 5       # off a terminal, one line in five: a log gets a line per 5 s


class Progress:
    """Shows `Counters`: call `update(counters, elapsed_s)` about once a second (or let `loop`
    do it inside an event loop), then `done()`."""

    def __init__(self, quiet: bool, workers: int = 1) -> None:
        self.quiet = quiet
        self.workers = workers
        self.tty = sys.stderr.isatty()
        self.n = 0
        self._last: tuple[int, float] | None = None

    def line(self, c: Counters, elapsed_s: float, now_s: float) -> str:
        """The text for counters `c`; the token rate is over the time since the last line."""
        last_tokens, last_t = self._last or (0, now_s - elapsed_s)
        rate = (c.output_tokens - last_tokens) / max(now_s - last_t, 1e-9)
        self._last = (c.output_tokens, now_s)
        text = (f"[{elapsed_s:6.1f}s] {c.phase}: sent {c.sent}, in flight {c.in_flight}, "
                f"completed {c.completed}, errors {c.failed}, {rate:,.0f} tok/s")
        return text + (f" ({self.workers} workers)" if self.workers > 1 else "")

    def update(self, c: Counters, elapsed_s: float) -> None:
        if self.quiet:
            return
        self.n += 1
        text = self.line(c, elapsed_s, time.monotonic())
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text)
            sys.stderr.flush()
        elif self.n % PRINT_EVERY_N_OFF_TTY == 0:
            print(text, file=sys.stderr, flush=True)

    async def loop(self, c: Counters, t_start: float) -> None:
        """Update every PROGRESS_INTERVAL_S until cancelled (one-process runs)."""
        if self.quiet:
            return
        self._last = (c.output_tokens, time.monotonic())
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            self.update(c, time.monotonic() - t_start)

    def done(self) -> None:
        if self.tty and not self.quiet:
            sys.stderr.write("\n")


__all__ = ["PROGRESS_INTERVAL_S", "Progress"]
