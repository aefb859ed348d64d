"""The lean client's connections: where requests go (`Origin`), the fixed request head, and a
keep-alive pool per origin (`FastClient`) whose connections (`Conn`, an asyncio.Protocol) hand
every socket read to the Exchange they serve (harness.client.fasthttp: one request's state).

A connection goes back to the pool only after its response is complete and the server did not
say `Connection: close`; one that is readable while idle (bytes nobody asked for, or the
server's FIN) is never written on (harness.client.keepalive). A reused connection that the
server had closed while idle is retried once on a fresh one (`FastClient.send`). Each connection
knows the request whose answer it carried last (`Conn.last_id`): when stray bytes follow that
answer and it was not the connection's first, that answer is reported suspect (`on_suspect`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast
from urllib.parse import urlsplit

from harness.client.keepalive import readable_now, transport_fd, unread_bytes
from harness.client.server_text import StreamError
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


class PooledExchange(Protocol):
    """What a connection and the pool need of the exchange they serve (fasthttp.Exchange)."""

    t0: int
    sent_ns: int | None
    fut: asyncio.Future[None]
    stale: bool
    conn: Conn | None
    reused: bool
    rid: tuple[int, int] | None

    def on_data(self, data: bytes) -> None: ...
    def on_eof(self) -> None: ...
    def reset(self, fut: asyncio.Future[None]) -> None: ...


E = TypeVar("E", bound=PooledExchange)


class Conn(asyncio.Protocol):
    def __init__(self, client: FastClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.exchange: PooledExchange | None = None
        self.closed = False
        self.fd = -1
        self.served = 0  # requests written on this connection
        self.last_id: tuple[int, int] | None = None  # (seq, attempt) of the last one

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
            self.client.stray(self)

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

    def __init__(
        self,
        origin: Origin,
        connect_timeout_s: float,
        on_suspect: Callable[[tuple[int, int]], None] | None = None,
    ) -> None:
        self.origin = origin
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[Conn] = []
        self._open: set[Conn] = set()
        self.connections_opened = 0
        self.stale_connections = 0  # closed for bytes nobody asked for (keepalive)
        self.on_suspect = on_suspect  # told (seq, attempt) of an answer stray bytes followed

    def stray(self, conn: Conn) -> None:
        """Bytes nobody asked for on `conn`: close it, count it, and report the answer it carried
        last as suspect when that was not its first (an earlier response may have overtaken
        it: harness.client.keepalive)."""
        self.stale_connections += 1
        conn.close()
        if conn.served > 1 and conn.last_id is not None and self.on_suspect is not None:
            self.on_suspect(conn.last_id)

    async def _connect(self) -> Conn:
        loop = asyncio.get_running_loop()
        o = self.origin
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(lambda: Conn(self), o.host, o.port)
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

    async def send(self, ex: E, wire: bytes, arm: Callable[[E, int], None]) -> None:
        """Write the request (`wire`: request line, headers and body, built before the intended
        time) with one transport.write and wait for `ex` to finish. `ex.sent_ns` is stamped
        right before the write, after any connection set-up (which so counts as send lag, not
        TTFT); `arm(ex, sent_abs_ns)` starts its timeouts.

        Raises ConnectFailed when no connection could be made; every other outcome is on `ex`.
        """
        conn: Conn | None = None
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
    def _attach(ex: PooledExchange, conn: Conn, reused: bool) -> None:
        ex.conn = conn
        ex.reused = reused
        conn.exchange = ex
        conn.served += 1
        conn.last_id = ex.rid

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

    def release(self, conn: Conn) -> None:
        self._idle.append(conn)

    def forget(self, conn: Conn) -> None:
        self._open.discard(conn)

    async def close(self) -> None:
        for c in list(self._open):
            if c.exchange is None and not c.closed and unread_bytes(c.fd) > 0:
                self.stray(c)  # bytes the run never read: the same evidence, found at close
            c.close()
        self._idle.clear()
        await asyncio.sleep(0)
