"""The lean transport: `harness.client.fasthttp` behind the Transport seam (plain http://).

The whole request (request line, headers, body) is one bytes object built ahead of its intended
time; the connection's callback stamps, parses and decodes each read, and the attempt's
coroutine wakes once, at the end. `sent` is stamped right before the one write; when no
connection could be made it stays None and the engine uses the time the attempt began.
"""

from __future__ import annotations

import asyncio
import time

from harness.client.fasthttp import Exchange
from harness.client.fastpool import FastClient, Origin, request_head_prefix
from harness.client.transport import TransportSetup, classify_exception, timeout_details


class FastTransport:
    name = "fast"

    def __init__(self, setup: TransportSetup) -> None:
        target = self.target = setup.target
        self.decoder = setup.decoder
        self.origin = Origin.of(setup.url)
        self.client = FastClient(self.origin, target.timeouts.connect_s, setup.on_suspect)
        self.head_prefix = request_head_prefix(self.origin, setup.headers)
        self.request_id_prefix = setup.request_id_prefix.encode("latin-1", "replace")
        self.counters = setup.counters
        to = target.timeouts
        self._timeouts = (to.first_token_s, to.idle_s, to.total_s)
        self._details = timeout_details(*self._timeouts)

    async def open(self, preconnect: int, deadline_ns: int) -> int:
        """Warm the pool before t0: connection set-up (and the server's accept backlog) then
        lands in no measured request."""
        return await self.client.preconnect(preconnect, deadline_ns)

    @property
    def stale_connections(self) -> int:
        """Connections closed for bytes nobody asked for (harness.client.keepalive)."""
        return self.client.stale_connections

    def prepare(self, seq: int, attempt: int, body: bytes) -> bytes:
        return b"%sX-Request-Id: %s-%d-%d\r\nContent-Length: %d\r\n\r\n%s" % (
            self.head_prefix,
            self.request_id_prefix,
            seq,
            attempt,
            len(body),
            body,
        )

    def new_attempt(self, t0_ns: int) -> Exchange:
        return Exchange(
            t0_ns, self.counters, asyncio.get_running_loop().create_future(), self.decoder
        )

    async def send(self, a: Exchange, request: bytes) -> None:
        loop = asyncio.get_running_loop()
        first_s, idle_s, total_s = self._timeouts
        details = self._details

        def arm(e: Exchange, sent_abs: int) -> None:
            e.arm(loop, sent_abs, first_s, idle_s, total_s, details)

        try:
            await self.client.send(a, request, arm)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped in one place; unmapped ones re-raise
            a.abort()
            a.error, a.detail = classify_exception(exc)
            a.end_ns = time.perf_counter_ns() - a.t0

    def abort(self, a: Exchange) -> None:
        a.abort()

    async def close(self) -> None:
        await self.client.close()


__all__ = ["FastTransport"]
