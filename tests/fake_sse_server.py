"""A tiny OpenAI-shaped SSE server for tests: known TTFT and inter-token gaps, server-side truth.

Runs in a thread with its own event loop on 127.0.0.1; records, per X-Request-Id, the
perf_counter_ns() at which each token's chunk was written (same clock as the client in-process).
"""

from __future__ import annotations

import asyncio
import threading
import time

import orjson
from aiohttp import web


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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._started = threading.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rid = request.headers.get("X-Request-Id", "none")
        self.received[rid] = time.perf_counter_ns()
        body = await request.json()
        n = int(body.get("max_tokens", 16))
        chat = "messages" in body
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        stamps: list[int] = []
        self.truth[rid] = stamps
        prompt_tokens = 10
        if chat:
            await resp.write(
                b"data: "
                + orjson.dumps(
                    {
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 0},
                    }
                )
                + b"\n\n"
            )
        start = time.perf_counter()
        done = 0
        k = 0
        while done < n:
            due = start + self.ttft_s + k * self.gap_s
            if self.stall_after is not None and k >= self.stall_after:
                due += self.stall_s
            await asyncio.sleep(max(due - time.perf_counter(), 0))
            m = min(self.tokens_per_chunk, n - done)
            done += m
            k += 1
            text = " tok" * m
            choice = (
                {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            )
            chunk = {
                "choices": [choice],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": done},
            }
            data = b"data: " + orjson.dumps(chunk) + b"\n\n"
            stamps.append(time.perf_counter_ns())  # just before the bytes go to the socket
            await resp.write(data)
        await resp.write(
            b"data: "
            + orjson.dumps(
                {
                    "choices": [],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": done},
                }
            )
            + b"\n\n"
        )
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
        )

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_post("/v1/completions", self.handle)
        app.router.add_get("/v1/models", self.models)
        self._runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._started.set()
        loop.run_forever()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def __enter__(self) -> FakeSSEServer:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
