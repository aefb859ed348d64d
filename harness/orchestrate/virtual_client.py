"""The client side of a virtual run (`harness.orchestrate.virtual_probe`): when each planned
request is sent, as a perfect client would send it, and when a closed loop's next one goes."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from harness.sim.scheduler import SimRequest
from harness.workload.plan import Plan

NS_PER_S = 1_000_000_000


class VirtualClient:
    """The client side of a virtual run: when each planned request is sent.

    Phases run back to back. An open-loop phase sends at its planned times; with
    `max_concurrency` a request waits for a free slot (sent when an earlier one of its phase
    ends, never before its planned time). A closed loop starts `users` requests at its phase's
    start and sends the next one of its length pool when one ends, plus the think time, until
    the pool is used up (a count-bound loop) or the phase's planned end (a duration-bound one;
    its pool is not cycled). A phase after a count-bound closed loop starts when that loop's
    last answer ends, and its planned times move with it. Times are model seconds (`speedup`
    times real ones); `windows` (ns) are updated to the phases' actual starts."""

    def __init__(
        self,
        plan: Plan,
        windows: list[tuple[int, int]],
        phase: np.ndarray,
        t_int: np.ndarray,
        speedup: float,
        make: Callable[[int, float], SimRequest | None],
    ) -> None:
        self.make = make  # row, send time (model s) -> the request, None if refused at once
        self.speedup = speedup
        self.phases = plan.phases
        self.windows = windows
        self.phase = phase
        self.t_int = t_int  # planned send ns (open loop); overwritten by the actual send
        self.sent = np.zeros(len(phase), bool)
        self.rows = {pp.index: np.flatnonzero(phase == pp.index) for pp in plan.phases}
        self.live = dict.fromkeys(self.rows, 0)  # phase -> requests sent and not ended
        self.pending: dict[int, deque[int]] = {}  # gated phase -> rows not sent yet, in order
        self.think_s: dict[int, float] = {}
        self.until_s: dict[int, float] = {}  # phase -> no send after this (model s)
        self.gated: set[int] = set()
        self.count_bound = {pp.index for pp in plan.phases if pp.closed and pp.duration_s is None}
        self.started: set[int] = set()
        for pp in plan.phases:
            if pp.closed or pp.max_concurrency:
                self.gated.add(pp.index)
                self.pending[pp.index] = deque(self.rows[pp.index].tolist())
                self.think_s[pp.index] = pp.think_s * speedup if pp.closed else 0.0

    def _s(self, ns: float) -> float:
        return float(ns) / NS_PER_S * self.speedup

    def _send(self, row: int, at_s: float) -> SimRequest | None:
        self.sent[row] = True
        self.t_int[row] = int(round(at_s / self.speedup * NS_PER_S))
        req = self.make(row, at_s)
        if req is not None:
            self.live[int(self.phase[row])] += 1
        return req

    def _next(self, ph: int, free_s: float) -> list[tuple[float, SimRequest]]:
        """A slot of phase `ph` is free at `free_s`: send its next request (and the next,
        while the server refuses them at once)."""
        out: list[tuple[float, SimRequest]] = []
        queue = self.pending[ph]
        while queue:
            row = queue[0]
            at = max(free_s, self._s(self.t_int[row]))
            if at > self.until_s[ph]:
                queue.clear()
                break
            queue.popleft()
            req = self._send(row, at)
            if req is not None:
                out.append((at, req))
                break
            free_s = at + self.think_s[ph]
        return out

    def _start_from(self, k: int, start_ns: int, free_s: float) -> list[tuple[float, SimRequest]]:
        """Phase k starts at `start_ns`, and each after it at its predecessor's planned end, up
        to and including the next count-bound closed loop (whose end is not planned)."""
        out: list[tuple[float, SimRequest]] = []
        for pp in self.phases[k:]:
            i = pp.index
            old_start, old_end = self.windows[i]
            self.windows[i] = (start_ns, start_ns + old_end - old_start)
            rows = self.rows[i]
            if pp.closed:
                self.t_int[rows] = start_ns
            else:
                self.t_int[rows] += start_ns - old_start
            self.until_s[i] = (
                self._s(self.windows[i][1]) if pp.closed and pp.duration_s is not None else np.inf
            )
            self.started.add(i)
            if i in self.gated:
                slots = pp.users if pp.closed else int(pp.max_concurrency or 0)
                for _ in range(slots):
                    queue = self.pending[i]
                    if not queue:
                        break
                    out += self._next(i, max(free_s, self._s(self.t_int[queue[0]])))
            else:
                for row in rows[np.argsort(self.t_int[rows], kind="stable")].tolist():
                    at = self._s(self.t_int[row])
                    req = self._send(row, at)
                    if req is not None:
                        out.append((at, req))
            if i in self.count_bound:
                out += self._advance(i, free_s)
                break
            start_ns = self.windows[i][1]
        return out

    def _advance(self, ph: int, at_s: float) -> list[tuple[float, SimRequest]]:
        """After count-bound closed loop `ph` has sent and ended everything: the next phase."""
        nxt = ph + 1
        if self.pending[ph] or self.live[ph] or nxt >= len(self.phases) or nxt in self.started:
            return []
        end_ns = int(round(at_s / self.speedup * NS_PER_S))
        self.windows[ph] = (self.windows[ph][0], max(self.windows[ph][0], end_ns))
        return self._start_from(nxt, self.windows[ph][1], at_s)

    def initial(self) -> list[tuple[float, SimRequest]]:
        """The requests sent before any answer."""
        return self._start_from(0, self.windows[0][0], 0.0) if self.phases else []

    def follow(self, finished: list[int], at_s: float) -> list[tuple[float, SimRequest]]:
        out: list[tuple[float, SimRequest]] = []
        for rid in finished:
            ph = int(self.phase[rid])
            self.live[ph] -= 1
            if ph in self.gated:
                out += self._next(ph, at_s + self.think_s[ph])
            if ph in self.count_bound:
                out += self._advance(ph, at_s)
        return out
