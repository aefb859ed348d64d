"""Retries: Retry-After as seconds, milliseconds or an HTTP date; exponential backoff with jitter
up to `[retry] max_wait` without one; both HTTP stacks; the waits counted apart in the result."""

from __future__ import annotations

import asyncio
import threading
from email.utils import formatdate
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from harness.client.retry import (
    BACKOFF,
    RETRY_AFTER,
    backoff_s,
    jitter_u,
    parse_retry_after,
    retry_wait_s,
)
from harness.orchestrate import run as runner
from harness.record.journal import read_journal

NOW = 1_800_000_000.0  # a wall-clock reading for the HTTP-date cases


@pytest.mark.parametrize(
    ("value", "value_ms", "want"),
    [
        ("3", None, 3.0),  # delay-seconds
        (" 1.5 ", None, 1.5),  # fractional, as some gateways send
        ("0", None, 0.0),
        (formatdate(NOW + 7, usegmt=True), None, 7.0),  # an HTTP date 7 s ahead
        (formatdate(NOW - 30, usegmt=True), None, 0.0),  # a date in the past: go now
        ("2", "250", 0.25),  # OpenAI's retry-after-ms wins
        ("2", "soon", 2.0),  # ... unless unreadable
        ("-4", None, None),  # negative: ignored
        ("tomorrow", None, None),  # not a number, not a date
        ("Wed, 21 Oct 2015 07:28:00", None, None),  # a date without its GMT zone
        (None, None, None),  # no header
    ],
)
def test_parse_retry_after(value: str | None, value_ms: str | None, want: float | None) -> None:
    got = parse_retry_after(value, value_ms, NOW)
    assert got == (pytest.approx(want) if want is not None else None)


def test_backoff_doubles_with_equal_jitter_up_to_the_cap() -> None:
    # base 0.5 s: retry n waits in [d/2, d] with d = 0.5, 1, 2, 4, ... capped at 3
    for n, d in enumerate([0.5, 1.0, 2.0, 3.0, 3.0]):
        assert backoff_s(n, 0.5, 3.0, 0.0) == d / 2
        assert backoff_s(n, 0.5, 3.0, 1.0) == d
    assert backoff_s(10_000, 0.5, 3.0, 0.5) == 2.25  # no overflow on absurd attempt counts
    us = [jitter_u(7, seq, 0) for seq in range(200)]
    assert us == [jitter_u(7, seq, 0) for seq in range(200)]  # the same seed waits the same
    assert 0.4 < sum(us) / len(us) < 0.6 and min(us) >= 0 and max(us) < 1
    assert retry_wait_s(99.0, 0, 0.5, 30.0, 0.3) == (30.0, RETRY_AFTER)  # capped
    assert retry_wait_s(None, 1, 0.5, 30.0, 0.0) == (0.5, BACKOFF)


# ---- end to end: a server that refuses, then answers --------------------------------------

SSE = (
    b'data: {"choices":[{"index":0,"delta":{"content":" x"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\n'
    b"data: [DONE]\n\n"
)


class Refuser:
    """Answers each request's first `refusals` attempts with `status` (and a Retry-After made
    by `retry_after()`, or none), then streams a one-token answer."""

    def __init__(self, status: int, refusals: int, retry_after=None) -> None:  # noqa: ANN001
        self.status, self.refusals, self.retry_after = status, refusals, retry_after
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> str:
        async def chat(request: web.Request) -> web.StreamResponse:
            attempt = int(request.headers["X-Request-Id"].rsplit("-", 1)[1])
            if attempt < self.refusals:
                headers = {"Retry-After": self.retry_after()} if self.retry_after else {}
                return web.json_response(
                    {"error": {"message": f"busy (attempt {attempt})"}},
                    status=self.status,
                    headers=headers,
                )
            return web.Response(body=SSE, content_type="text/event-stream")

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _scenario(tmp: Path, retry: str) -> Path:
    p = tmp / "s.toml"
    p.write_text(
        'name = "retry"\nseed = 3\n[workload]\nprompt_tokens = { dist = "fixed", value = 8 }\n'
        'output_tokens = { dist = "fixed", value = 1 }\n[[phases]]\nname = "main"\nrequests = 4\n'
        f'arrival = {{ process = "constant", rate = 20.0 }}\n[retry]\n{retry}\n'
    )
    return p


def _run(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, server: Refuser, retry: str, client: str
) -> dict:
    monkeypatch.chdir(tmp)
    out = tmp / "r.json"
    rc = runner.run_command(
        runner.RunArgs(
            scenario=str(_scenario(tmp, retry)),
            target=server.url,
            model="m",
            out=str(out),
            quiet=True,
            probe=False,
            http_client=client,
        )
    )
    assert rc == 0
    return orjson.loads(out.read_bytes())


def _gaps_s(tmp: Path) -> dict[int, list[float]]:
    """Per request: seconds from each attempt's end to the next attempt's send."""
    recs = sorted(read_journal(tmp / "r.journal.jsonl").records, key=lambda r: (r.seq, r.attempt))
    out: dict[int, list[float]] = {}
    for a, b in zip(recs, recs[1:], strict=False):
        if a.seq == b.seq:
            out.setdefault(a.seq, []).append((b.sent_ns - a.end_ns) / 1e9)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("client", ["fast", "aiohttp"])
def test_no_retry_after_backs_off_exponentially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    server = Refuser(503, refusals=2)
    try:
        r = _run(
            tmp_path,
            monkeypatch,
            server,
            'on = ["503"]\nmax = 3\nbackoff = "200ms"\nmax_wait = "5s"',
            client,
        )
    finally:
        server.close()
    req = r["summary"]["requests"]
    assert (req["completed"], req["retried_attempts"]) == (4, 8)
    assert (req["retried_with_backoff"], req["retried_with_retry_after"]) == (8, 0)
    gaps = _gaps_s(tmp_path)
    assert len(gaps) == 4
    for first, second in gaps.values():  # at least half of 0.2 s, then of 0.4 s (equal jitter)
        assert first >= 0.1 and second >= 0.2
    assert r["scenario"]["retry"]["backoff"] == "200ms"


@pytest.mark.slow
@pytest.mark.parametrize("client", ["fast", "aiohttp"])
def test_retry_after_as_an_http_date_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    import time

    server = Refuser(429, refusals=1, retry_after=lambda: formatdate(time.time() + 2, usegmt=True))
    try:
        r = _run(tmp_path, monkeypatch, server, 'on = ["429"]\nmax = 2', client)
    finally:
        server.close()
    req = r["summary"]["requests"]
    assert (req["completed"], req["retried_with_retry_after"], req["retried_with_backoff"]) == (
        4,
        4,
        0,
    )
    # a date has whole seconds: "2 s from now" is at least 1 s away
    assert all(g[0] >= 0.95 for g in _gaps_s(tmp_path).values())
    assert sum(r["timeseries"]["http_429"]) == 4
    assert "(4 after the server's Retry-After)" in runner.render_text(r)
