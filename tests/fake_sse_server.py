"""A tiny OpenAI-shaped SSE server for tests: known TTFT and inter-token gaps, server-side truth.

A script for tests.scripted_server (its own event loop in a thread, on 127.0.0.1), keeping
connections alive and answering in `chunked` transfer coding as an HTTP server would; records,
per X-Request-Id, the perf_counter_ns() at which each token's chunk was written (same clock as
the client in-process).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson

from tests.scripted_server import Part, Request, ScriptedServer, event

PROMPT_TOKENS = 10
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
MODELS = {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
MODELS_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    """`data` as one chunk of the chunked transfer coding."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class FakeSSEServer:
    def __init__(
        self,
        ttft_s: float,
        gap_s: float,
        tokens_per_chunk: int = 1,
        stall_after: int | None = None,
        stall_s: float = 0.0,
    ) -> None:
        self.ttft_s = ttft_s
        self.gap_s = gap_s
        self.tokens_per_chunk = tokens_per_chunk
        self.stall_after = stall_after
        self.stall_s = stall_s
        self.truth: dict[str, list[int]] = {}
        self.received: dict[str, int] = {}
        self.url = ""
        self._server: ScriptedServer | None = None

    def respond(self, i: int, request: Request) -> Iterator[Part]:
        """The answer to request `i`: the model list, or a stream of `max_tokens` tokens."""
        rid = request.headers.get("x-request-id", "none")
        self.received[rid] = time.perf_counter_ns()
        if request.method == "GET":  # /v1/models
            models = orjson.dumps(MODELS)
            yield MODELS_HEAD % len(models) + models
            return
        body = request.json()
        n = int(body.get("max_tokens", 16))
        chat = "messages" in body
        yield STREAM_HEAD
        stamps: list[int] = []
        self.truth[rid] = stamps
        if chat:
            first = {
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 0},
            }
            yield _chunk(event(first))
        start = time.perf_counter()
        done = 0
        k = 0
        while done < n:
            due = start + self.ttft_s + k * self.gap_s
            if self.stall_after is not None and k >= self.stall_after:
                due += self.stall_s
            yield max(due - time.perf_counter(), 0.0)
            m = min(self.tokens_per_chunk, n - done)
            done += m
            k += 1
            text = " tok" * m
            choice = (
                {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            )
            usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": done}
            data = _chunk(event({"choices": [choice], "usage": usage}))
            stamps.append(time.perf_counter_ns())  # just before the bytes go to the socket
            yield data
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": done}
        yield _chunk(event({"choices": [], "usage": usage}))
        yield _chunk(b"data: [DONE]\n\n")
        yield b"0\r\n\r\n"

    def __enter__(self) -> FakeSSEServer:
        self._server = ScriptedServer(self.respond, keep_alive=True)
        self.url = self._server.url
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


__all__ = ["FakeSSEServer"]
