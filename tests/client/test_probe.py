"""The unmeasured first request: retried on transient failures, not on the user's mistakes."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from harness.client import probe
from harness.client.probe import probe_target
from harness.config.target import Target
from harness.workload.lengths import Fixed
from harness.workload.scenario import Workload

WORKLOAD = Workload(Fixed(4), Fixed(2))
OK_STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)


async def serve(statuses: list[int]) -> tuple[web.AppRunner, str, list[int]]:
    seen: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        status = statuses[min(len(seen), len(statuses) - 1)]
        seen.append(status)
        if status == 200:
            return web.Response(body=OK_STREAM, content_type="text/event-stream")
        return web.json_response({"error": {"message": f"status {status}"}}, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}", seen


@pytest.mark.parametrize(
    ("statuses", "ok", "tries"),
    [
        ([503, 200], True, 2),  # a server still warming up
        ([429, 500, 200], True, 3),  # rate limit, then a 5xx, then fine
        ([500, 500, 500, 500], False, 3),  # persistently broken: refused after 3 tries
        ([401], False, 1),  # a wrong key is not retried
        ([404], False, 1),  # nor a wrong model or path
    ],
)
def test_probe_retries_only_transient_failures(monkeypatch, statuses, ok, tries):
    monkeypatch.setattr(probe, "PROBE_BACKOFF_S", 0.01)

    async def go():
        runner, url, seen = await serve(statuses)
        try:
            return await probe_target(Target("http", url, "m", "chat"), WORKLOAD, timeout_s=5), seen
        finally:
            await runner.cleanup()

    result, seen = asyncio.run(go())
    assert (result.error is None) is ok
    assert len(seen) == tries
    if ok:
        assert result.per_chunk_usage and result.continuous_usage


def test_interrupts_mean_the_same_everywhere(capsys):
    import signal

    from harness.client.state import Interrupts

    i = Interrupts(grace_s=7, quiet=False)
    assert i.on(signal.SIGTERM) == ("terminated (SIGTERM)", False)
    assert i.on(signal.SIGINT) == ("interrupted (SIGINT)", False)
    assert "in-flight requests get 7s" in capsys.readouterr().err
    assert i.on(signal.SIGINT) == ("interrupted (SIGINT twice)", True)
    assert capsys.readouterr().err == ""
