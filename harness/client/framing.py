"""Where an answer ends, one rule for the run and the requests made before it (probe, `check`).

The run's transports (`harness.client.fasthttp` with `harness.client.http1`, and aiohttp) end a
streamed answer at its terminal event -- `data: [DONE]`, or a Responses API terminal event --
whatever its HTTP framing says is still to come: a `Content-Length` longer than the body is not
waited for (the connection is then not reused). `read_answer` reads an answer the same way for
the probe and `check`, so that neither waits on framing a run never waits on. The rest of the
rule is the HTTP parser's, and aiohttp's agrees: every interim 1xx answer but `101 Switching
Protocols` is passed over, a 101 is a framing error at once (no HTTP answer follows it;
`switching_detail`), and a response with both `Transfer-Encoding` and `Content-Length` is refused
(`harness.client.http1.BOTH_LENGTHS`).
"""

from __future__ import annotations

import aiohttp
import orjson

from harness.client.http1 import SWITCHING_PROTOCOLS
from harness.client.responses import TERMINAL
from harness.client.sse import SSEError, SSESplitter

ANSWER_LIMIT = 1024 * 1024  # bytes of an answer read (a 2-token answer is well under 4 KiB)
_ENDS = frozenset((*TERMINAL, "response.failed", "error"))


def is_terminal_event(data: bytes) -> bool:
    """Whether an SSE event's data ends a stream: `[DONE]`, or a Responses API terminal event
    (`response.completed` / `.incomplete` / `.failed`, `error`)."""
    if data == b"[DONE]":
        return True
    if b'"type"' not in data:
        return False
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and obj.get("type") in _ENDS


def switching_detail(status: int) -> str | None:
    """The framing error of an answer aiohttp hands over with a 1xx status (only 101 is)."""
    return f"HTTP framing: {SWITCHING_PROTOCOLS}" if 100 <= status < 200 else None


async def read_answer(resp: aiohttp.ClientResponse, limit: int = ANSWER_LIMIT) -> bytes:
    """The body of `resp`, at most `limit` bytes; a 200 event stream up to the read that held
    its terminal event (the run's rule: framing past it is not waited for); nothing of a 1xx."""
    if resp.status < 200:
        return b""
    stream = resp.status == 200 and resp.content_type == "text/event-stream"
    splitter = SSESplitter(max_pending_bytes=limit) if stream else None
    parts: list[bytes] = []
    n = 0
    while n < limit:
        data = await resp.content.read(limit - n) if splitter is None else await _any(resp)
        if not data:
            break
        parts.append(data[: limit - n])
        n += len(data)
        if splitter is not None:
            try:
                events = splitter.feed(data)
            except SSEError:
                break  # the caller's decoder refuses what was read
            if any(is_terminal_event(e.data) for e in events):
                break
    return b"".join(parts)


async def _any(resp: aiohttp.ClientResponse) -> bytes:
    return await resp.content.readany()


__all__ = ["ANSWER_LIMIT", "is_terminal_event", "read_answer", "switching_detail"]
