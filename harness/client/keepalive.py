"""Kept-alive connections: bytes nobody asked for are never the next request's answer.

HTTP/1.1 pairs answers with requests only by their order on a connection. A server (or a
gateway) that sends a late second response, or pushes one on an idle connection, would hand
that response to whichever request is written on the connection next. The rule, on both
transports: bytes that arrive on an idle kept-alive connection, or after a response's end (in
the same read as the end or later), close that connection and are counted (`stale_connections`,
a client health figure in the result's `accounting`); a request is never written on such a
connection, it goes on another or a fresh one. Before a request is written on a reused
connection, its socket is polled (`readable_now`): bytes the kernel holds but the event loop
has not yet delivered count too.

What cannot be told apart: a late response that arrives after the next request was written
on that connection, and is taken as that request's answer. That request's own answer then
arrives after the taken one's end, as stray bytes. So when stray bytes close a connection, the
answer it carried last is suspect if it was not the connection's first (nothing can overtake
the first answer on a connection): the transport reports its (seq, attempt) (`on_suspect`), the
engine journals a `suspect` line, and the journal's vetting sets that record aside
(harness.record.journal_vet: the result is then not trustworthy). A connection still holding
unread bytes when the run closes it is the same evidence (`unread_bytes`, checked at close).
Stray bytes that arrive after the run closed the connection are never seen.

`StaleCheckingConnector` is the aiohttp pool with this check (its pool hands out idle
connections whose protocol may already hold parsed data); the lean client
(`harness.client.fasthttp`) checks in its own pool. Which request a connection carries is noted
when the pool hands the connection out (`connect`, told by `SENDING`), not when its answer is
read: aiohttp releases a connection while `post` is still returning when the whole answer came
in the read that held its head, and stray bytes in that read close the connection at once; noted
any later, that answer would be lost as the connection's last.
"""

from __future__ import annotations

import contextlib
import fcntl
import select
import socket
import struct
import termios
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

# the (seq, attempt) of the request the running task is about to write: set by the transport
# around `post`, read by `StaleCheckingConnector.connect`
SENDING: ContextVar[tuple[int, int] | None] = ContextVar("harness_sending", default=None)


def readable_now(fd: int) -> bool:
    """Whether a socket has bytes (or an EOF) waiting, without waiting (one poll syscall)."""
    if fd < 0:
        return True
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLPRI)
    with contextlib.suppress(OSError):
        return bool(p.poll(0))
    return True


def unread_bytes(fd: int) -> int:
    """How many bytes a socket holds that nobody has read (FIONREAD: one ioctl; 0 for its FIN,
    or when it cannot be asked)."""
    if fd < 0:
        return 0
    try:
        got = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", got)[0])


def transport_fd(transport: Any) -> int:
    """The file descriptor of an asyncio (or uvloop) transport's socket; -1 when none."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return -1
    try:
        return int(sock.fileno())
    except (OSError, ValueError):
        return -1


def holds_unasked_bytes(proto: ResponseHandler) -> bool:
    """Whether an aiohttp connection that is not in use holds bytes past its last response:
    a parsed message queued, unparsed bytes, or a body still open."""
    return bool(proto.should_close)


def queued_after_end(proto: ResponseHandler) -> bool:
    """Whether an aiohttp connection being released holds bytes past its response: a second
    message parsed and queued, or bytes its parser has not taken (aiohttp then closes it, as
    `should_close` says)."""
    return bool(getattr(proto, "_buffer", None)) or bool(getattr(proto, "_tail", b""))


class StaleCheckingConnector(aiohttp.TCPConnector):
    """aiohttp's TCP pool, where an idle connection with bytes nobody asked for is closed and
    counted (`stale_connections`) instead of being handed to the next request.

    Overrides `TCPConnector._get` (aiohttp 3.10 - 3.14), the one place the pool hands out an
    idle connection; where that method is missing the pool works as aiohttp's own."""

    def __init__(
        self,
        *args: Any,
        on_suspect: Callable[[tuple[int, int]], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.stale_connections = 0
        self.on_suspect = on_suspect  # told (seq, attempt) of an answer stray bytes followed
        # per connection: (requests written on it, the last one's (seq, attempt))
        self._answered: weakref.WeakKeyDictionary[ResponseHandler, tuple[int, Any]] = (
            weakref.WeakKeyDictionary()
        )

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        """A connection (idle or new) for the request `SENDING` names (seq, attempt), noted as
        the one it carries before aiohttp can release it: what it reads next is that answer."""
        conn = await super().connect(req, traces, timeout)
        if (proto := conn.protocol) is not None:
            served, _ = self._answered.get(proto, (0, None))
            self._answered[proto] = (served + 1, SENDING.get())
        return conn

    def _stray(self, proto: ResponseHandler) -> None:
        """Stray bytes on `proto` (counted by the caller): the answer it carried last is
        suspect when it was not its first."""
        served, rid = self._answered.pop(proto, (0, None))
        if served > 1 and rid is not None and self.on_suspect is not None:
            self.on_suspect(rid)

    def check_idle(self) -> None:
        """At the run's end, before the pool closes: an idle connection holding bytes nobody
        read is counted, and its last answer reported, as at reuse."""
        for idle in list(getattr(self, "_conns", {}).values()):
            for proto, *_ in list(idle):
                # bytes parsed or held by aiohttp, or in the kernel (not a FIN: no bytes)
                transport = getattr(proto, "transport", None)
                if queued_after_end(proto) or unread_bytes(transport_fd(transport)) > 0:
                    self.stale_connections += 1
                    self._stray(proto)

    async def _get(self, key: Any, traces: Any) -> Any:
        get = super()._get
        while True:
            conn = await get(key, traces)
            if conn is None:
                return None
            proto = conn.protocol
            if proto is None:
                return conn
            dirty = holds_unasked_bytes(proto)
            if not dirty and not readable_now(transport_fd(proto.transport)):
                return conn
            if dirty:  # a queued response is counted by `_release`, on close
                stray = not queued_after_end(proto)
            else:  # readable but not yet read: data (counted) or the server's FIN (not)
                stray = proto.is_connected() and (
                    _has_data(proto) or unread_bytes(transport_fd(proto.transport)) > 0
                )
            if stray:
                self.stale_connections += 1
                self._stray(proto)
            conn.close()

    def _release(self, key: Any, protocol: ResponseHandler, *, should_close: bool = False) -> None:
        # a response queued behind the one released (read with it): aiohttp closes the
        # connection (`should_close`); it is counted here
        if queued_after_end(protocol):
            self.stale_connections += 1
            self._stray(protocol)
        super()._release(key, protocol, should_close=should_close)


def _has_data(proto: ResponseHandler) -> bool:
    """After a poll said readable: whether it was bytes (not the FIN of a closing server)."""
    sock = proto.transport.get_extra_info("socket") if proto.transport is not None else None
    recv = getattr(sock, "recv", None)
    if recv is None:
        return False
    try:
        return bool(recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except (OSError, ValueError, TypeError, NotImplementedError):
        return False


__all__ = [
    "SENDING",
    "StaleCheckingConnector",
    "holds_unasked_bytes",
    "queued_after_end",
    "readable_now",
    "transport_fd",
    "unread_bytes",
]
