"""Truth server for client benchmarks: OpenAI-shaped SSE, as fast or as paced as asked, and a
log of when it wrote each token.

    python benchmarks/truth_server.py --port 8123 [--coalesce 16] [--itl-ms 20] [--ttft-ms 50]
                                      [--truth-out truth.json]

A raw asyncio.Protocol HTTP/1.1 server on uvloop (no framework: it must never be the slower
side). Every POST to /v1/chat/completions or /v1/completions streams `max_tokens` (or `max_completion_tokens`) tokens as
chat or completion chunks with cumulative `usage` (continuous usage stats), then a usage-only
chunk and `data: [DONE]`, in HTTP chunked encoding on a keep-alive connection. `--coalesce K`
puts K token events in one write; `--itl-ms` paces the writes (0: write as fast as the socket
takes them; the first write still waits `--ttft-ms`). GET /v1/models lists one model.

Truth: with `--truth-out`, for every request (by X-Request-Id, else by "c:" + its prompt text)
the server keeps the
`time.perf_counter_ns()` (CLOCK_MONOTONIC, the clock the harness stamps with, shared by all
processes on a machine) at which the request was fully received and at which each write
started, with the tokens it carried; SIGTERM/SIGINT dump them as JSON:
`{rid: {"received_ns": t, "writes_ns": [...], "tokens": [...]}}`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from typing import Any

import orjson

MODEL = "truth-model"


class Settings:
    def __init__(self, a: argparse.Namespace) -> None:
        self.coalesce = max(1, a.coalesce)
        self.itl_s = a.itl_ms / 1e3
        self.ttft_s = a.ttft_ms / 1e3
        self.log = a.truth_out is not None
        self.truth: dict[str, dict[str, Any]] = {}
        self._cache: dict[tuple[bool, int], list[bytes]] = {}
        self.dups: set[str] = set()
        self._dup_n = 0

    def content_key(self, req: dict[str, Any]) -> str:
        """Key for a request that came without X-Request-Id (GuideLLM sends none): "c:" and
        its prompt text. A prompt seen twice is keyed "dup:..." for both, so the match drops it."""
        if "messages" in req:
            content = req["messages"][-1].get("content", "")
            if isinstance(content, list):
                content = "".join(
                    part.get("text", "") for part in content if isinstance(part, dict)
                )
        else:
            content = req.get("prompt", "")
        key = "c:" + str(content)
        if key in self.truth or key in self.dups:
            self.dups.add(key)
            self.truth.pop(key, None)
            self._dup_n += 1
            return f"dup:{self._dup_n}"
        return key

    def writes(self, chat: bool, n: int) -> list[bytes]:
        """The HTTP-chunked writes of one response body (cached by shape)."""
        key = (chat, n)
        if key not in self._cache:
            events = []
            for i in range(n):
                choice = (
                    {"index": 0, "delta": {"content": " tok"}, "finish_reason": None}
                    if chat
                    else {"index": 0, "text": " tok", "finish_reason": None}
                )
                events.append(
                    b"data: "
                    + orjson.dumps(
                        {
                            "id": "cmpl-1",
                            "object": "chat.completion.chunk",
                            "created": 0,
                            "model": MODEL,
                            "choices": [choice],
                            "usage": {
                                "prompt_tokens": 8,
                                "total_tokens": 9 + i,
                                "completion_tokens": i + 1,
                            },
                        }
                    )
                    + b"\n\n"
                )
            tail = (
                b"data: "
                + orjson.dumps(
                    {
                        "id": "cmpl-1",
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 8,
                            "completion_tokens": n,
                            "total_tokens": 8 + n,
                        },
                    }
                )
                + b"\n\n"
                + b"data: [DONE]\n\n"
            )
            out = []
            k = self.coalesce
            for j in range(0, n, k):
                body = b"".join(events[j : j + k])
                if j + k >= n:
                    body += tail
                out.append(b"%x\r\n%s\r\n" % (len(body), body))
            if not out:
                out.append(b"%x\r\n%s\r\n" % (len(tail), tail))
            out[-1] += b"0\r\n\r\n"
            self._cache[key] = out
        return self._cache[key]


HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


class Conn(asyncio.Protocol):
    def __init__(self, s: Settings) -> None:
        self.s = s
        self.buf = b""
        self.t: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        self.buf += data
        while not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            rid = ""
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                n = name.strip().lower()
                if n == b"content-length":
                    length = int(value)
                elif n == b"x-request-id":
                    rid = value.strip().decode()
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.handle(head.split(b" ", 2), body, rid, now)

    def handle(self, line: list[bytes], body: bytes, rid: str, now: int) -> None:
        assert self.t is not None
        if line[0] == b"GET":
            payload = orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            self.t.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(payload), payload)
            )
            return
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:  # AIPerf sends one empty POST while it starts
            self.t.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        chat = "messages" in req
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        writes = self.s.writes(chat, n)
        rec = None
        if self.s.log:
            rec = {"received_ns": now, "writes_ns": [], "tokens": []}
            self.s.truth[rid or self.s.content_key(req)] = rec
        self.t.write(HEAD)
        self.busy = True
        loop = asyncio.get_running_loop()
        start = loop.time()
        k = self.s.coalesce

        def write(i: int) -> None:
            if self.t is None or self.t.is_closing():
                self.busy = False
                return
            if rec is not None:
                rec["writes_ns"].append(time.perf_counter_ns())
                rec["tokens"].append(min(k, n - i * k) if n else 0)
            self.t.write(writes[i])
            if i + 1 < len(writes):
                due = start + self.s.ttft_s + (i + 1) * self.s.itl_s
                if self.s.itl_s > 0:
                    loop.call_at(due, write, i + 1)
                else:
                    write_all(i + 1)
            else:
                self.busy = False
                if self.buf:
                    self.data_received(b"")

        def write_all(i: int) -> None:
            # Unpaced: hand the rest to the transport at once; TCP flow control paces it.
            for j in range(i, len(writes)):
                if rec is not None:
                    rec["writes_ns"].append(time.perf_counter_ns())
                    rec["tokens"].append(min(k, n - j * k))
                assert self.t is not None
                self.t.write(writes[j])
            self.busy = False
            if self.buf:
                self.data_received(b"")

        if self.s.ttft_s > 0:
            loop.call_at(start + self.s.ttft_s, write, 0)
        else:
            write(0)

    def connection_lost(self, exc: Exception | None) -> None:
        self.t = None


async def serve(a: argparse.Namespace) -> None:
    s = Settings(a)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Conn(s), a.host, a.port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"truth server on http://{a.host}:{server.sockets[0].getsockname()[1]}", flush=True)
    await stop.wait()
    server.close()
    if a.truth_out:
        with open(a.truth_out, "wb") as f:
            f.write(orjson.dumps(s.truth))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--coalesce", type=int, default=1, help="token events per write (default 1)")
    p.add_argument("--itl-ms", type=float, default=0.0, help="gap between writes (0: unpaced)")
    p.add_argument("--ttft-ms", type=float, default=0.0, help="delay before the first write")
    p.add_argument("--truth-out", help="dump per-request write times here on SIGTERM/SIGINT")
    a = p.parse_args()
    try:
        import uvloop

        uvloop.run(serve(a))
    except ImportError:
        asyncio.run(serve(a))


if __name__ == "__main__":
    main()
