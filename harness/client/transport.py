"""The transport seam: how the engine sends one attempt and what it gets back.

A `Transport` takes a request built ahead of its intended time (`prepare`), sends it and fills
an `Attempt` with what happened: when it was sent, the status, one stamp per token-bearing
read, the decoder's usage, and the failure, if any, as an `ErrorKind` with a short detail. The
engine builds the `Record` from the Attempt, once, for either transport.

Two implementations:

- `harness.client.transport_fast.FastTransport`: the lean HTTP/1.1 client (`fasthttp`), for
  plain http:// targets (the default there);
- `harness.client.transport_aiohttp.AiohttpTransport`: aiohttp, for TLS, proxies and odd
  servers (the default for https://).

A new transport is one module beside these, with a branch in `Engine._make_transport`
(harness.client.engine) and a name in `HTTP_CLIENTS` (`choose_http_client`).

Defined once here for both: `classify_exception` (every exception a transport can meet, mapped
to an ErrorKind; an unmapped one is our bug, recorded as INTERNAL), `ERROR_BODY_LIMIT`, the
details of a failed status (a redirect is never followed: `status_detail`), of a compressed
answer (`encoding_detail`: both ask for `identity`, `ACCEPT_ENCODING`), of a stream past its
bound, of a stream that ended before [DONE], and of the timeouts.
"""

from __future__ import annotations

import contextlib
import resource
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from harness.client.openai import StreamDecoder, StreamError, error_message
from harness.client.sse import SSEError
from harness.client.state import Counters
from harness.config.target import Target
from harness.record.records import ErrorKind

ERROR_BODY_LIMIT = 64 * 1024  # bytes of an error response kept for its message
STREAM_ENDED_BEFORE_DONE = "the stream ended before data: [DONE]"
DETAIL_LIMIT = 300  # characters of an exception's text kept as the detail
# Neither transport decodes a content coding, so both ask for none: a gateway that compresses
# anyway is told apart (`encoding_detail`) instead of failing as a torn stream.
ACCEPT_ENCODING = "identity"
UNBOUNDED = 1 << 62  # an attempt's byte bound until the engine sets one


class HTTPProtocolError(Exception):
    """The server broke HTTP/1.1 framing (bad status line, chunk size, oversized head)."""


def stream_cut_detail(mid_event: bool) -> str:
    """The detail of a stream that ended before `data: [DONE]` (mid_event: inside an event)."""
    return STREAM_ENDED_BEFORE_DONE + (" (mid-event)" if mid_event else "")


def timeout_details(first_token_s: float, idle_s: float, total_s: float) -> tuple[str, str, str]:
    """The details of the three timeouts: first token, idle, total."""
    return (
        f"no token within {first_token_s:g}s",
        f"no token for {idle_s:g}s",
        f"request exceeded {total_s:g}s",
    )


def status_detail(status: int, body: bytes, location: str | None) -> str:
    """The detail of a non-200 answer: its status and the server's message. A redirect is not
    followed (it would carry the key and the settings' headers to wherever it points): the
    detail names where it pointed, scheme, host and port only."""
    if 100 <= status < 200:  # only 101 reaches here (harness.client.framing)
        return f"HTTP {status}: the server switched the connection away from HTTP"
    if 300 <= status < 400:
        return (
            f"HTTP {status}: redirect{redirect_target(location)} not followed: point base_url "
            "at the final address"
        )
    return f"HTTP {status}: {error_message(body)}"


def redirect_target(location: str | None) -> str:
    """Where a redirect points, as " to scheme://host:port" (no path, no userinfo), " (same
    host)" for a relative one, "" for none."""
    if not location:
        return ""
    p = urlsplit(location)
    return f" to {p.scheme}://{p.netloc.rpartition('@')[2]}" if p.netloc else " (same host)"


def encoding_detail(encoding: str) -> str:
    """The detail of a 200 answer in a content coding the request did not ask for."""
    return (
        f"the answer is {encoding[:40]}-encoded although the request asked for "
        f"Accept-Encoding: {ACCEPT_ENCODING}: a gateway compresses the stream; turn that off "
        "for text/event-stream"
    )


def bound_detail(limit_bytes: int) -> str:
    """The detail of a stream the client ended past its bound (harness.record.usage)."""
    return f"the stream went on past {limit_bytes} bytes, its bound for the max_tokens asked"


def is_encoded(encoding: str | None) -> bool:
    """Whether a Content-Encoding header names a coding (anything but identity)."""
    return encoding is not None and encoding.strip().lower() not in ("", ACCEPT_ENCODING)


def classify_exception(exc: BaseException) -> tuple[ErrorKind, str]:
    """Map any exception raised while talking to a server to an ErrorKind and a short detail.

    Our own StreamError (and fasthttp's ConnectFailed)/SSEError carry their kind; HTTP framing
    errors are MALFORMED. Anything not listed is our bug: INTERNAL, with the exception named,
    so that the request is still recorded.
    """
    if isinstance(exc, StreamError):
        return exc.kind, exc.detail
    if isinstance(exc, SSEError):
        return ErrorKind.BODY_TOO_LARGE, str(exc)
    if isinstance(exc, HTTPProtocolError):
        return ErrorKind.MALFORMED, f"HTTP framing: {exc}"
    detail = f"{type(exc).__name__}: {exc}"[:DETAIL_LIMIT]
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ClientProxyConnectionError):
        return ErrorKind.CONNECT, detail
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ErrorKind.TIMEOUT_CONNECT, detail
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return ErrorKind.TIMEOUT_IDLE, detail
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | aiohttp.ClientOSError
        | ConnectionError,
    ):
        return ErrorKind.STREAM_CUT, detail
    if isinstance(exc, aiohttp.ClientResponseError):
        # Never a status the server sent: the harness reads those from the response and calls
        # no raise_for_status. aiohttp raises this when its parser refuses the answer (a bad
        # status line, chunk size or header), with the 400 of its own parse error: framing.
        return ErrorKind.MALFORMED, f"HTTP framing: {exc.message}"[:DETAIL_LIMIT]
    if isinstance(exc, HttpProcessingError):
        # aiohttp's parser refusing the framing mid-body, as its protocol keeps it
        return ErrorKind.MALFORMED, f"HTTP framing: {exc.message}"[:DETAIL_LIMIT]
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.ClientConnectionError | OSError):
        return ErrorKind.CONNECT, detail
    if isinstance(exc, aiohttp.ClientError | ValueError | UnicodeDecodeError):
        return ErrorKind.MALFORMED, detail
    return ErrorKind.INTERNAL, internal_detail(exc)


def internal_detail(exc: BaseException) -> str:
    """The detail of an INTERNAL failure: the exception, and that it is the harness's."""
    return f"harness error {type(exc).__name__}: {exc}"[:DETAIL_LIMIT]


class Attempt(Protocol):
    """What one attempt observed; all times ns since the run's t0. fasthttp's `Exchange` is one;
    `AttemptState` is the aiohttp path's."""

    sent_ns: int | None  # None: never written (no connection could be made)
    headers_ns: int | None
    status: int | None
    chunk_ns: array[int]
    chunk_tokens: array[int]
    dec: StreamDecoder
    error: ErrorKind | None
    detail: str
    retry_after_s: float | None
    end_ns: int  # when it finished, failed or was given up
    received_bytes: int  # response body bytes received
    max_body_bytes: int  # the stream is ended past this (set by the engine per attempt)
    max_token_events: int  # ... and past this many token events (set by the engine)
    events_cut: bool  # the client ended the stream at max_token_events
    # (seq, attempt): the record this attempt's answer becomes, set by the engine; a connection
    # names it when stray bytes follow that answer (harness.client.keepalive)
    rid: tuple[int, int] | None


class TokenCounter(Protocol):
    """What an attempt adds its tokens to (harness.client.state.Counters)."""

    output_tokens: int


def cut_token_events(
    chunk_ns: array[int], chunk_tokens: array[int], limit: int, counters: TokenCounter
) -> bool:
    """Keep the first `limit` token events of a stream that sent more (`harness.record.usage`:
    more token events than `max_tokens` allows are not this request's); True when it cut."""
    extra = len(chunk_tokens) - limit
    if extra <= 0:
        return False
    counters.output_tokens -= sum(chunk_tokens[limit:])
    del chunk_tokens[limit:]
    del chunk_ns[limit:]
    return True


class AttemptState:
    """An Attempt as a plain holder (the aiohttp path fills it as the response arrives)."""

    __slots__ = (
        "t0",
        "sent_ns",
        "headers_ns",
        "status",
        "chunk_ns",
        "chunk_tokens",
        "dec",
        "error",
        "detail",
        "retry_after_s",
        "end_ns",
        "received_bytes",
        "max_body_bytes",
        "max_token_events",
        "events_cut",
        "rid",
    )

    def __init__(self, t0: int, decoder: type[StreamDecoder] = StreamDecoder) -> None:
        self.t0 = t0
        self.sent_ns: int | None = None
        self.headers_ns: int | None = None
        self.status: int | None = None
        self.chunk_ns: array[int] = array("q")
        self.chunk_tokens: array[int] = array("q")
        self.dec = decoder()
        self.error: ErrorKind | None = None
        self.detail = ""
        self.retry_after_s: float | None = None
        self.end_ns = 0
        self.received_bytes = 0
        self.max_body_bytes = UNBOUNDED
        self.max_token_events = UNBOUNDED
        self.events_cut = False
        self.rid: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TransportSetup:
    """What every transport is made with (harness.client.engine's `_make_transport`).
    `on_suspect(seq, attempt)`: an answer that stray bytes followed on its connection
    (harness.client.keepalive)."""

    target: Target
    url: str
    headers: dict[str, str]
    request_id_prefix: str
    counters: Counters
    decoder: type[StreamDecoder] = StreamDecoder
    on_suspect: Callable[[tuple[int, int]], None] | None = None


A = TypeVar("A", bound=Attempt)  # a transport's own attempt type (Exchange, AttemptState)
R = TypeVar("R")  # a transport's own prepared request (bytes; a body and its headers)


class Transport(Protocol[A, R]):
    """One way of sending attempts. `send` never raises for what a server does (that becomes
    `Attempt.error`); only CancelledError (the run stopped) gets out, after which the engine
    calls `abort` and records what the Attempt holds so far.

    Generic in the transport's own attempt (`A`) and prepared request (`R`): `send` and `abort`
    take back only what this transport's `new_attempt` and `prepare` gave out."""

    name: str

    @property
    def stale_connections(self) -> int:
        """Connections closed for bytes nobody asked for (harness.client.keepalive)."""
        ...

    async def open(self, preconnect: int, deadline_ns: int) -> int:
        """Get ready before t0; warm up to `preconnect` connections by `deadline_ns`
        (perf_counter_ns). Returns how many were opened."""
        ...

    def prepare(self, seq: int, attempt: int, body: bytes) -> R:
        """The request for attempt `attempt` of request `seq`, built ahead of its send time."""
        ...

    def new_attempt(self, t0_ns: int) -> A: ...

    async def send(self, a: A, request: R) -> None:
        """Send the prepared request and fill `a` until the stream ends, fails or times out."""
        ...

    def abort(self, a: A) -> None:
        """The engine gave up on this attempt (cancelled): drop its connection."""
        ...

    async def close(self) -> None: ...


HTTP_CLIENTS = ("auto", "fast", "aiohttp")


def choose_http_client(name: str, base_url: str) -> str:
    """'fast' or 'aiohttp' for a target. Raises ValueError for fast with https or an unknown name."""
    if name not in HTTP_CLIENTS:
        raise ValueError(f"expected one of {', '.join(HTTP_CLIENTS)}, got {name!r}")
    plain = base_url.startswith("http://")
    if name == "auto":
        return "fast" if plain else "aiohttp"
    if name == "fast" and not plain:
        raise ValueError(
            f"fast supports http:// targets only (got {base_url}); use aiohttp for https"
        )
    return name


def raise_open_file_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit where allowed; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


__all__ = [
    "ACCEPT_ENCODING",
    "ERROR_BODY_LIMIT",
    "STREAM_ENDED_BEFORE_DONE",
    "Attempt",
    "AttemptState",
    "HTTPProtocolError",
    "Transport",
    "TransportSetup",
    "choose_http_client",
    "bound_detail",
    "classify_exception",
    "encoding_detail",
    "internal_detail",
    "is_encoded",
    "raise_open_file_limit",
    "redirect_target",
    "status_detail",
    "stream_cut_detail",
    "timeout_details",
]
