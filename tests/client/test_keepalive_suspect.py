"""Stray bytes on a kept-alive connection make the answer it carried last suspect, unless that
answer was the connection's first (harness.client.keepalive, harness.client.fastpool). The
real case, on both clients, is tests/hostile/test_keepalive.py; these hold the pieces."""

from __future__ import annotations

import socket

from harness.client.fastpool import Conn, FastClient, Origin
from harness.client.keepalive import unread_bytes

ORIGIN = Origin.of("http://127.0.0.1:9/v1/chat/completions")


class _Ex:
    """The fields `FastClient._attach` sets and reads on an exchange."""

    def __init__(self, rid: tuple[int, int]) -> None:
        self.rid: tuple[int, int] | None = rid
        self.conn: Conn | None = None
        self.reused = False


def _served(client: FastClient, *rids: tuple[int, int]) -> Conn:
    """A connection (no socket) that carried the exchanges `rids`, in order."""
    conn = Conn(client)
    for rid in rids:
        client._attach(_Ex(rid), conn, True)  # type: ignore[arg-type]
        conn.exchange = None  # its answer ended
    return conn


def test_stray_bytes_after_a_later_answer_name_it_suspect() -> None:
    told: list[tuple[int, int]] = []
    client = FastClient(ORIGIN, 1.0, told.append)
    conn = _served(client, (3, 0), (7, 1))
    conn.data_received(b"HTTP/1.1 200 OK\r\n")  # nobody asked: stray
    assert told == [(7, 1)] and client.stale_connections == 1 and conn.closed


def test_stray_bytes_after_a_connections_first_answer_are_counted_only() -> None:
    told: list[tuple[int, int]] = []
    client = FastClient(ORIGIN, 1.0, told.append)
    conn = _served(client, (3, 0))  # nothing can have overtaken a first answer
    conn.data_received(b"HTTP/1.1 200 OK\r\n")
    assert told == [] and client.stale_connections == 1 and conn.closed


def test_unread_bytes_counts_what_the_kernel_holds_not_a_fin() -> None:
    a, b = socket.socketpair()
    try:
        assert unread_bytes(b.fileno()) == 0
        a.sendall(b"late!")
        assert unread_bytes(b.fileno()) == 5
        b.recv(5)
        a.shutdown(socket.SHUT_WR)  # the FIN: readable, but no bytes
        assert unread_bytes(b.fileno()) == 0
    finally:
        a.close()
        b.close()
    assert unread_bytes(-1) == 0
