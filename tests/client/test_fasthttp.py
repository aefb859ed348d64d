"""The lean HTTP/1.1 client: sans-I/O response parsing (whole, byte by byte, split anywhere),
then Exchanges against scripted raw-socket servers on 127.0.0.1 (keep-alive, stale connection
retry, errors, timeouts), then the engine's two HTTP stacks giving the same records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.client.fasthttp import (
    ConnectFailed,
    Exchange,
    FastClient,
    HTTPProtocolError,
    Origin,
    ResponseParser,
    request_head_prefix,
)
from harness.client.transport import choose_http_client
from harness.record.records import ErrorKind


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
EVENTS = [
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n',
    b"data: [DONE]\n\n",
]
RESPONSES = [
    # chunked, one event per chunk, as vLLM writes
    (HEAD_CHUNKED + _chunked(*EVENTS), b"".join(EVENTS), True),
    # chunked with a chunk extension and a trailer
    (HEAD_CHUNKED + b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", b"hello", True),
    # upper-case hex sizes and one chunk holding all events
    (
        HEAD_CHUNKED + b"%X\r\n%s\r\n0\r\n\r\n" % (len(b"".join(EVENTS)), b"".join(EVENTS)),
        b"".join(EVENTS),
        True,
    ),
    # Content-Length body
    (
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 5\r\nRetry-After: 2\r\n\r\nslow!",
        b"slow!",
        True,
    ),
    # Connection: close with a length: complete, not reusable
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", b"ok", False),
    # 204: no body at all
    (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
    # a 100 Continue before the real head
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", b"abc", True),
]


def _parse_all(pieces: list[bytes]) -> tuple[bytes, ResponseParser]:
    p = ResponseParser()
    body = b"".join(p.feed(x) for x in pieces)
    return body, p


@pytest.mark.parametrize(("raw", "body", "keep_alive"), RESPONSES)
def test_parser_whole_and_byte_by_byte(raw: bytes, body: bytes, keep_alive: bool) -> None:
    for pieces in ([raw], [raw[i : i + 1] for i in range(len(raw))]):
        got, p = _parse_all(pieces)
        assert got == body
        assert p.complete
        assert p.keep_alive is keep_alive


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(RESPONSES), st.lists(st.integers(0, 400), max_size=6))
def test_parser_split_anywhere(case: tuple[bytes, bytes, bool], cuts: list[int]) -> None:
    raw, body, _ = case
    idx = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *idx], [*idx, len(raw)], strict=True)]
    got, p = _parse_all(pieces)
    assert got == body and p.complete


def test_parser_bytes_after_the_response_are_not_body() -> None:
    got, p = _parse_all([HEAD_CHUNKED + _chunked(b"x") + b"HTTP/1.1 200 OK\r\n"])
    assert got == b"x" and p.complete


def test_parser_read_until_close() -> None:
    p = ResponseParser()
    assert p.feed(b"HTTP/1.1 200 OK\r\n\r\nabc") == b"abc"
    assert not p.complete and not p.keep_alive
    assert p.eof() and p.complete


def test_parser_headers() -> None:
    p = ResponseParser()
    p.feed(b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n")
    assert p.status == 503 and p.headers["retry-after"] == "7" and p.headers["x-a"] == "1, 2"


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # size not hex
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n",  # 0x prefix
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n",  # negative
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX",  # data without CRLF
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
        b"HTTP/1.1 20 OK\r\n\r\n",  # 2-digit status
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",  # bad header line
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",  # bad length
        b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * 70_000,  # head never ends
    ],
)
def test_parser_rejects(raw: bytes) -> None:
    with pytest.raises(HTTPProtocolError):
        ResponseParser().feed(raw)


@pytest.mark.parametrize(
    ("name", "url", "want"),
    [
        ("auto", "http://127.0.0.1:8000", "fast"),  # plain http: the lean client
        ("auto", "https://taotoken.net/api", "aiohttp"),  # TLS: aiohttp
        ("aiohttp", "http://h:1", "aiohttp"),  # asked for
        ("fast", "http://h:1", "fast"),
    ],
)
def test_choose_http_client(name: str, url: str, want: str) -> None:
    assert choose_http_client(name, url) == want


@pytest.mark.parametrize(("name", "url"), [("fast", "https://h"), ("quick", "http://h")])
def test_choose_http_client_refuses(name: str, url: str) -> None:
    with pytest.raises(ValueError):
        choose_http_client(name, url)


def test_origin_and_head() -> None:
    o = Origin.of("http://user@example.com/api/v1/chat/completions")
    assert (o.host, o.port, o.path, o.host_header) == (
        "example.com",
        80,
        "/api/v1/chat/completions",
        "example.com",
    )
    head = request_head_prefix(
        Origin.of("http://127.0.0.1:9/v1/completions"), {"A": "b", "Host": "x"}
    )
    assert head == b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:9\r\nA: b\r\n"
    with pytest.raises(ValueError):
        request_head_prefix(o, {"A": "b\r\nEvil: 1"})
    with pytest.raises(ValueError):
        Origin.of("https://example.com/")


# --- exchanges against scripted servers -------------------------------------------------------

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    return head + await reader.readexactly(n)


@dataclass
class Outcome:
    ex: Exchange
    client: FastClient


async def _serve(script: Script) -> tuple[asyncio.Server, str]:
    count = {"n": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count["n"] += 1
        try:
            await script(reader, writer, count["n"])
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions"


class _Tokens:
    output_tokens = 0


async def _exchange(
    client: FastClient, timeouts: tuple[float, float, float] = (5, 5, 10)
) -> Exchange:
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter_ns()
    ex = Exchange(t0, _Tokens(), loop.create_future())
    head = request_head_prefix(client.origin, {"Content-Type": "application/json"})
    body = b'{"stream":true}'
    head += b"Content-Length: %d\r\n\r\n" % len(body)
    await client.send(ex, head + body, lambda e, sent_abs: e.arm(loop, sent_abs, *timeouts))
    assert ex.sent_ns is not None and 0 <= ex.sent_ns <= time.perf_counter_ns() - t0
    return ex


def _run(
    script: Script,
    n_requests: int = 1,
    timeouts: tuple[float, float, float] = (5, 5, 10),
    pause_s: float = 0.0,
) -> tuple[list[Exchange], FastClient]:
    async def main() -> tuple[list[Exchange], FastClient]:
        server, url = await _serve(script)
        client = FastClient(Origin.of(url), 2.0)
        out = []
        try:
            for _ in range(n_requests):
                out.append(await _exchange(client, timeouts))
                await asyncio.sleep(pause_s)
        finally:
            await client.close()
            server.close()
        return out, client

    return asyncio.run(main())


def _sse(n: int, final: bool = True) -> list[bytes]:
    evs = [
        b"data: "
        + orjson.dumps(
            {"choices": [{"delta": {"content": "t"}}], "usage": {"completion_tokens": i + 1}}
        )
        + b"\n\n"
        for i in range(n)
    ]
    return evs + ([b"data: [DONE]\n\n"] if final else [])


async def _stream(
    writer: asyncio.StreamWriter, events: list[bytes], gap_s: float = 0.0, terminate: bool = True
) -> None:
    writer.write(HEAD_CHUNKED)
    for i, ev in enumerate(events):
        last = i == len(events) - 1
        # the terminator goes with the last event, so the connection is reusable at [DONE]
        writer.write(b"%x\r\n%s\r\n%s" % (len(ev), ev, b"0\r\n\r\n" if last and terminate else b""))
        await writer.drain()
        if gap_s:
            await asyncio.sleep(gap_s)


def test_stream_and_keep_alive() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await _read_request(reader)
            await _stream(writer, _sse(5), gap_s=0.002)

    exs, client = _run(script, n_requests=3)
    for ex in exs:
        assert ex.error is None and ex.status == 200
        assert list(ex.chunk_tokens) == [1] * 5 and ex.dec.completion_tokens == 5
        assert list(ex.chunk_ns) == sorted(ex.chunk_ns) and ex.headers_ns <= ex.chunk_ns[0]
    assert client.connections_opened == 1  # three requests, one kept-alive connection


def test_events_split_across_reads_byte_by_byte() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        raw = HEAD_CHUNKED + _chunked(*_sse(3))
        for i in range(len(raw)):
            writer.write(raw[i : i + 1])
            await writer.drain()

    (ex,), _ = _run(script)
    assert ex.error is None and sum(ex.chunk_tokens) == 3


def test_stale_keep_alive_connection_is_retried_once() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        await _stream(writer, _sse(2))
        # then close the idle connection, as servers do after their keep-alive timeout

    exs, client = _run(script, n_requests=2, pause_s=0.05)
    assert [e.error for e in exs] == [None, None]
    assert client.connections_opened == 2


def test_stale_retry_keeps_the_answer_text_for_the_engine() -> None:
    # The engine hands each attempt its session's answer list (engine.py: a.dec.text = ...); a
    # retry on a fresh connection must append to that list, or later turns send an empty answer.
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        if n == 1:
            return  # the pre-connected connection: closed once the request arrives
        await _stream(
            writer,
            [
                b'data: {"choices":[{"delta":{"content":"hel"}}]}\n\n',
                b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n',
                b"data: [DONE]\n\n",
            ],
        )

    async def main() -> tuple[Exchange, list[str], FastClient]:
        server, url = await _serve(script)
        client = FastClient(Origin.of(url), 2.0)
        loop = asyncio.get_running_loop()
        try:
            assert await client.preconnect(1, time.perf_counter_ns() + 5_000_000_000) == 1
            ex = Exchange(time.perf_counter_ns(), _Tokens(), loop.create_future())
            answer = ["left over from an earlier attempt"]
            ex.dec.text = answer
            wire = request_head_prefix(client.origin, {}) + b"Content-Length: 2\r\n\r\n{}"
            await client.send(ex, wire, lambda e, sent_abs: e.arm(loop, sent_abs, 5, 5, 10))
        finally:
            await client.close()
            server.close()
        return ex, answer, client

    ex, answer, client = asyncio.run(main())
    assert ex.error is None and client.connections_opened == 2  # the retry took a fresh connection
    assert "".join(answer) == "hello" and ex.dec.text is answer


def test_http_error_with_retry_after() -> None:
    body = orjson.dumps({"error": {"message": "slow down"}})

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        await writer.drain()
        await asyncio.sleep(1)

    (ex,), _ = _run(script)
    assert (ex.error, ex.status, ex.retry_after_s) == (ErrorKind.HTTP_STATUS, 429, 3.0)
    assert ex.detail == "HTTP 429: slow down"


@pytest.mark.parametrize(
    ("terminate", "final", "want"),
    [
        # connection closed mid-stream, no terminator: cut
        (False, False, ErrorKind.STREAM_CUT),
        # the response ends cleanly but without data: [DONE]: cut
        (True, False, ErrorKind.STREAM_CUT),
        # [DONE] then close without the chunked terminator: success (as the aiohttp path)
        (False, True, None),
    ],
)
def test_stream_endings(terminate: bool, final: bool, want: ErrorKind | None) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        await _stream(writer, _sse(3, final=final), terminate=terminate)

    (ex,), _ = _run(script)
    assert ex.error is want
    assert sum(ex.chunk_tokens) == 3


def test_malformed_event_and_bad_framing() -> None:
    async def bad_json(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        await _stream(writer, [b"data: {nope\n\n"])

    async def bad_chunk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(HEAD_CHUNKED + b"zz\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    (ex,), _ = _run(bad_json)
    assert ex.error is ErrorKind.MALFORMED and "not JSON" in ex.detail
    (ex,), _ = _run(bad_chunk)
    assert ex.error is ErrorKind.MALFORMED and "chunk size" in ex.detail


@pytest.mark.parametrize(
    ("first_gap_s", "gap_s", "timeouts", "want"),
    [
        # nothing for 0.5 s against a 0.1 s first-token timeout
        (0.5, 0.0, (0.1, 5, 10), ErrorKind.TIMEOUT_FIRST_TOKEN),
        # a token, then 0.5 s of silence against a 0.1 s idle timeout
        (0.0, 0.5, (5, 0.1, 10), ErrorKind.TIMEOUT_IDLE),
        # tokens every 0.05 s keep a 2 s idle timeout away, but not a 0.3 s total. (A 0.1 s
        # idle timeout failed once in a loaded full run: a 0.1 s stall between two tokens. With
        # 2 s, the total timer is always due first, so a late loop still fires it first.)
        (0.0, 0.05, (5, 2.0, 0.3), ErrorKind.TIMEOUT_TOTAL),
    ],
)
def test_timeouts(
    first_gap_s: float, gap_s: float, timeouts: tuple[float, float, float], want: ErrorKind
) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        await asyncio.sleep(first_gap_s)
        await _stream(writer, _sse(20), gap_s=gap_s)

    (ex,), _ = _run(script, timeouts=timeouts)
    assert ex.error is want


def test_connection_refused() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def main() -> None:
        client = FastClient(Origin.of(f"http://127.0.0.1:{port}/v1/completions"), 1.0)
        with pytest.raises(ConnectFailed) as info:
            await _exchange(client)
        assert info.value.kind is ErrorKind.CONNECT

    asyncio.run(main())


def test_preconnect_warms_the_pool_and_requests_reuse_it() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await _read_request(reader)
            await _stream(writer, _sse(2))

    async def main() -> tuple[int, int, list[Exchange]]:
        server, url = await _serve(script)
        client = FastClient(Origin.of(url), 2.0)
        try:
            opened = await client.preconnect(3, time.perf_counter_ns() + 2_000_000_000)
            exs = list(await asyncio.gather(*(_exchange(client) for _ in range(3))))
        finally:
            await client.close()
            server.close()
        return opened, client.connections_opened, exs

    opened, total, exs = asyncio.run(main())
    assert opened == 3 and total == 3  # the three requests found warm connections
    assert all(e.error is None and e.reused for e in exs)


def test_preconnect_stops_at_its_deadline_and_on_refusal() -> None:
    async def main() -> tuple[int, int]:
        client = FastClient(Origin.of("http://127.0.0.1:9/v1/chat/completions"), 2.0)  # refused
        refused = await client.preconnect(5, time.perf_counter_ns() + 2_000_000_000)
        late = await client.preconnect(5, time.perf_counter_ns() - 1)
        await client.close()
        return refused, late

    assert asyncio.run(main()) == (0, 0)
