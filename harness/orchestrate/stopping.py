"""SIGINT and SIGTERM as a stop for the long commands (`capacity`, `plan`, `sweep`, `run
--repeat`): one mechanism, so every one of them stops within 2 s, keeps what finished, writes
what it has marked as interrupted and exits 130 (SIGINT) or 143 (SIGTERM).

`stop_on_signals()` holds the process's SIGINT and SIGTERM handlers while a long command runs
and yields its `CommandStop`: a `threading.Event` set by the first signal, which names the
signal (`name`), the exit status (`status`) and the stop reason a run records (the same words
as a single run's, `harness.client.state.Interrupts`). Outside a run the first signal raises
`Interrupted` where the command is (a virtual-clock search, a server start), so CPU-bound work
stops at once; inside `deferred()` (around a `measure`) it only sets the event: the run sees
it (`measure(stop=...)`), cancels its requests in flight at once (`hard`: a run cut short is
never judged, so it needs no grace period), writes its journal and result as interrupted, and
`Interrupted` is raised when the block ends. A single `run` keeps its own handling (a grace
period for requests in flight, a second Ctrl-C to stop at once), which stands aside when it is
given a stop (`harness.orchestrate.run_engine.execute_one_process`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number
REASONS = {signal.SIGINT: "interrupted (SIGINT)", signal.SIGTERM: "terminated (SIGTERM)"}


class Interrupted(BaseException):
    """A long command stopped by a signal. A BaseException, as KeyboardInterrupt is: no
    `except Exception` on the way swallows it."""

    def __init__(self, stop: CommandStop) -> None:
        super().__init__(stop.reason)
        self.stop = stop

    @property
    def status(self) -> int:
        return self.stop.status


class CommandStop(threading.Event):
    """Set by the first SIGINT or SIGTERM (or `request`, in a test). A run given it as its
    `stop` stops at once (`hard`), with `reason` as its stop reason."""

    hard = True

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None
        self._deferring = 0

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def status(self) -> int:
        return EXIT_STATUS.get(signal.Signals(self.signum), 130) if self.signum else 0

    @property
    def reason(self) -> str:
        if self.signum is None:
            return ""
        return REASONS.get(signal.Signals(self.signum), f"stopped ({self.name})")

    def request(self, signum: int) -> bool:
        """Record the signal and set the event; True the first time."""
        if self.signum is not None:
            return False
        self.signum = signum
        self.set()
        return True

    def check(self) -> None:
        """Raise `Interrupted` when a signal came."""
        if self.signum is not None:
            raise Interrupted(self)

    @contextlib.contextmanager
    def deferred(self, check: bool = True) -> Iterator[None]:
        """A block that a signal does not interrupt (a run: it stops itself, at once, when
        given this stop); `Interrupted` is raised when it ends, if a signal came meanwhile
        (`check`; without it the caller looks at the event: a sweep records the cut run)."""
        self._deferring += 1
        try:
            yield
        except Exception:
            if check and self.signum is not None:  # what the cut run raised is the signal's doing
                raise Interrupted(self) from None
            raise
        finally:
            self._deferring -= 1
        if check:
            self.check()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        first = self.request(signum)
        if not first:
            return
        print(f"\n{self.reason}: stopping", file=sys.stderr, flush=True)
        if not self._deferring:
            raise Interrupted(self)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[CommandStop]:
    """SIGINT and SIGTERM stop the long command run in this block (module docstring); the
    previous handlers come back after it. Off the main thread (where Python delivers no
    signals) the stop is still given, for the caller to set."""
    stop = CommandStop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    old = {s: signal.signal(s, stop._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


__all__ = ["EXIT_STATUS", "CommandStop", "Interrupted", "stop_on_signals"]
