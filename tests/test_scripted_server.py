"""tests.scripted_server itself: one answer per connection, or several with `keep_alive`."""

from __future__ import annotations

import socket

from tests.scripted_server import json_response, scripted

ASK = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


def _answers(keep_alive: bool) -> bytes:
    """What the server sends for two requests written on one connection."""
    with scripted(lambda i, req: json_response(200, {"i": i}), keep_alive=keep_alive) as srv:
        host, port = srv.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(ASK + ASK)
            got = b""
            while True:
                try:
                    part = s.recv(65536)
                except TimeoutError:
                    break
                if not part:
                    break
                got += part
                if got.count(b'{"i":') == 2:
                    break
    return got


def test_one_answer_per_connection_then_close() -> None:
    # the second request on the connection is never read: one answer, then EOF
    assert _answers(keep_alive=False).count(b'{"i":') == 1


def test_keep_alive_answers_each_request_on_the_connection() -> None:
    # both requests answered in order on the one connection
    got = _answers(keep_alive=True)
    assert got.count(b'{"i":0}') == 1 and got.count(b'{"i":1}') == 1
