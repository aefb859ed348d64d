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
to an ErrorKind; an unmapped one is our bug and raises TypeError), `ERROR_BODY_LIMIT`, the
"stream ended before [DONE]" detail and the timeout details.
"""

from __future__ import annotations

import contextlib
import resource
from array import array
from typing import Protocol, TypeVar

import aiohttp

from harness.client.openai import StreamDecoder, StreamError
from harness.client.sse import SSEError
from harness.record.records import ErrorKind

ERROR_BODY_LIMIT = 64 * 1024  # bytes of an error response kept for its message
STREAM_ENDED_BEFORE_DONE = "the stream ended before data: [DONE]"
DETAIL_LIMIT = 300  # characters of an exception's text kept as the detail


class HTTPProtocolError(Exception):
    """The server broke HTTP/1.1 framing (bad status line, chunk size, oversized head)."""


def stream_cut_detail(mid_event: bool) -> str:
    """The detail of a stream that ended before `data: [DONE]` (mid_event: inside an event)."""
    return STREAM_ENDED_BEFORE_DONE + (" (mid-event)" if mid_event else "")


def timeout_details(first_token_s: float, idle_s: float, total_s: float) -> tuple[str, str, str]:
    """The details of the three timeouts: first token, idle, total."""
    return (
        f"no token within {first_token_s:g}s",
        f"no data for {idle_s:g}s",
        f"request exceeded {total_s:g}s",
    )


def classify_exception(exc: BaseException) -> tuple[ErrorKind, str]:
    """Map any exception raised while talking to a server to an ErrorKind and a short detail.

    Our own StreamError (and fasthttp's ConnectFailed)/SSEError carry their kind; HTTP framing
    errors are MALFORMED. Anything not listed is our bug: TypeError is raised.
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
        if exc.status and exc.status >= 400:
            return ErrorKind.HTTP_STATUS, detail
        return ErrorKind.MALFORMED, detail
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.ClientConnectionError | OSError):
        return ErrorKind.CONNECT, detail
    if isinstance(exc, aiohttp.ClientError | ValueError | UnicodeDecodeError):
        return ErrorKind.MALFORMED, detail
    raise TypeError(f"unmapped exception {type(exc).__name__}") from exc


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
    )

    def __init__(self, t0: int) -> None:
        self.t0 = t0
        self.sent_ns: int | None = None
        self.headers_ns: int | None = None
        self.status: int | None = None
        self.chunk_ns: array[int] = array("q")
        self.chunk_tokens: array[int] = array("q")
        self.dec = StreamDecoder()
        self.error: ErrorKind | None = None
        self.detail = ""
        self.retry_after_s: float | None = None
        self.end_ns = 0


A = TypeVar("A", bound=Attempt)  # a transport's own attempt type (Exchange, AttemptState)
R = TypeVar("R")  # a transport's own prepared request (bytes; a body and its headers)


class Transport(Protocol[A, R]):
    """One way of sending attempts. `send` never raises for what a server does (that becomes
    `Attempt.error`); only CancelledError (the run stopped) gets out, after which the engine
    calls `abort` and records what the Attempt holds so far.

    Generic in the transport's own attempt (`A`) and prepared request (`R`): `send` and `abort`
    take back only what this transport's `new_attempt` and `prepare` gave out."""

    name: str

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
    "ERROR_BODY_LIMIT",
    "STREAM_ENDED_BEFORE_DONE",
    "Attempt",
    "AttemptState",
    "HTTPProtocolError",
    "Transport",
    "choose_http_client",
    "classify_exception",
    "raise_open_file_limit",
    "stream_cut_detail",
    "timeout_details",
]
