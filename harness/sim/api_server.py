"""vLLM's API server in front of the engine, as the scheduler's model clock sees it.

vLLM's API server is one Python process (one event loop) in front of the engine: it
tokenizes and admits each request, and detokenizes and writes each output token as an SSE
event. It is modelled as one serial worker that streams first and takes intake in the time
left:

- intake: a request added at `at_s` waits for the worker's intake backlog, takes
  `intake_s_per_request + intake_s_per_prompt_token * prompt_tokens` (Roofline.intake_s),
  then `request_latency_s` more (a fixed delay that holds nothing: HTTP handling, the hops
  between vLLM's processes), and only then joins the waiting queue. A burst of N requests is
  admitted one by one over N times that cost, as vLLM admits one.
- streaming: the tokens a step emits take `stream_s_per_token` each; they are delivered
  (`StepOutput.delivered_s`) when the worker has streamed all of them, no earlier than the
  step's end. Streaming goes first: intake work still pending at the step's end waits that
  long (the backlog shifts). When streaming is the bottleneck, delivery falls behind the
  engine, which runs on (vLLM's engine core does not wait for its API server). Under an
  overload of arrivals the intake backlog grows, as vLLM's does, while the requests already
  admitted keep streaming: no congestion collapse.

The scheduler (harness.sim.scheduler) holds one `ApiServer` and drives it on its model clock.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from harness.sim.roofline import Roofline

R = TypeVar("R")  # the scheduler's request (SimRequest)


class ApiServer(Generic[R]):
    """The serial worker: its intake backlog, the requests past it, and its streaming."""

    def __init__(self, roofline: Roofline) -> None:
        self.roofline = roofline
        # Requests in the intake backlog, with the model time each is done as booked and the
        # streaming shift when it was booked (its time is booked + shift now - that shift);
        # requests past the worker, with the time each reaches the scheduler; when the intake
        # backlog and the streaming are done; the streaming time charged to the backlog so far.
        self.intake: deque[tuple[float, float, R]] = deque()
        self.landing: deque[tuple[float, R]] = deque()
        self.free_s = 0.0
        self.stream_free_s = 0.0
        self._shift = 0.0

    def __len__(self) -> int:
        """Requests the API server has not admitted yet."""
        return len(self.intake) + len(self.landing)

    def _intake_done(self, entry: tuple[float, float, R]) -> float:
        return entry[0] + self._shift - entry[1]

    @property
    def next_s(self) -> float | None:
        """Model time the next request leaves the API server for the waiting queue."""
        times = [self.landing[0][0]] if self.landing else []
        if self.intake:
            times.append(self._intake_done(self.intake[0]) + self.roofline.request_latency_s)
        return min(times) if times else None

    def take(self, req: R, prompt_tokens: int, arrival_s: float) -> None:
        """A request arrives at model time `arrival_s` and joins the intake backlog."""
        done = max(arrival_s, self.free_s) + self.roofline.intake_s(prompt_tokens)
        self.free_s = done
        self.intake.append((done, self._shift, req))

    def land(self, t_s: float) -> None:
        """Requests whose intake work is done by `t_s` leave the worker: they reach the
        scheduler `request_latency_s` later, whatever the worker does next."""
        latency = self.roofline.request_latency_s
        while self.intake and self._intake_done(self.intake[0]) <= t_s:
            entry = self.intake.popleft()
            self.landing.append((self._intake_done(entry) + latency, entry[2]))

    def arrived(self, clock_s: float) -> list[R]:
        """The requests that reached the scheduler by `clock_s`, in order (taken from here)."""
        self.land(clock_s)
        out = []
        while self.landing and self.landing[0][0] <= clock_s:
            out.append(self.landing.popleft()[1])
        return out

    def drop(self, req: R) -> None:
        """Forget a request still in intake (its client went away)."""
        self.intake = deque(x for x in self.intake if x[2] is not req)
        self.landing = deque(x for x in self.landing if x[1] is not req)

    def stream(self, n_tokens: int, end_s: float) -> float:
        """A step that ended at `end_s` emitted `n_tokens`: when they are delivered. Intake
        work still pending waits while the worker streams them."""
        if not n_tokens:
            return end_s
        cost = n_tokens * self.roofline.stream_s_per_token
        delivered = max(end_s, self.stream_free_s) + cost
        self.stream_free_s = delivered
        self.land(end_s)  # intake finished by the step's end is not delayed
        if self.intake:  # the backlog waits while the worker streams
            self._shift += cost
            self.free_s += cost
        return delivered
