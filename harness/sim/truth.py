"""Server-side truth: what the simulator did for each request, for tests to compare against.

Per request id (the `X-Request-Id` header when the client sent one), the
`time.perf_counter_ns()` stamps (CLOCK_MONOTONIC on Linux, so comparable across processes on
one machine) of arrival, first scheduling, each token's write to the socket, plus counts.
Served in-process as `SimServer.truth` and over HTTP at `GET {root}/sim/truth`.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_TRUTH_REQUESTS = 100_000  # keep memory bounded on long real-time runs; oldest dropped


@dataclass(slots=True, eq=False)
class RequestTruth:
    """One request. Times are perf_counter_ns; None until the event happened."""

    request_id: str
    endpoint: str  # "completions" | "chat"
    stream: bool
    arrival_ns: int
    prompt_tokens: int = 0
    max_tokens: int = 0
    target_tokens: int = 0  # where generation stops (max_tokens, or an earlier EOS)
    scheduled_ns: int | None = None  # first admitted into the running batch
    first_token_ns: int | None = None
    token_ns: array[int] = field(default_factory=lambda: array("q"))  # one per token written
    end_ns: int | None = None
    preemptions: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    status: int = 200
    fault: str | None = None
    reasoning_tokens: int = 0  # the first output tokens that are reasoning (drawn per request)
    tool_call: str | None = None  # the function the answer calls (None: it answers)
    # prompt tokens served from the prefix cache (vLLM's num_cached_tokens, what usage's
    # prompt_tokens_details.cached_tokens reports); None until first scheduled
    cached_tokens: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "request_id": self.request_id,
            "endpoint": self.endpoint,
            "stream": self.stream,
            "arrival_ns": self.arrival_ns,
            "scheduled_ns": self.scheduled_ns,
            "first_token_ns": self.first_token_ns,
            "token_ns": self.token_ns.tolist(),
            "end_ns": self.end_ns,
            "preemptions": self.preemptions,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "target_tokens": self.target_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "status": self.status,
            "fault": self.fault,
            "reasoning_tokens": self.reasoning_tokens,
            "tool_call": self.tool_call,
            "cached_tokens": self.cached_tokens,
        }


class TruthStore:
    """Request id -> RequestTruth, oldest dropped beyond `capacity`."""

    def __init__(self, capacity: int = MAX_TRUTH_REQUESTS) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, RequestTruth] = OrderedDict()

    def add(self, truth: RequestTruth) -> None:
        self._items[truth.request_id] = truth
        self._items.move_to_end(truth.request_id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __getitem__(self, request_id: str) -> RequestTruth:
        return self._items[request_id]

    def get(self, request_id: str) -> RequestTruth | None:
        return self._items.get(request_id)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> list[RequestTruth]:
        return list(self._items.values())

    def to_dict(self) -> dict[str, object]:
        """The JSON document of `GET /sim/truth`."""
        return {
            "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)",
            "requests": {rid: t.to_dict() for rid, t in self._items.items()},
        }
