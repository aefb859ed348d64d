"""A run's shared state: live counters, the stop control, what a signal means, and the
outcome. The engine fills them; the runner, worker processes and Ray actors read them."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Counters:
    """Live counts for the progress line (read by the CLI once a second)."""

    sent: int = 0
    in_flight: int = 0
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    phase: str = ""


CALLER_STOP_REASON = "stopped by the caller (harness.run interrupted or harness.arun cancelled)"


class CallerStop:
    """A caller's stop (the Python API: Ctrl-C in a notebook, a cancelled `arun`) as a loop that
    polls it sees it: `due()` is true once, the first time it is polled after the event was
    set; it then stops the run as a first Ctrl-C does."""

    def __init__(self, event: threading.Event | None) -> None:
        self.event, self.sent = event, False

    def due(self) -> bool:
        if self.sent or self.event is None or not self.event.is_set():
            return False
        self.sent = True
        return True

    def what(self) -> tuple[str, bool]:
        """(reason, hard) of the stop: a long command's (`hard`, harness.orchestrate.stopping)
        stops at once with its own reason; any other is a first Ctrl-C."""
        if getattr(self.event, "hard", False):
            return str(getattr(self.event, "reason", "") or CALLER_STOP_REASON), True
        return CALLER_STOP_REASON, False

    @property
    def holds_signals(self) -> bool:
        """A long command's stop: it holds SIGINT and SIGTERM, the shards install no handler."""
        return bool(getattr(self.event, "hard", False))


class Interrupts:
    """What a signal means, the same for one process, worker processes and Ray: the first
    SIGINT (or a SIGTERM) stops sending and gives requests in flight the grace period; a second
    SIGINT stops at once. `on(signum)` returns (reason, hard) and says so on stderr once."""

    def __init__(self, grace_s: float, quiet: bool) -> None:
        self.grace_s = grace_s
        self.quiet = quiet
        self.sigints = 0

    def on(self, signum: int) -> tuple[str, bool]:
        if signum != signal.SIGINT:
            return "terminated (SIGTERM)", False
        self.sigints += 1
        if self.sigints > 1:
            return "interrupted (SIGINT twice)", True
        if not self.quiet:
            print(
                f"\nstopping: in-flight requests get {self.grace_s:g}s; Ctrl-C again to stop now",
                file=sys.stderr,
                flush=True,
            )
        return "interrupted (SIGINT)", False


@dataclass
class Control:
    """Stop requests from signal handlers or the journal, read by the engine."""

    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str | None = None
    hard: bool = False

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.stop_event.set()

    @property
    def stopped(self) -> bool:
        return self.stop_event.is_set()


@dataclass
class RunOutcome:
    t0_ns: int  # perf_counter_ns at the run's start (all Record times are relative)
    t0_wall_s: float  # time.time() at t0
    end_ns: int
    phase_starts_ns: list[int]
    phase_ends_ns: list[int]
    complete: bool
    stop_reason: str | None
    cpu_s: float  # process CPU time (user + system) over the run
    loop_lag_ns: list[int]
    # One per shard (engine): {"shard": [index, count], "begun": [per phase], "recorded": [per
    # phase], "errors": [...]}: the requests it took up, the final records it emitted, and any
    # exception that escaped a request (harness.analysis.accounting checks them)
    accounts: list[dict[str, Any]] = field(default_factory=list)


__all__ = ["CALLER_STOP_REASON", "CallerStop", "Control", "Counters", "Interrupts", "RunOutcome"]
