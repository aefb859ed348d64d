"""Record: one request, from intended send to last byte -- what the engine hands to everything after it.

Times are integer nanoseconds since the run's start, read from one monotonic clock
(`time.perf_counter_ns()`) in the engine only. Everything after the engine sees only Records;
every metric in `harness.record.metrics` is derived from these fields.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Channel(enum.IntEnum):
    """What a token event carries, from the delta's fields (harness.client.openai)."""

    ANSWER = 0  # `delta.content`, completions' `text`
    REASONING = 1  # `delta.reasoning_content` / `delta.reasoning`
    TOOL = 2  # `delta.tool_calls[].function` (name or arguments)


CHANNEL_NAMES = tuple(c.name.lower() for c in Channel)  # ("answer", "reasoning", "tool")


def chunk_channels(runs: tuple[tuple[int, int], ...], n_chunks: int) -> tuple[int, ...]:
    """The channel of each of `n_chunks` token events from a Record's `channel_runs`."""
    out: list[int] = []
    ch, at = int(Channel.ANSWER), 0
    for start, nxt in runs:
        start = min(max(start, at), n_chunks)
        out += [ch] * (start - at)
        ch, at = nxt, start
    return (*out, *([ch] * (n_chunks - at)))


def channel_runs_of(channels: tuple[int, ...] | list[int]) -> tuple[tuple[int, int], ...]:
    """`chunk_channels`' inverse: (index, Channel) at each change of channel, from an implicit
    answer run at 0; () when every event is an answer."""
    out: list[tuple[int, int]] = []
    prev = int(Channel.ANSWER)
    for i, ch in enumerate(channels):
        if ch != prev:
            out.append((i, int(ch)))
            prev = int(ch)
    return tuple(out)


class ErrorKind(enum.StrEnum):
    """Why a request failed. Stored in Record.error; never raised."""

    CONNECT = "connect"  # TCP/TLS connection could not be made
    HTTP_STATUS = "http_status"  # non-2xx response; the code is in Record.status
    TIMEOUT_CONNECT = "timeout_connect"  # connection not established within [timeout] connect
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"  # no token within [timeout] first_token of sending
    TIMEOUT_IDLE = "timeout_idle"  # a gap between reads longer than [timeout] idle
    TIMEOUT_TOTAL = "timeout_total"  # the whole request longer than [timeout] total
    STREAM_CUT = "stream_cut"  # the connection ended before `data: [DONE]`
    MALFORMED = "malformed"  # an SSE event that is not the JSON chunk we expect
    SERVER_ERROR = "server_error"  # an `error` object inside the stream
    BODY_TOO_LARGE = "body_too_large"  # an event or line over the client's size cap
    NOT_SENT = "not_sent"  # the run stopped before the intended send time
    CANCELLED = "cancelled"  # in flight when the run was stopped (or past the drain limit)
    INTERNAL = (
        "internal"  # the harness itself failed on this request (our bug; the detail says how)
    )


@dataclass(frozen=True, slots=True)
class Record:
    """One request. Times: ns since run start, monotonic. Token counts from the server's usage."""

    seq: int
    phase: int  # index into the plan's phases
    intended_ns: int  # from the plan: when it *should* have been sent
    sent_ns: int | None  # just before the request was written; None: never sent
    headers_ns: int | None = None  # response status line received
    chunk_ns: tuple[int, ...] = ()  # one stamp per token-bearing SSE event (per socket read)
    chunk_tokens: tuple[int, ...] = ()  # tokens carried by each chunk (same length as chunk_ns)
    end_ns: int | None = None  # stream finished, failed or was abandoned
    status: int | None = None  # HTTP status
    error: ErrorKind | None = None
    error_detail: str = ""
    prompt_tokens: int = 0  # server usage.prompt_tokens (0 when not reported)
    output_tokens: int = 0  # server usage.completion_tokens, else sum(chunk_tokens)
    planned_prompt_tokens: int = 0
    planned_output_tokens: int = 0
    usage_per_chunk: bool = False  # chunk_tokens came from continuous usage stats
    attempt: int = 0  # 0 for the first try, n for the n-th retry
    retried: bool = False  # this failed attempt was followed by a retry
    retry_after_s: float | None = None  # the server's Retry-After on this answer (None: none)
    session_id: int | None = (
        None  # multi-turn: the seq of the session's first turn (None: single turn)
    )
    turn_index: int = 0  # multi-turn: 0 for a session's first request, n for its n-th reply
    request_bytes: int | None = None  # bytes of the request body sent (None: never sent)
    received_bytes: int | None = None  # bytes of the response body received (None: no response)
    # The server's usage counts that were not believed (harness.record.usage), as
    # "<reason>: <what>" items joined by "; ": the counts above are then the client's own.
    usage_flag: str = ""
    # Token channels, run-length encoded: (index of the first token event of a run, Channel) at
    # each change of channel, from an implicit answer run at 0; () when every event is an
    # answer (a model that does not reason or call tools). A few pairs per request, not one
    # tag per event (`chunk_channels` expands them).
    channel_runs: tuple[tuple[int, int], ...] = ()
    # usage.completion_tokens_details.reasoning_tokens as the server sent it (None: not sent)
    usage_reasoning_tokens: int | None = None
    # usage.prompt_tokens_details.cached_tokens: prompt tokens the server found in its prefix
    # cache (None: not sent, or not believed -- usage_flag says why)
    cached_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.sent_ns is not None

    @property
    def first_token_ns(self) -> int | None:
        return self.chunk_ns[0] if self.chunk_ns else None

    @property
    def last_token_ns(self) -> int | None:
        return self.chunk_ns[-1] if self.chunk_ns else None

    @property
    def ttft_ns(self) -> int | None:
        """First token - sent (uncorrected)."""
        if self.sent_ns is None or not self.chunk_ns:
            return None
        return self.chunk_ns[0] - self.sent_ns

    @property
    def ttft_from_schedule_ns(self) -> int | None:
        """First token - intended: free of coordinated omission."""
        return None if not self.chunk_ns else self.chunk_ns[0] - self.intended_ns

    @property
    def e2e_ns(self) -> int | None:
        """Last token - sent."""
        if self.sent_ns is None or not self.chunk_ns:
            return None
        return self.chunk_ns[-1] - self.sent_ns

    @property
    def e2e_from_schedule_ns(self) -> int | None:
        return None if not self.chunk_ns else self.chunk_ns[-1] - self.intended_ns

    @property
    def send_lag_ns(self) -> int | None:
        """Sent - intended of a first attempt: the harness's own lateness (includes waiting for
        max_concurrency). None for a retry (attempt > 0), whose late send is its backoff, not the
        client's lateness (as `harness.record.metrics` counts it), and for a request never sent."""
        return None if self.sent_ns is None or self.attempt > 0 else self.sent_ns - self.intended_ns

    @property
    def tpot_ns(self) -> float | None:
        """(last token - first token) / (output tokens - 1); None for fewer than 2 tokens."""
        n = self.output_tokens
        if len(self.chunk_ns) < 1 or n < 2:
            return None
        return (self.chunk_ns[-1] - self.chunk_ns[0]) / (n - 1)

    @property
    def channels(self) -> tuple[int, ...]:
        """The Channel of each token event (parallel to chunk_ns)."""
        return chunk_channels(self.channel_runs, len(self.chunk_ns))

    def first_ns(self, channel: Channel) -> int | None:
        """The stamp of the first token event of `channel` (None: none)."""
        for t, ch in zip(self.chunk_ns, self.channels, strict=True):
            if ch == channel:
                return t
        return None

    @property
    def ttfo_ns(self) -> int | None:
        """First answer token - sent: TTFT for a model that does not reason."""
        first = self.first_ns(Channel.ANSWER)
        return None if self.sent_ns is None or first is None else first - self.sent_ns

    @property
    def ttft_tool_ns(self) -> int | None:
        """First tool-call token - sent."""
        first = self.first_ns(Channel.TOOL)
        return None if self.sent_ns is None or first is None else first - self.sent_ns

    def channel_tokens(self, channel: Channel) -> int:
        """Tokens the events of `channel` carried."""
        return sum(
            k for k, ch in zip(self.chunk_tokens, self.channels, strict=True) if ch == channel
        )

    @property
    def error_class(self) -> str | None:
        """The key used in `errors` tables: the kind, with the code for HTTP statuses."""
        if self.error is None:
            return None
        if self.error is ErrorKind.HTTP_STATUS and self.status is not None:
            return f"http_{self.status}"
        return self.error.value
