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
- `FastClient` (`harness.client.fastpool`, with `Origin` and the connections): a keep-alive
  pool of connections per (host, port), LIFO. A connection goes back to the pool only after its response is complete (the chunked terminator read) and the server
  did not say `Connection: close`. A reused connection that the server had closed while idle
  (EOF before any response byte) is retried once on a fresh connection, as urllib3 does.

Everything a request can fail with ends as an `ErrorKind` set on the Exchange, mapped by
`harness.client.transport.classify_exception` (the one mapping, shared with the aiohttp path).
`harness.client.transport_fast` puts this client behind the engine's Transport seam.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from itertools import repeat

from harness.client.embeddings import answer_bound_detail
from harness.client.fastpool import (  # noqa: F401 - the pool's names, re-exported
    PRECONNECT_PARALLEL,
    Conn,
    ConnectFailed,
    FastClient,
    Origin,
    request_head_prefix,
)
from harness.client.http1 import MAX_CHUNK_LINE_BYTES, MAX_HEAD_BYTES, ResponseParser  # noqa: F401 - re-exported
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
        "rid",
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
        self.conn: Conn | None = None
        self.reused = False
        self.stale = False
        self.finished = False
        self.last_read_ns = 0
        self.received_bytes = 0  # response body bytes
        self.max_body_bytes = UNBOUNDED  # the stream is ended past this (the engine's bound)
        self.max_token_events = UNBOUNDED  # ... and past this many token events
        self.events_cut = False
        self.rid: tuple[int, int] | None = None  # (seq, attempt), set by the engine
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
                if not parser.head_done or not self._on_head(stamp):
                    return
            if self.error is None:
                dec = self.dec
                if dec.whole_body:  # embeddings: one JSON document, decoded when complete
                    self._on_whole_body(body, stamp)
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
                            self._cut_events(stamp)
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
                self._on_error_body(body, stamp)
        except Exception as exc:  # noqa: BLE001 - in a protocol callback nothing may escape:
            # mapped in one place (StreamError, SSEError, framing; anything else INTERNAL)
            self._fail(*classify_exception(exc), stamp)

    # `on_data`'s branches that run once per response, or never on a good stream, are methods
    # of their own; what runs per read of a good stream stays inline above (a call per read).

    def _on_head(self, stamp: int) -> bool:
        """The response head is in: stamp `headers`, keep the status (and Retry-After). False
        when the exchange failed here (an encoded body: the stream is not read)."""
        parser = self.parser
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
                ErrorKind.MALFORMED, encoding_detail(parser.headers["content-encoding"]), stamp
            )
            return False
        return True

    def _on_whole_body(self, body: bytes, stamp: int) -> None:
        """A read of a whole-body answer (embeddings): one JSON document, decoded when complete."""
        if body:
            self.received_bytes += len(body)
            if self.received_bytes > self.max_body_bytes:
                bound = self.max_body_bytes
                self._fail(ErrorKind.BODY_TOO_LARGE, answer_bound_detail(bound), stamp)
                return
            self.dec.feed_body(body)
        if self.parser.complete:
            self.dec.end_body()
            self._finish(stamp)
            self._release()

    def _cut_events(self, stamp: int) -> None:
        """The stream passed its bound in token events: cut there, finished and flagged."""
        self.events_cut = cut_token_events(
            self.chunk_ns, self.chunk_tokens, self.max_token_events, self.counters
        )
        self._finish(stamp)
        self._drop_conn()

    def _on_error_body(self, body: bytes, stamp: int) -> None:
        """A read of a non-200 answer: its body is kept (up to ERROR_BODY_LIMIT) for the detail."""
        if body and self._err_len < ERROR_BODY_LIMIT:
            self._err_body.append(body)
            self._err_len += len(body)
        if self.parser.complete or self._err_len >= ERROR_BODY_LIMIT:
            self._fail(
                ErrorKind.HTTP_STATUS, self._status_detail(), stamp, keep=self.parser.complete
            )

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
        rid = self.rid
        Exchange.__init__(self, self.t0, self.counters, fut, type(self.dec))
        self.max_body_bytes, self.max_token_events, self.rid = bound, events, rid
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
                conn.client.stray(conn)
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
