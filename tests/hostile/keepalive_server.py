"""Hostile servers that misuse kept-alive connections: responses nobody asked for.

`KeepAliveServer(behaviour)` is tests/hostile/server.py's server with every chat request answered
by one of these behaviours (a server per behaviour, so that connections are never shared):

- `late`: a well-formed answer (MAX_TOKENS token events), then LATE_S later a second complete
  response on the same connection (one token event), if the connection is still idle then (no
  next request read or waiting: on a starved machine the next request can come first, and a
  late response after it is the overtaking case test_keepalive.py tests on its own);
- `trailing`: the answer and a second complete response in one write (the client reads both at
  once: bytes after the response's end in the same read);
- `push`: a connection that has been idle PUSH_AFTER_S (just opened, or answered and nothing
  asked since) gets an unasked complete response (one token event), then answers as usual.

The unasked responses carry one token (usage `completion_tokens` 1) where an answer carries
MAX_TOKENS: a record with one token took another response as its answer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from typing import Any

from harness.client.keepalive import unread_bytes

HERE = Path(__file__).resolve().parent


def _server_module() -> Any:
    name = "hostile_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


hs = _server_module()

LATE_S = 0.03  # `late`: the second response follows the first by this
PUSH_AFTER_S = 0.03  # `push`: an idle connection gets an unasked response after this
BEHAVIOURS = ("late", "trailing", "push")


def unasked(req: Any) -> bytes:
    """A complete chunked 200 stream of one token event and [DONE]: nobody's answer."""
    payload = hs.chunk_json(req, 1, content="unasked")
    body = b"".join(
        b"%x\r\n%s\r\n" % (len(e), e) for e in (b"data: " + payload + b"\n\n", b"data: [DONE]\n\n")
    )
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return head + body + b"0\r\n\r\n"


def answer(req: Any) -> bytes:
    """The well-formed answer, as one byte string (chunked, [DONE], the terminator)."""
    events = [b"data: " + e + b"\n\n" for e in hs.good_events(req)] + [b"data: [DONE]\n\n"]
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


class _CountingReader:
    """The connection's reader, counting request heads read (the pusher's "nothing asked")."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.heads = 0

    async def readuntil(self, sep: bytes) -> bytes:
        data = await self.reader.readuntil(sep)
        self.heads += 1
        return data

    async def readexactly(self, n: int) -> bytes:
        return await self.reader.readexactly(n)

    def idle_since(self, heads: int, writer: asyncio.StreamWriter) -> bool:
        """No request read since `heads`, none waiting unread (in the reader's buffer or in the
        kernel's), and the connection open."""
        if self.heads != heads or getattr(self.reader, "_buffer", b"") or writer.is_closing():
            return False
        sock = writer.get_extra_info("socket")
        return sock is None or unread_bytes(sock.fileno()) == 0


class KeepAliveServer(hs.HostileServer):  # type: ignore[misc, name-defined]
    """The hostile server with every chat request answered by `behaviour`; `pushed` counts the
    unasked responses written (late, trailing and push alike), `after_reuse` those of them
    written on a connection that had answered more than one request (a starved machine makes
    the client reuse one): by the client's rule such an answer is suspect, as an overtaken one
    would be (harness.client.keepalive)."""

    def __init__(self, behaviour: str) -> None:
        super().__init__()
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"behaviour: expected one of {BEHAVIOURS}, got {behaviour!r}")
        self.behaviour = behaviour
        self.pushed = 0
        self.after_reuse = 0
        self._readers: dict[Any, _CountingReader] = {}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counting = _CountingReader(reader)
        self._readers[writer] = counting
        pushers: list[asyncio.Task[None]] = []
        if self.behaviour == "push":
            pushers.append(asyncio.ensure_future(self._push_when_idle(counting, writer)))
        try:
            await super()._serve(counting, writer)
        finally:
            for t in pushers:
                t.cancel()
            self._readers.pop(writer, None)

    async def _push_when_idle(self, reader: _CountingReader, writer: asyncio.StreamWriter) -> None:
        heads = reader.heads
        await asyncio.sleep(PUSH_AFTER_S)
        if reader.idle_since(heads, writer):
            writer.write(unasked(hs.Request("POST", "/", {}, b"")))
            self._count(reader)

    def _count(self, reader: _CountingReader) -> None:
        """An unasked response written on `reader`'s connection."""
        self.pushed += 1
        self.after_reuse += reader.heads > 1

    def _handler(self, mode_name: str, path: str) -> Any:
        if path.startswith("/v1/chat/completions") or path.startswith("/v1/completions"):
            return self._chat
        return super()._handler(mode_name, path)

    async def _chat(self, req: Any, out: Any) -> None:
        if self.behaviour == "trailing":
            await out.raw(answer(req) + unasked(req))
            self.pushed += 1
            return
        await out.raw(answer(req))
        reader = self._readers.get(out.writer)
        if reader is None:
            return
        if self.behaviour == "late":
            heads = reader.heads
            await asyncio.sleep(LATE_S)
            if reader.idle_since(heads, out.writer):
                await out.raw(unasked(req))
                self._count(reader)
        else:  # push: once this connection has been idle a while
            asyncio.ensure_future(self._push_when_idle(reader, out.writer))


__all__ = ["BEHAVIOURS", "LATE_S", "PUSH_AFTER_S", "KeepAliveServer", "answer", "unasked"]
