"""Live progress of a run: one line that redraws in place on a terminal, periodic lines elsewhere.

The one implementation for one-process, worker and Ray runs: each of them hands the run's
live `Counters` (summed over workers) and the elapsed time to `ProgressView.update` once a
second, from the loop that already supervises the run (the engine's own event loop for one
process: one cheap task a second, nothing per token). The view knows the plan, so it can say
how far the run has to go:

- the share done: finished requests of those planned when every phase has a planned count
  (open loops always do: their send times are drawn before the run), else elapsed time of the
  planned time (closed loops that run for a duration);
- the ETA: the planned end minus the elapsed time while the schedule runs, "draining" once it
  is over and requests are still in flight, or an extrapolation for count-bound closed loops.

On a terminal: `\\r` + erase line + the line, fitted to the terminal's width (the elapsed time
goes first, then the bar; the counts stay). Not a terminal (CI, pipes): today's line every
PLAIN_EVERY_S seconds. quiet: nothing. Our own renderer rather than tqdm/rich: a bar that
redraws once a second is some string formatting, and neither library is a dependency.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

PLAIN_EVERY_S = 5.0  # not a terminal: one line per 5 s, as before (CI logs stay short)
BAR_MIN_CHARS = 10  # narrower than this, the bar says nothing: drop it
BAR_MAX_CHARS = 30
DEFAULT_COLUMNS = 80  # a terminal that does not say its width


@dataclass(frozen=True, slots=True)
class Goal:
    """What the plan says the run will do: planned requests (None when a closed loop runs for
    a duration) and planned seconds (None when a closed loop runs for a count)."""

    requests: int | None
    duration_s: float | None

    @classmethod
    def of(cls, plan: Any) -> Goal:
        requests: int | None = 0
        duration: float | None = 0.0
        for p in plan.phases:
            # a closed loop's `requests` counts sessions where it runs multi-turn ones; their
            # turns, every one a request, are planned ahead (`count`)
            n = (
                p.count
                if p.sessions is not None and p.requests is not None
                else (p.requests if p.closed else p.count)
            )
            requests = None if requests is None or n is None else requests + int(n)
            duration = (
                None if duration is None or p.duration_s is None else duration + float(p.duration_s)
            )
        return cls(requests, duration)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One moment of the run, as the line shows it."""

    phase: str
    elapsed_s: float
    sent: int
    in_flight: int
    completed: int
    failed: int
    tokens_per_s: float
    fraction: float | None  # 0..1, None: unknown
    eta_s: float | None  # None: unknown; 0 with in_flight > 0: draining
    workers: int = 1


def snapshot(
    goal: Goal, c: Any, elapsed_s: float, tokens_per_s: float, workers: int = 1
) -> Snapshot:
    """Where the run stands, from the live counters (`Counters` or a sum of them)."""
    done = c.completed + c.failed
    fraction: float | None
    eta: float | None = None
    if goal.requests:
        fraction = min(done / goal.requests, 1.0)
    elif goal.duration_s:
        fraction = min(elapsed_s / goal.duration_s, 1.0)
    else:
        fraction = None
    if goal.duration_s is not None:
        eta = max(goal.duration_s - elapsed_s, 0.0)
    elif fraction:
        eta = elapsed_s * (1.0 - fraction) / fraction
    return Snapshot(
        c.phase or "-",
        elapsed_s,
        c.sent,
        c.in_flight,
        c.completed,
        c.failed,
        tokens_per_s,
        fraction,
        eta,
        workers,
    )


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _eta(s: Snapshot) -> str:
    if s.eta_s is None:
        return "ETA ?"
    if s.eta_s == 0 and s.in_flight:
        return "draining"
    return f"ETA {_clock(s.eta_s)}"


def fields(s: Snapshot) -> list[str]:
    """The line's fields after the bar, most important first (dropped from the end to fit).
    Numbers have fixed widths, so the line does not jump as they grow."""
    pct = "  ?%" if s.fraction is None else f"{s.fraction * 100:3.0f}%"
    out = [
        pct,
        f"{_eta(s):>9}",
        f"in flight {s.in_flight:>4,}",
        f"done {s.completed:>6,}",
        f"errors {s.failed:>4,}",
        f"{s.tokens_per_s:>7,.0f} tok/s",
        f"{_clock(s.elapsed_s):>5} elapsed",
    ]
    if s.workers > 1:
        out.append(f"{s.workers} workers")
    return out


def render_bar(s: Snapshot, columns: int) -> str:
    """The terminal line, at most `columns - 1` characters (the last column would wrap). What
    gives way when the terminal is narrow, in order: the elapsed time, then the bar (shrunk to
    BAR_MIN_CHARS first), then the fields from the right."""
    width = max(columns - 1, 1)
    head = f"{s.phase} "
    parts = fields(s)
    for shown in (parts, [p for p in parts if not p.endswith("elapsed")]):
        tail = " " + "  ".join(shown)
        room = width - len(head) - len(tail) - 2
        if room >= BAR_MIN_CHARS:
            n = min(room, BAR_MAX_CHARS)
            filled = round((s.fraction or 0.0) * n)
            return head + "[" + "#" * filled + "." * (n - filled) + "]" + tail
    return (head + tail.lstrip())[:width]


def render_plain(s: Snapshot) -> str:
    """The non-terminal line (logs): everything, no bar, no redraw."""
    done = "?" if s.fraction is None else f"{s.fraction * 100:.0f}%"
    workers = f", {s.workers} workers" if s.workers > 1 else ""
    return (
        f"[{s.elapsed_s:6.1f}s] {s.phase}: {done}, {_eta(s)}, sent {s.sent}, in flight {s.in_flight}, "
        f"completed {s.completed}, errors {s.failed}, {s.tokens_per_s:,.0f} tok/s{workers}"
    )


def terminal_columns(stream: TextIO) -> int:
    """The width of the terminal the line goes to (stderr, while stdout may be a pipe):
    $COLUMNS when set, else that stream's terminal, else DEFAULT_COLUMNS."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return DEFAULT_COLUMNS


class ProgressView:
    """Called once a second with the live counters; draws the bar, a log line, or nothing."""

    def __init__(
        self,
        goal: Goal,
        quiet: bool = False,
        stream: TextIO | None = None,
        tty: bool | None = None,
        workers: int = 1,
    ) -> None:
        self.goal = goal
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.workers = workers
        self._last_tokens = 0
        self._last_elapsed = 0.0
        self._last_plain = -PLAIN_EVERY_S
        self._drawn = False

    def update(self, c: Any, elapsed_s: float) -> Snapshot:
        dt = elapsed_s - self._last_elapsed
        rate = (c.output_tokens - self._last_tokens) / dt if dt > 0 else 0.0
        self._last_tokens, self._last_elapsed = c.output_tokens, elapsed_s
        s = snapshot(self.goal, c, elapsed_s, rate, self.workers)
        if self.quiet:
            return s
        if self.tty:
            columns = terminal_columns(self.stream)
            self.stream.write("\r\x1b[2K" + render_bar(s, columns))
            self.stream.flush()
            self._drawn = True
        elif elapsed_s - self._last_plain >= PLAIN_EVERY_S - 1e-6:
            self._last_plain = elapsed_s
            print(render_plain(s), file=self.stream, flush=True)
        return s

    def close(self) -> None:
        """End the redrawn line, so what is printed next starts on its own line."""
        if self._drawn and not self.quiet:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


class LiveFeed:
    """The one place a run's live figures go: the progress view and, when asked for, the live
    Prometheus metrics (harness.orchestrate.live_metrics). One-process runs drive it with
    `run(counters)` beside the engine; worker and Ray runs call `tick` from their supervising
    loop and `observe_lines` with the journal lines they receive."""

    def __init__(self, view: ProgressView, metrics: Any = None, interval_s: float = 1.0) -> None:
        self.view = view
        self.metrics = metrics
        self.interval_s = interval_s
        self._counters: Any = None
        self._t_start = 0.0

    def tick(self, c: Any, elapsed_s: float) -> None:
        self.view.update(c, elapsed_s)
        if self.metrics is not None:
            self.metrics.update(c)

    def observe(self, record: Any) -> None:
        if self.metrics is not None:
            self.metrics.observe(record)

    def observe_lines(self, lines: bytes) -> None:
        if self.metrics is not None:
            self.metrics.observe_lines(lines)

    async def run(self, c: Any) -> None:
        """Tick every interval until cancelled (one-process runs: a task on the engine's loop)."""
        import asyncio

        if self.view.quiet and self.metrics is None:
            return  # nothing to show or serve: no task waking on the run's loop
        self._counters, self._t_start = c, time.monotonic()
        while True:
            await asyncio.sleep(self.interval_s)
            self.tick(c, time.monotonic() - self._t_start)

    def close(self) -> None:
        """A last tick with the final counts (one-process runs), then end the line."""
        if self._counters is not None:
            self.tick(self._counters, time.monotonic() - self._t_start)
            self._counters = None
        self.view.close()
