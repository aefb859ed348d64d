"""A scripted HTTP/1.1 server on 127.0.0.1 for the reliability tests: each answer is whatever the
test's `respond(i, request)` returns, byte for byte, so a test can send what no well-behaved
server would (wrong JSON shapes, huge counts, redirects, gzip, streams that never end).

It runs on its own event loop in a daemon thread (a run under test has its own loop), answers
one request per connection and closes it (with `keep_alive`, reads the next request on the same
connection: the script's answers must then delimit themselves, `chunked` or Content-Length), and
keeps every request it read (`requests`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


# What `respond` returns: parts written in order; a float is a pause of that many seconds; an
# iterable may be endless (the server writes until the client goes away).
Part = bytes | float
Respond = Callable[[int, Request], Iterable[Part]]


@dataclass
class ScriptedServer:
    respond: Respond
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    keep_alive: bool = False

    def __post_init__(self) -> None:
        self._handlers: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result(10)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)  # type: ignore[arg-type]  # the handler's own task
        try:
            while await self._answer(reader, writer) and self.keep_alive:
                pass
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()
            self._handlers.discard(task)  # type: ignore[arg-type]

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request and write the script's answer; False when the client went away."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        req = Request(method, path, headers, body)
        i = len(self.requests)
        self.requests.append(req)
        for part in self.respond(i, req):
            if writer.is_closing():  # the client went away
                return False
            if isinstance(part, float):
                await asyncio.sleep(part)
            else:
                writer.write(part)
                await writer.drain()
        return True

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for t in list(self._handlers):
                t.cancel()
            if self._handlers:
                await asyncio.wait(set(self._handlers), timeout=5)
            self._server.close_clients()
            await self._server.wait_closed()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@contextlib.contextmanager
def scripted(respond: Respond, keep_alive: bool = False) -> Iterator[ScriptedServer]:
    s = ScriptedServer(respond, keep_alive=keep_alive)
    try:
        yield s
    finally:
        s.close()


def event(obj: Any) -> bytes:
    """One SSE event carrying `obj` as JSON (bytes are sent as they are)."""
    data = obj if isinstance(obj, bytes) else orjson.dumps(obj)
    return b"data: " + data + b"\n\n"


def chunk(text: str, completion_tokens: int | None = None, prompt_tokens: int = 8) -> bytes:
    """A chat chunk carrying `text`, with cumulative usage when `completion_tokens` is given."""
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": text}}]}
    if completion_tokens is not None:
        obj["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return event(obj)


DONE = b"data: [DONE]\n\n"
# A pause a script puts before an event that must reach the client in a read of its own (each
# channel's first event, whose stamp is a TTFT): 20 ms was too short twice, on a loaded 2-core
# machine the client's loop came back late and read two channels' first events in one read.
READ_APART_S = 0.25


def head(status: int = 200, headers: dict[str, str] | None = None, reason: str = "X") -> bytes:
    """A response head for a body delimited by the connection's close."""
    h = {"Content-Type": "text/event-stream", "Connection": "close", **(headers or {})}
    return (
        f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    ).encode("latin-1")


def sse(*events: bytes, headers: dict[str, str] | None = None) -> list[Part]:
    """A whole streamed answer: the head, then the events (close-delimited)."""
    return [head(200, headers), *events]


def good_stream(n: int, usage: bool = True) -> list[Part]:
    """A well-formed answer of n one-token chunks and [DONE]."""
    return sse(*(chunk("tok", k + 1 if usage else None) for k in range(n)), DONE)


def gzipped_stream(n: int) -> list[Part]:
    """A well-formed answer compressed with gzip, as a compressing gateway sends it."""
    body = b"".join(chunk("tok", k + 1) for k in range(n)) + DONE
    return [head(200, {"Content-Encoding": "gzip"}), gzip.compress(body)]


def json_response(status: int, obj: Any, headers: dict[str, str] | None = None) -> list[Part]:
    body = orjson.dumps(obj)
    h = {
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Connection": "close",
        **(headers or {}),
    }
    return [
        (
            f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        ).encode("latin-1")
        + body
    ]


# --- running the engine against it ------------------------------------------------------------

SCENARIO = """
name = "scripted"
seed = 3
[workload]
prompt_tokens = {{ dist = "fixed", value = 16 }}
output_tokens = {{ dist = "fixed", value = {output_tokens} }}
[[phases]]
name = "main"
{phase}
"""


def plan_of(tmp: Path, n: int = 6, output_tokens: int = 8, phase: str | None = None) -> Any:
    """The plan of a one-phase scenario: n requests at 100/s (or the `phase` lines given)."""
    from harness.workload.plan import build_plan
    from harness.workload.scenario import load_scenario

    lines = phase or f'requests = {n}\narrival = {{ process = "constant", rate = 100 }}'
    path = tmp / "s.toml"
    path.write_text(SCENARIO.format(output_tokens=output_tokens, phase=lines))
    scn = load_scenario(str(path), [], None)
    return build_plan(scn), scn


def run_engine(
    url: str,
    tmp: Path,
    http_client: str,
    *,
    n: int = 6,
    output_tokens: int = 8,
    phase: str | None = None,
    headers: dict[str, str] | None = None,
    first_token_s: float = 5.0,
    **cfg: Any,
) -> tuple[list[Any], Any]:
    """Run the engine itself (no probe, no journal) against `url`; (records in the order the
    engine emitted them, the RunOutcome). `cfg`: more EngineConfig fields (retry, ...).
    `first_token_s`: the first-token timeout (and at least the total one), for a test whose
    stream must reach another bound first however slowly a loaded machine reads it."""
    from harness.client.engine import Engine, EngineConfig
    from harness.client.state import Control
    from harness.config.target import Target, Timeouts

    plan, scn = plan_of(tmp, n, output_tokens, phase)
    target = Target(
        "http",
        url,
        "m",
        "chat",
        headers=headers or {},
        timeouts=Timeouts(
            connect_s=2.0,
            first_token_s=first_token_s,
            idle_s=5.0,
            total_s=max(20.0, first_token_s),
        ),
    )
    records: list[Any] = []
    engine = Engine(
        plan,
        EngineConfig(target, scn.workload, http_client=http_client, **cfg),
        records.append,
        Control(),
    )
    outcome = asyncio.run(engine.run())
    return records, outcome
