"""Response sizes are bounded: a server streaming an endless line, one giant event, a huge error
body or an endless header cannot exhaust the client's memory; each ends its request with a
clear error class while the run goes on."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from relhelp import journal_of, load, run_inprocess, write_scenario

from harness.client.sse import MAX_PENDING_BYTES

pytestmark = pytest.mark.slow

PIECE = b"x" * 65536
FLOOD_BYTES = 256 * 1024 * 1024  # what a misbehaving server offers per request (if read)
RSS_GROWTH_LIMIT_KB = 96 * 1024  # the client may keep a few capped buffers, not the flood


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})


@contextlib.contextmanager
def bad_server(mode: str) -> Iterator[str]:
    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        if mode == "huge_error":
            resp = web.StreamResponse(status=500, headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            with contextlib.suppress(ConnectionError, RuntimeError):
                for _ in range(FLOOD_BYTES // len(PIECE)):
                    await resp.write(PIECE)
            return resp
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError, RuntimeError):
            if mode == "endless_line":  # `data: xxxx...` and never a newline
                await resp.write(b"data: ")
            elif mode == "giant_event":  # one well-formed event far over the cap
                await resp.write(b'data: {"choices": [{"index": 0, "text": "')
            for _ in range(FLOOD_BYTES // len(PIECE)):
                await resp.write(PIECE)
        return resp

    async def huge_headers(request: web.Request) -> web.StreamResponse:
        await request.read()
        transport = request.transport
        assert transport is not None
        transport.write(b"HTTP/1.1 200 OK\r\nX-Junk: ")
        with contextlib.suppress(ConnectionError, RuntimeError):
            for _ in range(2048):  # 128 MiB of one header line
                if transport.is_closing():
                    break
                transport.write(PIECE)
                await asyncio.sleep(0)
        transport.close()
        return web.StreamResponse()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", huge_headers if mode == "huge_headers" else chat)
    app.router.add_get("/v1/models", _models)
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()

    async def start() -> tuple[web.AppRunner, int]:
        runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=0.2, handler_cancellation=True
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, runner.addresses[0][1]

    runner, port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        th.join(10)
        loop.close()


# (server behaviour, the error class every request must end with, words in its detail)
CASES = [
    ("endless_line", "body_too_large", str(MAX_PENDING_BYTES)),  # SSE line never ends
    ("giant_event", "body_too_large", str(MAX_PENDING_BYTES)),  # one event over the cap
    ("huge_error", "http_500", "HTTP 500"),  # 256 MiB error body
    ("huge_headers", "malformed", "head"),  # endless header line
]


@pytest.mark.parametrize(("mode", "error_class", "words"), CASES, ids=[c[0] for c in CASES])
def test_oversized_responses_are_capped(
    mode: str, error_class: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "r.json"
    scn = write_scenario(tmp_path / "s.toml", rate=4, duration="1s")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with bad_server(mode) as url:
        rc, _ = run_inprocess(monkeypatch, scn, out, url, idle_s=5.0)
    growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    assert rc == 1  # every request failed: the run says so and exits 1, its result complete
    result = load(out)
    assert result["complete"]
    assert result["summary"]["errors"] == {error_class: 4}, result["summary"]["errors"]
    recs = journal_of(out).records
    assert len(recs) == 4
    for r in recs:
        assert words in r.error_detail, r.error_detail
        assert len(r.error_detail) < 1000  # an error body is cut before it becomes a message
    assert growth_kb < RSS_GROWTH_LIMIT_KB, f"max RSS grew {growth_kb // 1024} MiB"
