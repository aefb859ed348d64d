"""The aiohttp transport: TLS, proxies and odd servers (the default for https:// targets).

One `ClientSession` per run. Each attempt posts the prepared body and headers, stamps `sent`
just before, `headers` when the status line is in, then reads the body with `readany()`: one
clock read per socket read, and every SSE event parsed out of that read gets that stamp (the
read's events are decoded at once, `StreamDecoder.on_region`, as on the lean client). The
first-token, idle and total timeouts are one `asyncio.timeout` rescheduled as tokens arrive.
"""

from __future__ import annotations

import asyncio
import time
from itertools import repeat

import aiohttp
from aiohttp.client_proto import ResponseHandler

from harness.client.embeddings import answer_bound_detail
from harness.client.http1 import SWITCHING_PROTOCOLS
from harness.client.keepalive import SENDING, StaleCheckingConnector
from harness.client.retry import parse_retry_after
from harness.client.sse import SSESplitter
from harness.client.transport import (
    ERROR_BODY_LIMIT,
    AttemptState,
    TransportSetup,
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

READ_BUFSIZE = 1 << 18  # aiohttp read buffer; long streams of big chunks stay unpaused
TIMER_SLACK_S = 1e-3  # a timeout that fired this close to a deadline is that deadline's


class AiohttpTransport:
    name = "aiohttp"

    def __init__(self, setup: TransportSetup, pool_limit: int) -> None:
        target = self.target = setup.target
        self.on_suspect = setup.on_suspect
        self.decoder = setup.decoder
        self.url = setup.url
        self.headers = setup.headers
        self.request_id_prefix = setup.request_id_prefix
        self.counters = setup.counters
        self.pool_limit = pool_limit
        self.session: aiohttp.ClientSession | None = None
        self.connector: StaleCheckingConnector | None = None
        to = target.timeouts
        self._details = timeout_details(to.first_token_s, to.idle_s, to.total_s)

    async def open(self, preconnect: int, deadline_ns: int) -> int:
        connector = self.connector = StaleCheckingConnector(
            limit=self.pool_limit,
            limit_per_host=0,
            ssl=self.target.tls_verify,
            ttl_dns_cache=300,
            enable_cleanup_closed=False,
            on_suspect=self.on_suspect,
        )
        timeout = aiohttp.ClientTimeout(total=None, connect=self.target.timeouts.connect_s)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            read_bufsize=READ_BUFSIZE,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        return 0

    @property
    def stale_connections(self) -> int:
        """Connections closed for bytes nobody asked for (harness.client.keepalive)."""
        return self.connector.stale_connections if self.connector is not None else 0

    def prepare(self, seq: int, attempt: int, body: bytes) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        headers["X-Request-Id"] = f"{self.request_id_prefix}-{seq}-{attempt}"
        return body, headers

    def new_attempt(self, t0_ns: int) -> AttemptState:
        return AttemptState(t0_ns, self.decoder)

    async def send(self, a: AttemptState, request: tuple[bytes, dict[str, str]]) -> None:
        body, headers = request
        session = self.session
        if session is None:
            raise RuntimeError("AiohttpTransport.send before open")
        to = self.target.timeouts
        loop = asyncio.get_running_loop()
        t0 = a.t0
        dec = a.dec
        start_loop = loop.time()
        total_deadline = start_loop + to.total_s
        first_deadline = min(start_loop + to.first_token_s, total_deadline)
        a.sent_ns = time.perf_counter_ns() - t0
        protocol: ResponseHandler | None = None
        sending = SENDING.set(a.rid)  # the pool notes it on the connection it hands out
        try:
            async with asyncio.timeout_at(first_deadline) as cm:
                # A redirect is not followed (it would carry the key and the settings' headers to
                # wherever it points): it is an answer, as on the lean client.
                async with session.post(
                    self.url, data=body, headers=headers, allow_redirects=False
                ) as resp:
                    a.headers_ns = time.perf_counter_ns() - t0
                    if resp.connection is not None:
                        protocol = resp.connection.protocol
                    status = a.status = resp.status
                    if status < 200:  # aiohttp passes over every 1xx but 101: no HTTP follows
                        a.error = ErrorKind.MALFORMED
                        a.detail = f"HTTP framing: {SWITCHING_PROTOCOLS}"
                    elif status != 200:
                        await _read_status(a, resp)
                    elif is_encoded(resp.headers.get("Content-Encoding")):
                        a.error = ErrorKind.MALFORMED
                        a.detail = encoding_detail(resp.headers["Content-Encoding"])
                    elif dec.whole_body:  # embeddings: one JSON document, decoded at its end
                        await _read_whole(a, resp)
                    else:
                        await self._read_stream(a, resp, cm, total_deadline)
        except TimeoutError:
            framing = protocol.exception() if protocol is not None else None
            if framing is not None:
                # aiohttp 3.14 records a framing error found mid-body on the connection's
                # protocol and leaves the body waiting: the timeout found it, it is the cause
                a.error, a.detail = classify_exception(framing)
            else:
                a.error, a.detail = self._timeout(a, loop, first_deadline, total_deadline)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped in one place (unmapped: INTERNAL)
            a.error, a.detail = classify_exception(exc)
        finally:
            SENDING.reset(sending)
        if not (dec.done and dec.whole_body):  # a whole answer ended at its last read
            a.end_ns = time.perf_counter_ns() - t0

    async def _read_stream(
        self,
        a: AttemptState,
        resp: aiohttp.ClientResponse,
        cm: asyncio.Timeout,
        total_deadline: float,
    ) -> None:
        """Read a 200 stream to its end: one stamp per read, the read's events decoded at once
        (as the lean client does); the idle timeout moves on with each read that held a token.
        The loop runs once per socket read: what it needs is in locals."""
        t0 = a.t0
        counters = self.counters
        dec = a.dec
        chunk_ns, chunk_tokens = a.chunk_ns, a.chunk_tokens
        loop = asyncio.get_running_loop()
        splitter = SSESplitter()
        feed_region = splitter.feed_region
        content = resp.content
        on_region = dec.on_region
        idle = self.target.timeouts.idle_s
        bound = a.max_body_bytes
        while True:
            data = await content.readany()
            stamp = time.perf_counter_ns() - t0
            if not data:
                break
            a.received_bytes += len(data)
            region = feed_region(data)
            added = 0
            if region:  # the read's events at once, as the lean client does
                before = len(chunk_tokens)
                try:
                    on_region(region, chunk_tokens)
                finally:  # the tokens before a bad event keep their stamp
                    added = len(chunk_tokens) - before
                    if added == 1:  # a paced stream's read: one event
                        chunk_ns.append(stamp)
                        counters.output_tokens += chunk_tokens[before]
                    elif added:
                        chunk_ns.extend(repeat(stamp, added))
                        counters.output_tokens += sum(chunk_tokens[before:])
            if len(chunk_tokens) > a.max_token_events:
                a.events_cut = cut_token_events(
                    chunk_ns, chunk_tokens, a.max_token_events, counters
                )
                break
            if dec.done:
                break
            if a.received_bytes > bound:
                a.error = ErrorKind.BODY_TOO_LARGE
                a.detail = bound_detail(bound)
                break
            if added:  # idle: since the last token
                cm.reschedule(min(loop.time() + idle, total_deadline))
        if not dec.done and a.error is None and not a.events_cut:
            a.error = ErrorKind.STREAM_CUT
            a.detail = stream_cut_detail(bool(splitter.close()))

    def _timeout(
        self,
        a: AttemptState,
        loop: asyncio.AbstractEventLoop,
        first_deadline: float,
        total_deadline: float,
    ) -> tuple[ErrorKind, str]:
        """Which deadline a timeout was: the first token's, the total's, else the idle one."""
        first, idle_text, total = self._details
        if (
            not a.chunk_ns
            and loop.time() >= first_deadline - TIMER_SLACK_S
            and first_deadline < total_deadline
        ):
            return ErrorKind.TIMEOUT_FIRST_TOKEN, first
        if loop.time() >= total_deadline - TIMER_SLACK_S:
            return ErrorKind.TIMEOUT_TOTAL, total
        return ErrorKind.TIMEOUT_IDLE, idle_text

    def abort(self, a: AttemptState) -> None:
        """Nothing to do: leaving the `async with` on cancellation released the connection."""

    async def close(self) -> None:
        if self.connector is not None:
            self.connector.check_idle()  # bytes nobody read, on connections closed now
        if self.session is not None:
            await self.session.close()


async def _read_status(a: AttemptState, resp: aiohttp.ClientResponse) -> None:
    """A non-200 answer: its body's start (ERROR_BODY_LIMIT) for the detail, and Retry-After."""
    a.error = ErrorKind.HTTP_STATUS
    raw = await resp.content.read(ERROR_BODY_LIMIT)
    a.received_bytes = len(raw)
    a.detail = status_detail(a.status or 0, raw, resp.headers.get("Location"))
    a.retry_after_s = parse_retry_after(
        resp.headers.get("Retry-After"),
        resp.headers.get("retry-after-ms"),
        time.time(),
    )


async def _read_whole(a: AttemptState, resp: aiohttp.ClientResponse) -> None:
    """A whole-body answer (embeddings): read to its end within the bound, decoded at its end
    (`end_ns`: its last read)."""
    dec = a.dec
    content = resp.content
    bound = a.max_body_bytes
    stamp = a.sent_ns or 0
    while True:
        data = await content.readany()
        if not data:
            break
        stamp = time.perf_counter_ns() - a.t0
        a.received_bytes += len(data)
        if a.received_bytes > bound:
            a.error = ErrorKind.BODY_TOO_LARGE
            a.detail = answer_bound_detail(bound)
            break
        dec.feed_body(data)
    if a.error is None:
        dec.end_body()
        a.end_ns = stamp


__all__ = ["READ_BUFSIZE", "AiohttpTransport"]
