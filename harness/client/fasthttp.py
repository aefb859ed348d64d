"""A lean HTTP/1.1 streaming client for the engine's hot loop: asyncio.Protocol (uvloop), sans-I/O parsing.

Theory of operation
-------------------
aiohttp costs about 30 us of client CPU per socket read of a paced stream (the read wakes a
task, which awaits `readany()`, which returns through several layers of futures) and about
150 us per request sent. For plain-HTTP targets the engine uses this module instead; aiohttp
stays for TLS, proxies and odd servers (`--http-client aiohttp`, the default for https).

Three layers, each testable on its own:

- `ResponseParser` (`harness.client.http1`; sans-I/O, no clock, no awaits): bytes in, body bytes out. Parses the status
  line and headers, then the body framing: `Transfer-Encoding: chunked` (decoding only the
  chunk framing of what arrived), `Content-Length`, or read-until-close. It says when the
  response is complete and whether the connection may be reused.
- `Exchange`: one request's state. The connection's `data_received` callback calls
  `Exchange.on_data(data)`, which reads the clock *first* (one `perf_counter_ns()` per socket
  read), parses, splits SSE events, decodes them and appends that read's stamp for every
  token-bearing event -- all inside the callback, with no task switch per read. The engine
  awaits one future per request, resolved at `data: [DONE]`, at the end of the response, on
  an error or a timeout. Timeouts (first token, idle, total) are one timer per request, re-armed
  only when it fires, never per read.
- `FastClient`: a keep-alive pool of connections per (host, port), LIFO. A connection goes back
  to the pool only after its response is complete (the chunked terminator read) and the server
  did not say `Connection: close`. A reused connection that the server had closed while idle
  (EOF before any response byte) is retried once on a fresh connection, as urllib3 does.

Everything a request can fail with ends as an `ErrorKind` set on the Exchange, mapped by
`harness.client.transport.classify_exception` (the one mapping, shared with the aiohttp path).
`harness.client.transport_fast` puts this client behind the engine's Transport seam.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import cast
from urllib.parse import urlsplit

from harness.client.embeddings import answer_bound_detail
from harness.client.http1 import MAX_CHUNK_LINE_BYTES, MAX_HEAD_BYTES, ResponseParser  # noqa: F401 - re-exported
from harness.client.keepalive import readable_now, transport_fd
from harness.client.openai import StreamDecoder, StreamError
from harness.client.retry import parse_retry_after
from harness.client.sse import SSESplitter
from harness.client.transport import (
    ERROR_BODY_LIMIT,
    UNBOUNDED,
    HTTPProtocolError,
    TokenCounter,
    bound_detail,
    classify_exception,
    cut_token_events,
    encoding_detail,
    is_encoded,
    status_detail,
    stream_cut_detail,
    timeout_details,
)
from harness.record.records import ErrorKind

PRECONNECT_PARALLEL = 256  # connects in flight at once while warming the pool (SYN backlog)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: the connection key and the request target."""

    host: str
    port: int
    path: str  # request target, e.g. /v1/chat/completions
    host_header: str  # host[:port] as sent in Host:

    @classmethod
    def of(cls, url: str) -> Origin:
        """Raises ValueError for anything but an http:// URL with a host."""
        p = urlsplit(url)
        if p.scheme != "http" or not p.hostname:
            raise ValueError(f"the fast HTTP client takes http:// URLs only, got {url!r}")
        port = p.port or 80
        host = p.hostname
        host_header = p.netloc.rpartition("@")[2]
        return cls(host, port, p.path or "/", host_header)


def request_head_prefix(origin: Origin, headers: dict[str, str]) -> bytes:
    """The request line and fixed headers; per request only X-Request-Id and Content-Length follow.

    Raises ValueError for a header name or value holding CR or LF (header injection).
    """
    lines = [f"POST {origin.path} HTTP/1.1", f"Host: {origin.host_header}"]
    for k, v in headers.items():
        if any(c in k or c in v for c in "\r\n") or ":" in k:
            raise ValueError(f"header {k!r} holds a line break or colon")
        if k.lower() in ("host", "content-length", "transfer-encoding", "connection"):
            continue
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


class ConnectFailed(StreamError):
    """The TCP connection could not be made (kind CONNECT or TIMEOUT_CONNECT)."""


class Exchange:
    """One request's state, fed by its connection's callbacks. The engine reads the fields
    after `fut` resolves: `error`/`detail` (None: success), `status`, `headers_ns`,
    `chunk_ns`/`chunk_tokens`, `end_ns` and the decoder `dec`. All times are ns since `t0`."""

    __slots__ = (
        "t0",
        "parser",
        "splitter",
        "dec",
        "chunk_ns",
        "chunk_tokens",
        "counters",
        "sent_ns",
        "headers_ns",
        "status",
        "error",
        "detail",
        "retry_after_s",
        "end_ns",
        "fut",
        "conn",
        "reused",
        "stale",
        "finished",
        "last_read_ns",
        "received_bytes",
        "max_body_bytes",
        "max_token_events",
        "events_cut",
        "_err_body",
        "_err_len",
        "_timer",
        "_first_deadline_ns",
        "_idle_ns",
        "_total_deadline_ns",
        "_timeouts_text",
    )

    def __init__(
        self,
        t0: int,
        counters: TokenCounter,
        fut: asyncio.Future[None],
        decoder: type[StreamDecoder] = StreamDecoder,
    ) -> None:
        self.t0 = t0
        self.counters = counters
        self.fut = fut
        self.parser = ResponseParser()
        self.splitter = SSESplitter()
        self.dec = decoder()
        self.chunk_ns: array[int] = array("q")
        self.chunk_tokens: array[int] = array("q")
        self.sent_ns: int | None = None  # stamped right before the request's one write
        self.headers_ns: int | None = None
        self.status: int | None = None
        self.error: ErrorKind | None = None
        self.detail = ""
        self.retry_after_s: float | None = None  # the server's Retry-After (retry-after-ms)
        self.end_ns = 0
        self.conn: _Conn | None = None
        self.reused = False
        self.stale = False
        self.finished = False
        self.last_read_ns = 0
        self.received_bytes = 0  # response body bytes
        self.max_body_bytes = UNBOUNDED  # the stream is ended past this (the engine's bound)
        self.max_token_events = UNBOUNDED  # ... and past this many token events
        self.events_cut = False
        self._err_body: list[bytes] = []
        self._err_len = 0
        self._timer: asyncio.TimerHandle | None = None
        self._first_deadline_ns = self._idle_ns = self._total_deadline_ns = 0
        self._timeouts_text = ("", "", "")

    # -- the hot path: one call per socket read --------------------------------------------

    def on_data(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        if self.finished:
            self._after_finish(data)
            return
        self.last_read_ns = now
        stamp = now - self.t0
        parser = self.parser
        try:
            if parser.head_done:
                body = parser.feed(data)
            else:
                body = parser.feed(data)
                if not parser.head_done:
                    return
                self.headers_ns = stamp
                self.status = parser.status
                if parser.status != 200:
                    self.error = ErrorKind.HTTP_STATUS
                    self.retry_after_s = parse_retry_after(
                        parser.headers.get("retry-after"),
                        parser.headers.get("retry-after-ms"),
                        time.time(),
                    )
                elif "content-encoding" in parser.headers and is_encoded(
                    parser.headers["content-encoding"]
                ):
                    self._fail(
                        ErrorKind.MALFORMED,
                        encoding_detail(parser.headers["content-encoding"]),
                        stamp,
                    )
                    return
            if self.error is None:
                dec = self.dec
                if dec.whole_body:  # embeddings: one JSON document, decoded when complete
                    if body:
                        self.received_bytes += len(body)
                        if self.received_bytes > self.max_body_bytes:
                            bound = self.max_body_bytes
                            self._fail(ErrorKind.BODY_TOO_LARGE, answer_bound_detail(bound), stamp)
                            return
                        dec.feed_body(body)
                    if parser.complete:
                        dec.end_body()
                        self._finish(stamp)
                        self._release()
                    return
                if body:
                    received = self.received_bytes = self.received_bytes + len(body)
                    region = self.splitter.feed_region(body)
                    if region:
                        tokens = self.chunk_tokens
                        before = len(tokens)
                        try:
                            dec.on_region(region, tokens)  # the read's events at once
                        finally:
                            added = len(tokens) - before
                            if added == 1:  # a paced stream's read: one event
                                self.chunk_ns.append(stamp)
                                self.counters.output_tokens += tokens[before]
                            elif added:
                                self.chunk_ns.extend(repeat(stamp, added))
                                self.counters.output_tokens += sum(tokens[before:])
                        if added and len(tokens) > self.max_token_events:
                            self.events_cut = cut_token_events(
                                self.chunk_ns, tokens, self.max_token_events, self.counters
                            )
                            self._finish(stamp)
                            self._drop_conn()
                            return
                    if dec.done:
                        self._finish(stamp)
                        if parser.complete:
                            self._release()
                        return
                    if received > self.max_body_bytes:
                        self._fail(
                            ErrorKind.BODY_TOO_LARGE, bound_detail(self.max_body_bytes), stamp
                        )
                        return
                if parser.complete:
                    self._fail(
                        ErrorKind.STREAM_CUT,
                        stream_cut_detail(bool(self.splitter.close())),
                        stamp,
                        keep=True,
                    )
            else:
                if body and self._err_len < ERROR_BODY_LIMIT:
                    self._err_body.append(body)
                    self._err_len += len(body)
                if parser.complete or self._err_len >= ERROR_BODY_LIMIT:
                    self._fail(
                        ErrorKind.HTTP_STATUS, self._status_detail(), stamp, keep=parser.complete
                    )
        except Exception as exc:  # noqa: BLE001 - in a protocol callback nothing may escape:
            # mapped in one place (StreamError, SSEError, framing; anything else INTERNAL)
            self._fail(*classify_exception(exc), stamp)

    def _status_detail(self) -> str:
        raw = b"".join(self._err_body)[:ERROR_BODY_LIMIT]
        self.received_bytes = len(raw)
        return status_detail(self.status or 0, raw, self.parser.headers.get("location"))

    def _after_finish(self, data: bytes) -> None:
        """After [DONE]: follow the framing to its end so the connection can be reused (bytes
        past the end: `_release` closes it and counts them)."""
        try:
            self.parser.feed(data)
        except HTTPProtocolError:
            self._drop_conn()
            return
        if self.parser.complete and self.conn is not None:
            self._release()

    def on_eof(self) -> None:
        """The connection closed (by either side)."""
        self.conn = None
        if self.finished:
            return
        stamp = time.perf_counter_ns() - self.t0
        if self.parser.eof() and self.parser.head_done:
            # A read-until-close body ended: the same as a complete response.
            if self.error is None and self.dec.whole_body:
                try:
                    self.dec.end_body()
                except StreamError as exc:
                    self._fail(exc.kind, exc.detail, stamp)
                    return
                self._finish(stamp)
            elif self.error is None:
                self._fail(
                    ErrorKind.STREAM_CUT, stream_cut_detail(bool(self.splitter.close())), stamp
                )
            else:
                self._fail(ErrorKind.HTTP_STATUS, self._status_detail(), stamp)
            return
        if self.reused and self.last_read_ns == 0:
            self.stale = True  # the server closed this idle keep-alive connection: retry once
            self._fail(ErrorKind.STREAM_CUT, "kept-alive connection closed by the server", stamp)
            return
        self._fail(
            ErrorKind.STREAM_CUT,
            "ServerDisconnected: the connection closed before the response ended",
            stamp,
        )

    # -- timeouts: one timer, re-armed when it fires ---------------------------------------

    def arm(
        self,
        loop: asyncio.AbstractEventLoop,
        sent_abs_ns: int,
        first_token_s: float,
        idle_s: float,
        total_s: float,
        details: tuple[str, str, str] | None = None,
    ) -> None:
        """Start the timeouts; `details`: their texts (`timeout_details`), built once per run."""
        self._total_deadline_ns = sent_abs_ns + int(total_s * 1e9)
        self._first_deadline_ns = min(
            sent_abs_ns + int(first_token_s * 1e9), self._total_deadline_ns
        )
        self._idle_ns = int(idle_s * 1e9)
        self._timeouts_text = details or timeout_details(first_token_s, idle_s, total_s)
        # Before the first token the timer also fires every idle_s, so that once tokens flow
        # the idle deadline is watched (a stall is caught at most idle_s late).
        first_due = min(self._first_deadline_ns, sent_abs_ns + self._idle_ns)
        self._timer = loop.call_later(
            (first_due - time.perf_counter_ns()) / 1e9, self._on_timer, loop
        )

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self.finished:
            return
        now = time.perf_counter_ns()
        stamp = now - self.t0
        total = self._total_deadline_ns
        if not self.chunk_ns:
            if now >= self._first_deadline_ns:
                if self._first_deadline_ns < total:
                    self._fail(ErrorKind.TIMEOUT_FIRST_TOKEN, self._timeouts_text[0], stamp)
                else:
                    self._fail(ErrorKind.TIMEOUT_TOTAL, self._timeouts_text[2], stamp)
                return
            due = min(self._first_deadline_ns, now + self._idle_ns)
        else:
            if now >= total:
                self._fail(ErrorKind.TIMEOUT_TOTAL, self._timeouts_text[2], stamp)
                return
            idle_due = self.t0 + self.chunk_ns[-1] + self._idle_ns  # since the last token
            if now >= idle_due:
                self._fail(ErrorKind.TIMEOUT_IDLE, self._timeouts_text[1], stamp)
                return
            due = min(idle_due, total)
        self._timer = loop.call_later((due - now) / 1e9, self._on_timer, loop)

    # -- ending ----------------------------------------------------------------------------

    def _finish(self, stamp: int) -> None:
        self.finished = True
        self.end_ns = stamp
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.fut.done():
            self.fut.set_result(None)

    def _fail(self, kind: ErrorKind, detail: str, stamp: int, keep: bool = False) -> None:
        """End the request as failed; keep=True when the response ended cleanly (reusable)."""
        self.error = kind
        self.detail = detail
        self._finish(stamp)
        if keep and self.parser.complete:
            self._release()
        else:
            self._drop_conn()

    def reset(self, fut: asyncio.Future[None]) -> None:
        """Start over for a retry on a fresh connection: every field as a new Exchange's, with
        the same t0 and counters and the new future `fut`. The decoder's text sink (the engine's
        list for a multi-turn session's answer) is kept, emptied, so the retry's text reaches it."""
        text, bound, events = self.dec.text, self.max_body_bytes, self.max_token_events
        Exchange.__init__(self, self.t0, self.counters, fut, type(self.dec))
        self.max_body_bytes, self.max_token_events = bound, events
        if text is not None:
            text.clear()
            self.dec.text = text

    def abort(self) -> None:
        """The engine gave up on this request (cancelled): close its connection."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.finished = True
        self._drop_conn()

    def _release(self) -> None:
        conn = self.conn
        self.conn = None
        if conn is not None:
            conn.exchange = None
            if self.parser.extra:  # bytes past the end: nobody's (harness.client.keepalive)
                conn.client.stale_connections += 1
                conn.close()
            elif self.parser.keep_alive and not conn.closed:
                conn.client.release(conn)
            else:
                conn.close()

    def _drop_conn(self) -> None:
        conn = self.conn
        self.conn = None
        if conn is not None:
            conn.exchange = None
            conn.close()


# --- connections and the pool ---------------------------------------------------------------


class _Conn(asyncio.Protocol):
    def __init__(self, client: FastClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False
        self.fd = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream connection's transport (create_connection): asyncio.BaseProtocol says Base
        self.transport = cast(asyncio.Transport, transport)
        self.fd = transport_fd(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is not None:
            ex.on_data(data)
        elif not self.closed:  # bytes nobody asked for: this connection cannot be trusted
            self.client.stale_connections += 1
            self.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client.forget(self)
        ex = self.exchange
        self.exchange = None
        if ex is not None:
            ex.on_eof()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


class FastClient:
    """Keep-alive connections to one origin; `send` runs one Exchange to its end."""

    def __init__(self, origin: Origin, connect_timeout_s: float) -> None:
        self.origin = origin
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Conn] = []
        self._open: set[_Conn] = set()
        self.connections_opened = 0
        self.stale_connections = 0  # closed for bytes nobody asked for (keepalive)

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        o = self.origin
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(lambda: _Conn(self), o.host, o.port)
        except TimeoutError:
            raise ConnectFailed(
                ErrorKind.TIMEOUT_CONNECT,
                f"no connection to {o.host}:{o.port} within {self.connect_timeout_s:g}s",
            ) from None
        except OSError as exc:
            raise ConnectFailed(ErrorKind.CONNECT, f"{type(exc).__name__}: {exc}"[:300]) from None
        self.connections_opened += 1
        self._open.add(conn)
        return conn

    async def send(self, ex: Exchange, wire: bytes, arm: Callable[[Exchange, int], None]) -> None:
        """Write the request (`wire`: request line, headers and body, built before the intended
        time) with one transport.write and wait for `ex` to finish. `ex.sent_ns` is stamped
        right before the write, after any connection set-up (which so counts as send lag, not
        TTFT); `arm(ex, sent_abs_ns)` starts its timeouts.

        Raises ConnectFailed when no connection could be made; every other outcome is on `ex`.
        """
        conn: _Conn | None = None
        while self._idle:
            c = self._idle.pop()
            # readable while idle: bytes not yet delivered (counted and closed when they are)
            # or the server's FIN; never written on
            if not c.closed and not readable_now(c.fd):
                conn = c
                break
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        self._attach(ex, conn, reused)
        transport = conn.transport
        assert transport is not None  # set by connection_made before create_connection returns
        sent_abs = time.perf_counter_ns()
        ex.sent_ns = sent_abs - ex.t0
        transport.write(wire)
        arm(ex, sent_abs)
        await ex.fut
        if ex.stale:
            # Reset and retry once on a fresh connection; stamps stay relative to the same t0.
            ex.reset(asyncio.get_running_loop().create_future())
            conn = await self._connect()
            self._attach(ex, conn, False)
            transport = conn.transport
            assert transport is not None
            sent_abs = time.perf_counter_ns()
            ex.sent_ns = sent_abs - ex.t0
            transport.write(wire)
            arm(ex, sent_abs)
            await ex.fut

    @staticmethod
    def _attach(ex: Exchange, conn: _Conn, reused: bool) -> None:
        ex.conn = conn
        ex.reused = reused
        conn.exchange = ex

    async def preconnect(self, n: int, deadline_ns: int) -> int:
        """Open up to n idle keep-alive connections before the run (at most PRECONNECT_PARALLEL
        at a time, none after `deadline_ns`, perf_counter_ns), so that no measured request pays
        for a TCP handshake or waits behind the server's accept backlog. Returns how many
        opened; connection failures are left for the measured requests to meet."""
        opened = 0
        while opened < n and time.perf_counter_ns() < deadline_ns:
            batch = min(PRECONNECT_PARALLEL, n - opened)
            left_s = (deadline_ns - time.perf_counter_ns()) / 1e9
            tasks = [asyncio.ensure_future(self._connect()) for _ in range(batch)]
            done, pending = await asyncio.wait(tasks, timeout=max(left_s, 0.0))
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
            ok = [t.result() for t in done if not t.cancelled() and t.exception() is None]
            self._idle.extend(ok)
            opened += len(ok)
            if len(ok) < batch:
                break
        return opened

    def release(self, conn: _Conn) -> None:
        self._idle.append(conn)

    def forget(self, conn: _Conn) -> None:
        self._open.discard(conn)

    async def close(self) -> None:
        for c in list(self._open):
            c.close()
        self._idle.clear()
        await asyncio.sleep(0)
