"""What a capacity search shows while it runs: within a probe, its rate, elapsed time and
requests in flight; for the search, "run k of at most N" and an ETA.

N is what the search still needs if it goes as its bracket says (`runs_left`): doubling until a
rate fails (up to the virtual-clock estimate when there is one), bisecting the bracket to the
tolerance, then the confirmation runs. A failed confirmation or a rate above the server's
measured service rate sends the search below its answer, and N grows then; it is recomputed
before every run. The ETA is the planned length of the runs left (the probe sizer's) plus, per
run, what the runs so far took beyond their planned length (warm-up, drain, the server check).

The line redraws in place on a terminal and is printed every PLAIN_EVERY_S seconds elsewhere,
as a run's progress line does (`harness.orchestrate.progress`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from harness.analysis.capacity import RateSearch
from harness.orchestrate.progress import PLAIN_EVERY_S, terminal_columns


def _bisections(ratio: float, tolerance: float) -> int:
    """Geometric bisections that take a bracket hi/lo = `ratio` to within the tolerance."""
    if ratio <= 1 + tolerance:
        return 0
    return max(1, math.ceil(math.log2(math.log(ratio) / math.log1p(tolerance))))


def runs_left(search: RateSearch, confirm_runs: int, expected: float | None = None) -> int:
    """Probes and confirmations the search still needs when each probe falls as the bracket
    (or `expected`, a virtual-clock estimate of the answer) predicts."""
    tol = search.tolerance
    if search.converged():
        probes = 0
    elif search.hi is None and search.lo is None and expected and expected < search.start_rate:
        quarterings = max(1, math.ceil(math.log(search.start_rate / expected, 4)))
        probes = 1 + quarterings + _bisections(4.0, tol)  # the first fails, then /4 until a pass
    elif search.hi is None:
        base = search.lo if search.lo is not None else search.start_rate / 2
        top = min(expected or search.max_rate, search.max_rate)
        doublings = max(1, math.floor(math.log2(max(top, base) / base)) + 1)
        reaches_max = base * 2**doublings >= search.max_rate
        probes = doublings + (0 if reaches_max else _bisections(2.0, tol))
    elif search.lo is None:
        probes = 1 + _bisections(4.0, tol)
    else:
        probes = _bisections(search.hi / search.lo, tol)
    return min(probes, max(search.max_probes - search.probes, 0)) + confirm_runs


def clock(seconds: float) -> str:
    s = max(int(round(seconds)), 0)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


@dataclass
class SearchProgress:
    """The search's progress line. `start_run` before each run, `sample` from the probe's live
    watch (harness.orchestrate.probe_monitor), `end_run` after it."""

    confirm_runs: int
    confirm_s: float
    expected: float | None = None  # the virtual-clock estimate of the answer, when there is one
    quiet: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    tty: bool | None = None
    done: int = 0  # runs finished
    overhead_s: float = 0.0  # wall time beyond the planned length, summed over finished runs
    _run: tuple[str, float, float, int] | None = None  # label, rate, planned s, N
    _t0: float = 0.0
    _last_plain: float = -PLAIN_EVERY_S
    _drawn: bool = False
    _left_after_s: float = 0.0  # planned seconds of the runs after this one

    def __post_init__(self) -> None:
        if self.tty is None:
            self.tty = self.stream.isatty()

    def start_run(
        self,
        label: str,
        rate: float,
        duration_s: float,
        search: RateSearch,
        confirms_done: int,
        next_duration_s: float,
    ) -> None:
        """`next_duration_s`: the planned length of the probes after this one."""
        if label == "confirm":
            after = self.confirm_runs - confirms_done - 1
            total = self.done + 1 + max(after, 0)
            self._left_after_s = max(after, 0) * self.confirm_s
        else:
            left = runs_left(search, self.confirm_runs, self.expected)
            probes_after = max(left - self.confirm_runs - 1, 0)
            total = self.done + max(left, 1)
            self._left_after_s = probes_after * next_duration_s + self.confirm_runs * self.confirm_s
        self._run = (label, rate, duration_s, total)
        self._t0 = time.monotonic()
        self._last_plain = -PLAIN_EVERY_S

    def eta_s(self, elapsed_s: float) -> float:
        """Seconds until the search ends, from `elapsed_s` into the current run."""
        if self._run is None:
            return 0.0
        _, _, planned, total = self._run
        per_run = self.overhead_s / self.done if self.done else 0.0
        runs_to_go = total - self.done
        return max(planned - elapsed_s, 0.0) + self._left_after_s + per_run * runs_to_go

    def line(self, elapsed_s: float, in_flight: int, done: int) -> str:
        assert self._run is not None
        label, rate, planned, total = self._run
        return (
            f"capacity: {label} {self.done + 1} of at most {total} at {rate:.4g} req/s  "
            f"{clock(elapsed_s)}/{clock(planned)}  in flight {in_flight:,}  done {done:,}  "
            f"search ETA {clock(self.eta_s(elapsed_s))}"
        )

    def sample(self, s: Any) -> None:
        """One sample of the probe's live watch (`harness.analysis.runaway.Sample`)."""
        if self.quiet or self._run is None:
            return
        text = self.line(s.t_s, s.in_flight, s.done)
        if self.tty:
            width = max(terminal_columns(self.stream) - 1, 1)
            self.stream.write("\r\x1b[2K" + text[:width])
            self.stream.flush()
            self._drawn = True
        elif s.t_s - self._last_plain >= PLAIN_EVERY_S - 1e-6:
            self._last_plain = s.t_s
            print(text, file=self.stream, flush=True)

    def end_run(self) -> None:
        if self._run is not None:
            self.overhead_s += max(time.monotonic() - self._t0 - self._run[2], 0.0)
            self.done += 1
            self._run = None
        if self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._drawn = False


__all__ = ["SearchProgress", "clock", "runs_left"]
