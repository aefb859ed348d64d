"""Helpers for the simulator's HTTP tests: start a server on 127.0.0.1, read SSE streams."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict

from harness.sim.app import SimServer, start_sim_server
from harness.sim.settings import SimSettings

FAST = {"speedup": 200.0}  # model clock 200x real time: a 6.6 ms step takes 33 us


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro_fn())  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def sim(api_key: str | None = None, **kw: Any) -> AsyncIterator[SimServer]:
    server = await start_sim_server(SimSettings(**{**FAST, **kw}), api_key=api_key)
    try:
        yield server
    finally:
        await server.close()


@dataclass
class Streamed:
    status: int
    headers: Mapping[str, str]
    events: list[bytes] = field(default_factory=list)  # raw `data:` payloads
    error: str | None = None

    @property
    def json_events(self) -> list[dict[str, Any]]:
        return [orjson.loads(e) for e in self.events if e != b"[DONE]"]

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1] == b"[DONE]"


async def stream(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> Streamed:
    """POST and collect SSE `data:` payloads; a cut connection ends it with `error` set."""
    async with session.post(url, json=body, headers=headers) as resp:
        out = Streamed(resp.status, CIMultiDict(resp.headers))
        if resp.status != 200:
            out.events.append(await resp.read())
            return out
        buf = b""
        try:
            async for chunk in resp.content.iter_any():
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    assert event.startswith(b"data: "), event
                    out.events.append(event[len(b"data: ") :])
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientConnectionError,
        ) as e:
            out.error = type(e).__name__
        return out
