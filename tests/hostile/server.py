"""A hostile OpenAI-compatible streaming server: one misbehaviour per path, for the test suite.

One loopback server (raw asyncio on 127.0.0.1, port 0, in a thread of its own) answers
`/m/<mode>/<run>/...`: a target URL `http://127.0.0.1:PORT/m/<mode>/<run>` makes every request
of a run meet that mode (`<run>` keeps the counts of runs that go at once apart). Each mode is a small named coroutine below, registered in `MODES` with the record
kinds the harness must give its requests: the contract, listed in docs/hostile.md
("Hostile server matrix") and checked by tests/hostile/test_matrix.py.

HTTP is spoken by hand (request heads parsed here, responses written byte by byte) so that a
mode can break the protocol anywhere: the status line, the head, the chunked framing, the
encoding, the timing. The server counts the bytes it reads and writes per mode (so a test can
say how many tokens a run could honestly have seen) and keeps the headers of every request it
got (so a test can see what a redirect carried to another origin).

Every mode is cheap: streams are a few events long; endless and slow modes stop as soon as the
client goes away (and after ENDLESS_CAP_S at the latest), so a whole matrix runs in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import orjson

MODEL = "hostile-model"
ENDLESS_CAP_S = 60.0  # an endless or slow mode gives up after this, client or not
TICK_S = 0.005  # endless_tokens: one token event per tick
TRICKLE_S = 0.25  # slow modes: one byte per this, well under any idle timeout (the tests: 2 s)
GIANT_EVENT_BYTES = 5 * 1024 * 1024  # over the harness's 4 MiB SSE event limit
GIANT_HEADER_BYTES = 1024 * 1024  # over any client's 64 KiB response head limit
REQUEST_HEAD_LIMIT = 1024 * 1024  # what this server reads of a request head

# Control sequences a server could use against a terminal: clear screen and home, set the
# window title (OSC 0), write the clipboard (OSC 52), a bell, a C1 CSI and a NEL.
CONTROLS = (
    "\x1b[2J\x1b[H"
    "\x1b]0;hostile title\x07"
    "\x1b]52;c;aG9zdGlsZSBjbGlwYm9hcmQ=\x07"
    "\x07 bell, C1 CSI \u009b31m red, NEL \u0085, DEL \x7f, BS \x08, CR \r end"
)


# -- HTTP by hand -------------------------------------------------------------------------------


@dataclass
class Request:
    """One request as this server read it."""

    method: str
    path: str  # the part after /m/<mode>/<run>, e.g. /v1/chat/completions
    headers: dict[str, str]  # names in lower case
    body: bytes
    other_origin: str = ""  # where redirect_cross_origin sends the client (same mode and run)

    @property
    def json(self) -> dict[str, object]:
        with contextlib.suppress(orjson.JSONDecodeError):
            obj = orjson.loads(self.body) if self.body else {}
            if isinstance(obj, dict):
                return obj
        return {}

    @property
    def max_tokens(self) -> int:
        body = self.json
        n = body.get("max_tokens", body.get("max_completion_tokens", 4))
        return n if isinstance(n, int) and 0 < n <= 1000 else 4

    @property
    def model(self) -> str:
        m = self.json.get("model")
        return m if isinstance(m, str) else MODEL

    def echo_secrets(self) -> str:
        """The credential headers this request carried, verbatim (what a careless server echoes)."""
        return (
            f"Authorization={self.headers.get('authorization', '')!r} "
            f"api-key={self.headers.get('api-key', '')!r}"
        )


class Out:
    """The response side of one connection: raw bytes, or the helpers for a chunked stream."""

    def __init__(self, writer: asyncio.StreamWriter, count: Callable[[int], None]) -> None:
        self.writer = writer
        self.count = count
        self.closed = False

    async def raw(self, data: bytes) -> None:
        """Write and wait until written; ConnectionError when the client went away."""
        if self.writer.is_closing():
            raise ConnectionResetError("the client went away")
        self.writer.write(data)
        self.count(len(data))
        await self.writer.drain()

    async def head(
        self,
        status: int = 200,
        reason: str = "OK",
        content_type: str = "text/event-stream",
        headers: Iterable[tuple[str, str]] = (),
        length: int | None = None,
    ) -> None:
        """Status line and head; chunked unless `length` is given."""
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {content_type}"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append(
            f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
        )
        await self.raw(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def chunk(self, data: bytes) -> None:
        await self.raw(b"%x\r\n%s\r\n" % (len(data), data))

    async def event(self, payload: bytes) -> None:
        """One SSE event (`data: ...` and its blank line) in one HTTP chunk."""
        await self.chunk(b"data: " + payload + b"\n\n")

    async def end(self) -> None:
        """The chunked terminator: the response is complete, the connection may be reused."""
        await self.raw(b"0\r\n\r\n")

    async def body(
        self, status: int, data: bytes, content_type: str, *headers: tuple[str, str]
    ) -> None:
        """A whole response with Content-Length."""
        await self.head(status, REASONS.get(status, "Whatever"), content_type, headers, len(data))
        await self.raw(data)

    def close(self) -> None:
        """Drop the connection (no more responses on it)."""
        self.closed = True
        self.writer.close()


REASONS = {200: "OK", 307: "Temporary Redirect", 401: "Unauthorized", 404: "Not Found"}
REASONS |= {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


# -- well-formed pieces --------------------------------------------------------------------------


def chunk_json(req: Request, k: int, content: str = "tok", ct: object = None) -> bytes:
    """The k-th content chunk (1-based) in vLLM's compact shape and key order, with cumulative
    usage (`ct`: the completion_tokens value; default k). Matches the harness's fast path."""
    return orjson.dumps(
        {
            "id": "cmpl-hostile",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": req.model,
            "choices": [
                {"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": None}
            ],
            "usage": {
                "prompt_tokens": 8,
                "total_tokens": 8 + k,
                "completion_tokens": k if ct is None else ct,
            },
        }
    )


def with_usage_token(req: Request, k: int, ct_token: bytes, pt_token: bytes = b"8") -> bytes:
    """A content chunk whose usage counts are the given raw JSON tokens (`NaN`, `1e12`, `-5`...)."""
    return (
        chunk_json(req, k, ct="@CT@")
        .replace(b'"@CT@"', ct_token)
        .replace(b'"prompt_tokens":8', b'"prompt_tokens":' + pt_token)
    )


async def stream(out: Out, events: Iterable[bytes], done: bool = True) -> None:
    """A 200 event stream of these payloads, `[DONE]` (when `done`), and the terminator."""
    await out.head()
    for payload in events:
        await out.event(payload)
    if done:
        await out.event(b"[DONE]")
    await out.end()


def good_events(req: Request, n: int | None = None) -> list[bytes]:
    return [chunk_json(req, k) for k in range(1, (n or req.max_tokens) + 1)]


def with_bad(req: Request, bad: bytes) -> list[bytes]:
    """A good stream with `bad` as its second event."""
    good = good_events(req)
    return [good[0], bad, *good[1:]]


async def normal(req: Request, out: Out) -> None:
    """A well-behaved answer (the catcher of a redirect, the chat of probe-only modes)."""
    await stream(out, good_events(req))


# -- wrong JSON shapes and types ------------------------------------------------------------


async def delta_string(req: Request, out: Out) -> None:
    """`delta` is a string, not an object."""
    await stream(out, with_bad(req, b'{"choices":[{"index":0,"delta":"x"}]}'))


async def choices_number(req: Request, out: Out) -> None:
    await stream(out, with_bad(req, b'{"choices":5}'))


async def choices_object(req: Request, out: Out) -> None:
    """`choices` is one object, not a list of them."""
    await stream(out, with_bad(req, b'{"choices":{"index":0,"delta":{"content":"x"}}}'))


async def choices_null(req: Request, out: Out) -> None:
    """`choices: null` (null means absent: a chunk without choices)."""
    await stream(out, with_bad(req, b'{"choices":null,"usage":null}'))


async def choices_list_of_null(req: Request, out: Out) -> None:
    await stream(out, with_bad(req, b'{"choices":[null]}'))


async def content_number(req: Request, out: Out) -> None:
    """`delta.content` is a number."""
    await stream(out, with_bad(req, b'{"choices":[{"index":0,"delta":{"content":5}}]}'))


async def top_level_array(req: Request, out: Out) -> None:
    await stream(out, with_bad(req, b'[{"choices":[{"index":0,"delta":{"content":"x"}}]}]'))


async def top_level_scalar(req: Request, out: Out) -> None:
    await stream(out, with_bad(req, b"42"))


async def usage_string(req: Request, out: Out) -> None:
    """`usage` is a string."""
    bad = b'{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":"lots"}'
    await stream(out, with_bad(req, bad))


async def finish_reason_object(req: Request, out: Out) -> None:
    bad = b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":{"why":1}}]}'
    await stream(out, with_bad(req, bad))


async def nested_nulls(req: Request, out: Out) -> None:
    """Nulls wherever OpenAI allows them (content, role, delta, finish_reason, usage fields)."""
    nulls = [
        b'{"choices":[{"index":0,"delta":{"role":null,"content":null},"finish_reason":null}],"usage":null}',
        b'{"choices":[{"index":0,"delta":null,"logprobs":null}],"usage":{"completion_tokens":null,"prompt_tokens":null}}',
        b'{"choices":[{"index":0,"text":null,"delta":{"content":"x","tool_calls":null}}]}',
    ]
    await stream(out, [*nulls, *good_events(req)])


async def data_not_json(req: Request, out: Out) -> None:
    """`data:` lines that are not JSON."""
    await stream(out, with_bad(req, b"hello, this is not JSON"))


async def invalid_utf8(req: Request, out: Out) -> None:
    """Invalid UTF-8 inside a JSON string (and in an `event:` name)."""
    await out.head()
    await out.event(chunk_json(req, 1))
    await out.chunk(
        b"event: \xff\xfe\ndata: " + chunk_json(req, 2).replace(b"tok", b"\xff\xc0") + b"\n\n"
    )
    await out.event(b"[DONE]")
    await out.end()


# -- numbers the server claims ------------------------------------------------------------------


def _usage_mode(
    ct_token: bytes, pt_token: bytes = b"8"
) -> Callable[[Request, Out], Awaitable[None]]:
    async def mode(req: Request, out: Out) -> None:
        good = good_events(req)
        # the last content chunk carries the claim
        last = with_usage_token(req, len(good), ct_token, pt_token)
        await stream(out, [*good[:-1], last])

    return mode


usage_1e12 = _usage_mode(b"1000000000000")  # an integer: the fast path reads it
usage_2m = _usage_mode(b"2000000")  # per request, from a few hundred bytes
usage_negative = _usage_mode(b"-5")
usage_float = _usage_mode(b"2.5")
usage_float_exp = _usage_mode(b"1e12")
usage_nan = _usage_mode(b"NaN")  # not JSON (JSON has no NaN)
usage_infinity = _usage_mode(b"Infinity")  # not JSON either
usage_over_int64 = _usage_mode(b"99999999999999999999999")  # valid JSON; orjson reads a float
prompt_tokens_huge = _usage_mode(b"4", pt_token=b"1000000000000000")


async def over_max_tokens(req: Request, out: Out) -> None:
    """Four times max_tokens, usage agreeing."""
    await stream(out, good_events(req, 4 * req.max_tokens))


# -- streams that do not end, or end wrong ------------------------------------------------------


async def _until_gone(out: Out, payload: bytes, interval_s: float) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.time() + ENDLESS_CAP_S
    while loop.time() < stop:
        await out.chunk(payload)
        await asyncio.sleep(interval_s)
    out.close()


async def endless_tokens(req: Request, out: Out) -> None:
    """Token events every 5 ms, never `[DONE]`."""
    await out.head()
    event = orjson.dumps({"choices": [{"index": 0, "delta": {"content": "tok"}}]})
    await _until_gone(out, b"data: " + event + b"\n\n", TICK_S)


async def endless_comments(req: Request, out: Out) -> None:
    """SSE comments (keep-alives) every 50 ms, never a token."""
    await out.head()
    await _until_gone(out, b": keep-alive\n\n", 0.05)


async def _trickle(out: Out, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.time() + ENDLESS_CAP_S
    for i in range(len(data)):
        if loop.time() > stop:
            break
        await out.raw(data[i : i + 1])
        await asyncio.sleep(TRICKLE_S)
    out.close()


async def slow_loris(req: Request, out: Out) -> None:
    """The head at once, then the stream one byte per 0.25 s."""
    await out.head(length=None)
    body = b"".join(b"%x\r\ndata: %s\n\n\r\n" % (len(e) + 8, e) for e in good_events(req))
    await _trickle(out, body)


async def slow_loris_head(req: Request, out: Out) -> None:
    """The status line and head one byte per 0.25 s."""
    await _trickle(out, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")


async def slow_loris_after_first(req: Request, out: Out) -> None:
    """One token at once, then the rest one byte per 0.25 s (inside one HTTP chunk, so every
    byte reaches the SSE parser at once): no idle timeout ever fires."""
    await out.head()
    events = good_events(req, 64)
    await out.event(events[0])
    rest = b"".join(b"data: " + e + b"\n\n" for e in events[1:])
    await out.raw(b"%x\r\n" % len(rest))
    await _trickle(out, rest)


async def chunked_broken(req: Request, out: Out) -> None:
    """A chunk size that is not hexadecimal."""
    await out.head()
    await out.event(chunk_json(req, 1))
    await out.raw(b"zz\r\ndata: {}\n\n\r\n")
    out.close()


async def truncated(req: Request, out: Out) -> None:
    """A complete HTTP response whose stream stops before `[DONE]`."""
    await stream(out, good_events(req)[:2], done=False)


async def truncated_mid_event(req: Request, out: Out) -> None:
    """The connection closed in the middle of an event and of its HTTP chunk."""
    await out.head()
    await out.event(chunk_json(req, 1))
    half = b"data: " + chunk_json(req, 2)[:40]
    await out.raw(b"%x\r\n%s" % (len(half) + 30, half))
    out.close()


async def empty_200(req: Request, out: Out) -> None:
    await out.body(200, b"", "text/event-stream")


async def html_200(req: Request, out: Out) -> None:
    """A gateway's HTML page with status 200."""
    page = b"<!DOCTYPE html>\n<html>\n<head><title>Bad Gateway</title></head>\n\n<body>\n<h1>502</h1>\n\n</body>\n</html>\n"
    await out.body(200, page, "text/html")


async def status_line_garbage(req: Request, out: Out) -> None:
    """Not HTTP at all."""
    await out.raw(b"SSH-2.0-OpenSSH_9.6\r\n\x00\x01\x02 garbage\r\n\r\n")
    out.close()


def _sse_bytes(req: Request) -> bytes:
    return b"".join(b"data: " + e + b"\n\n" for e in [*good_events(req), b"[DONE]"])


async def gzip_if_asked(req: Request, out: Out) -> None:
    """A compressing gateway done right: gzip (with the header) only when the client asked."""
    if "gzip" in req.headers.get("accept-encoding", ""):
        await out.body(
            200, gzip.compress(_sse_bytes(req)), "text/event-stream", ("Content-Encoding", "gzip")
        )
    else:
        await out.body(200, _sse_bytes(req), "text/event-stream")


async def gzip_unasked(req: Request, out: Out) -> None:
    """gzip with `Content-Encoding: gzip`, asked for or not."""
    await out.body(
        200, gzip.compress(_sse_bytes(req)), "text/event-stream", ("Content-Encoding", "gzip")
    )


async def gzip_no_header(req: Request, out: Out) -> None:
    """gzip bytes without saying so."""
    await out.body(200, gzip.compress(_sse_bytes(req)), "text/event-stream")


async def giant_headers(req: Request, out: Out) -> None:
    """One header line of 1 MiB."""
    await out.raw(b"HTTP/1.1 200 OK\r\nX-Junk: " + b"j" * GIANT_HEADER_BYTES + b"\r\n\r\n")
    out.close()


async def giant_event(req: Request, out: Out) -> None:
    """One well-formed event of 5 MiB (its token is one huge string)."""
    await out.head()
    await out.event(chunk_json(req, 1, content="g" * GIANT_EVENT_BYTES))
    await out.event(b"[DONE]")
    await out.end()


# -- secrets, redirects and the terminal ---------------------------------------------------------


async def redirect_cross_origin(req: Request, out: Out) -> None:
    """307 to another origin (a second loopback server that records what it receives)."""
    await out.body(307, b"", "text/plain", ("Location", f"{req.other_origin}/v1/chat/completions"))


async def echo_key_401(req: Request, out: Out) -> None:
    """A 401 whose message echoes the credentials it received."""
    msg = f"invalid credentials: {req.echo_secrets()}"
    await out.body(401, orjson.dumps({"error": {"message": msg}}), "application/json")


async def echo_key_in_stream(req: Request, out: Out) -> None:
    """An `error` event in the stream that echoes the credentials."""
    err = {"error": {"message": f"quota exceeded for {req.echo_secrets()}"}}
    await stream(out, [chunk_json(req, 1), orjson.dumps(err)], done=False)


async def ctrl_in_error(req: Request, out: Out) -> None:
    """A 500 whose JSON message holds escape sequences, C1 controls, CR and a bell."""
    await out.body(
        500, orjson.dumps({"error": {"message": "boom " + CONTROLS}}), "application/json"
    )


async def ctrl_in_error_raw(req: Request, out: Out) -> None:
    """A 503 with a plain-text body of raw control bytes (and invalid UTF-8)."""
    body = b"down \xff\xfe " + CONTROLS.encode("utf-8")
    await out.body(503, body, "text/plain")


async def ctrl_in_stream_error(req: Request, out: Out) -> None:
    err = orjson.dumps({"error": {"message": "overloaded " + CONTROLS, "code": CONTROLS}})
    await stream(out, [chunk_json(req, 1), err], done=False)


async def ctrl_in_content(req: Request, out: Out) -> None:
    """Escape sequences in the generated text itself."""
    await stream(out, [chunk_json(req, k, content=CONTROLS) for k in range(1, req.max_tokens + 1)])


async def retry_after_absurd(req: Request, out: Out) -> None:
    """429 with a Retry-After of 10^22 s and a retry-after-ms that overflows a float."""
    await out.body(
        429,
        b'{"error":{"message":"slow down"}}',
        "application/json",
        ("Retry-After", "9999999999999999999999"),
        ("retry-after-ms", "1e400"),
    )


async def echo_userinfo(req: Request, out: Out) -> None:
    """A normal stream; the request's Authorization (Basic from URL userinfo?) is echoed in a
    header and a comment, as a debugging proxy would."""
    await out.head(headers=[("X-Seen-Authorization", req.headers.get("authorization", ""))])
    await out.chunk(b": seen " + req.echo_secrets().encode("latin-1", "replace") + b"\n\n")
    for e in good_events(req):
        await out.event(e)
    await out.event(b"[DONE]")
    await out.end()


# -- /v1/models, /metrics and /tokenize ----------------------------------------------------------


async def models_garbage_list(req: Request, out: Out) -> None:
    await out.body(200, b'{"object":"list","data":"nope"}', "application/json")


async def models_not_json_page(req: Request, out: Out) -> None:
    await out.body(200, b"<html><body>login required</body></html>", "application/json")


async def models_ctrl_list(req: Request, out: Out) -> None:
    ids = {"object": "list", "data": [{"id": "m" + CONTROLS, "object": "model"}]}
    await out.body(200, orjson.dumps(ids), "application/json")


async def metrics_ctrl_page(req: Request, out: Out) -> None:
    """Prometheus text whose label values hold escape sequences."""
    label = CONTROLS.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    text = (
        f'vllm:num_requests_running{{model_name="{label}"}} 1\n'
        f'vllm:num_requests_waiting{{model_name="{label}"}} 0\n'
        f'vllm:cache_config_info{{block_size="16",model_name="{label}"}} 1\n'
    )
    await out.body(200, text.encode(), "text/plain; version=0.0.4")


async def tokenize_garbage_answer(req: Request, out: Out) -> None:
    await out.body(200, orjson.dumps({"count": -7, "tokens": CONTROLS}), "application/json")


async def not_found(req: Request, out: Out) -> None:
    await out.body(404, b'{"error":{"message":"not found"}}', "application/json")


async def models_ok(req: Request, out: Out) -> None:
    ids = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
    await out.body(200, orjson.dumps(ids), "application/json")


async def health_ok(req: Request, out: Out) -> None:
    await out.body(200, b"{}", "application/json")


# -- the registry --------------------------------------------------------------------------------

Handler = Callable[[Request, Out], Awaitable[None]]

# What a record may end as: "ok" (completed), or an error class as the result names it
# (`http_<status>` for HTTP errors). One wildcard: "*error", any error class.
OK = frozenset({"ok"})
MALFORMED = frozenset({"malformed"})
STREAM_CUT = frozenset({"stream_cut"})
FIRST_TOKEN = frozenset({"timeout_first_token"})
ANY_ERROR = frozenset({"*error"})


@dataclass(frozen=True)
class Mode:
    """One misbehaviour: what the chat endpoint does (and /v1/models, /metrics, /tokenize), and
    the contract: the kinds its records may end as, or the exit status of a refusal before the
    run. `probe`: run with the pre-run probe and no --model (the run reads /v1/models)."""

    chat: Handler
    expect: frozenset[str]
    what: str
    refuse: int | None = None  # the run may (expect empty: must) stop before sending, this exit
    probe: bool = False
    models: Handler = models_ok
    metrics: Handler = not_found
    tokenize: Handler = not_found
    userinfo: bool = False  # the target URL carries user:password@
    read_timeout_s: float = 2.0  # first-token and idle timeouts of the run (config.toml)
    retry: bool = False  # the scenario retries 429 once (backoff 10 ms, max_wait 50 ms)
    # kinds the aiohttp client may also end with, where aiohttp itself hides the cause (each
    # named in docs/hostile.md's table)
    aiohttp_also: frozenset[str] = frozenset()


MODES: dict[str, Mode] = {
    # wrong JSON shapes and types
    "delta_string": Mode(delta_string, MALFORMED, "`delta` is a string"),
    "choices_number": Mode(choices_number, MALFORMED, '`"choices": 5`'),
    "choices_object": Mode(choices_object, MALFORMED, "`choices` is an object, not a list"),
    "choices_null": Mode(choices_null, OK, '`"choices": null` (null means absent)'),
    "choices_list_of_null": Mode(choices_list_of_null, MALFORMED, '`"choices": [null]`'),
    "content_number": Mode(content_number, MALFORMED, "`delta.content` is a number"),
    "top_level_array": Mode(top_level_array, MALFORMED, "an event that is a JSON array"),
    "top_level_scalar": Mode(top_level_scalar, MALFORMED, "an event that is a JSON number"),
    "usage_string": Mode(usage_string, MALFORMED, '`"usage": "lots"`'),
    "finish_reason_object": Mode(finish_reason_object, MALFORMED, "`finish_reason` is an object"),
    "nested_nulls": Mode(nested_nulls, OK, "nulls where OpenAI allows them"),
    "data_not_json": Mode(data_not_json, MALFORMED, "a `data:` line that is not JSON"),
    "invalid_utf8": Mode(invalid_utf8, MALFORMED, "invalid UTF-8 in a JSON string"),
    # numbers the server claims: flagged, never sizes
    "usage_1e12": Mode(usage_1e12, OK, "`completion_tokens` 1000000000000 (an integer)"),
    "usage_2m": Mode(usage_2m, OK, "`completion_tokens` 2000000 from a few hundred bytes"),
    "usage_negative": Mode(usage_negative, OK, "`completion_tokens` -5"),
    "usage_float": Mode(usage_float, OK, "`completion_tokens` 2.5"),
    "usage_float_exp": Mode(usage_float_exp, OK, "`completion_tokens` 1e12 (a float)"),
    "usage_nan": Mode(usage_nan, MALFORMED, "`completion_tokens` NaN (not JSON)"),
    "usage_infinity": Mode(usage_infinity, MALFORMED, "`completion_tokens` Infinity (not JSON)"),
    "usage_over_int64": Mode(usage_over_int64, OK, "`completion_tokens` 10^23 - 1, past int64"),
    "prompt_tokens_huge": Mode(prompt_tokens_huge, OK, "`prompt_tokens` 10^15"),
    "over_max_tokens": Mode(over_max_tokens, OK, "four times `max_tokens` tokens, usage agreeing"),
    # streams that do not end, or end wrong
    "endless_tokens": Mode(
        endless_tokens, OK, "token events every 5 ms, never `[DONE]` (cut at the token limit)"
    ),
    "endless_comments": Mode(
        endless_comments, FIRST_TOKEN, "`: keep-alive` comments, never a token"
    ),
    "slow_loris": Mode(slow_loris, FIRST_TOKEN, "the body one byte per 0.25 s"),
    "slow_loris_head": Mode(slow_loris_head, FIRST_TOKEN, "the status line one byte per 0.25 s"),
    "slow_loris_after_first": Mode(
        slow_loris_after_first, ANY_ERROR, "one token, then one byte per 0.25 s"
    ),
    "chunked_broken": Mode(
        chunked_broken,
        MALFORMED,
        "a chunk size that is not hexadecimal",
        aiohttp_also=frozenset({"timeout_idle"}),
    ),
    "truncated": Mode(truncated, STREAM_CUT, "a complete response without `[DONE]`"),
    "truncated_mid_event": Mode(truncated_mid_event, STREAM_CUT, "the connection closed mid-event"),
    "empty_200": Mode(empty_200, STREAM_CUT, "200 with an empty body"),
    "html_200": Mode(html_200, MALFORMED | STREAM_CUT, "200 with an HTML page"),
    "status_line_garbage": Mode(status_line_garbage, MALFORMED, "an answer that is not HTTP"),
    "gzip_if_asked": Mode(gzip_if_asked, OK, "gzip with its header, when asked for"),
    "gzip_unasked": Mode(gzip_unasked, OK | MALFORMED, "gzip with its header, asked for or not"),
    "gzip_no_header": Mode(gzip_no_header, MALFORMED | STREAM_CUT, "gzip without its header"),
    "giant_headers": Mode(giant_headers, MALFORMED, "a 1 MiB response header"),
    "giant_event": Mode(
        giant_event,
        frozenset({"body_too_large"}),
        "one 5 MiB event",
        read_timeout_s=10.0,  # 4 MiB per request to read before the cap: time on a busy machine
    ),
    # secrets, redirects and the terminal
    "redirect_cross_origin": Mode(
        redirect_cross_origin, frozenset({"http_307"}), "307 to another loopback origin"
    ),
    "echo_key_401": Mode(echo_key_401, frozenset({"http_401"}), "401 echoing the credentials"),
    "echo_key_in_stream": Mode(
        echo_key_in_stream, frozenset({"server_error"}), "an in-stream error echoing them"
    ),
    "ctrl_in_error": Mode(
        ctrl_in_error, frozenset({"http_500"}), "ESC, OSC, C1 in a 500's message"
    ),
    "ctrl_in_error_raw": Mode(
        ctrl_in_error_raw, frozenset({"http_503"}), "raw control bytes in a 503's text body"
    ),
    "ctrl_in_stream_error": Mode(
        ctrl_in_stream_error, frozenset({"server_error"}), "controls in an in-stream error"
    ),
    "ctrl_in_content": Mode(ctrl_in_content, OK, "controls in the generated text"),
    "retry_after_absurd": Mode(
        retry_after_absurd,
        frozenset({"http_429"}),
        "429, `Retry-After` 10^22 s, `retry-after-ms` 1e400 (retried once)",
        retry=True,
    ),
    "url_userinfo": Mode(
        echo_userinfo, OK, "the target URL holds user:password@", refuse=2, userinfo=True
    ),
    "models_garbage": Mode(
        normal,
        frozenset(),
        '`/v1/models` says `"data": "nope"`',
        refuse=1,
        probe=True,
        models=models_garbage_list,
    ),
    "models_not_json": Mode(
        normal,
        frozenset(),
        "`/v1/models` is an HTML page",
        refuse=1,
        probe=True,
        models=models_not_json_page,
    ),
    "models_ctrl_id": Mode(
        normal,
        OK,
        "a model id with controls, from `/v1/models`",
        probe=True,
        models=models_ctrl_list,
    ),
    "metrics_ctrl": Mode(
        normal, OK, "`/metrics` label values with controls", metrics=metrics_ctrl_page
    ),
    "tokenize_garbage": Mode(
        normal, OK, "`/tokenize` counts -7 tokens", tokenize=tokenize_garbage_answer
    ),
}


def contract(mode: Mode) -> str:
    """The mode's contract in words, as docs/hostile.md's table states it."""
    words = {
        "*error": "an error (any class)",
    }
    kinds = " or ".join(words.get(k, f"`{k}`") for k in sorted(mode.expect))
    refusal = f"refused before the run: exit {mode.refuse}, one line" if mode.refuse else ""
    return "; or ".join(x for x in (kinds, refusal) if x)


# -- the server ----------------------------------------------------------------------------------


@dataclass
class Seen:
    """What one mode's requests carried and cost."""

    bytes_in: int = 0
    bytes_out: int = 0
    requests: list[Request] = field(default_factory=list)


class HostileServer:
    """The server on 127.0.0.1 in a daemon thread. `url(mode)` is a target base URL; `seen`
    counts bytes and keeps requests per mode; `catch_all` serves every path with `normal`
    (the other origin of a redirect)."""

    def __init__(self, catch_all: bool = False, other_origin: str = "") -> None:
        self.catch_all = catch_all
        self.other_origin = other_origin
        self.seen: dict[str, Seen] = {}
        self.errors: list[str] = []  # exceptions of this server's own handlers (its bugs)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    def start(self) -> HostileServer:
        self._thread.start()

        async def listen() -> asyncio.Server:
            return await asyncio.start_server(
                self._accept, "127.0.0.1", 0, limit=REQUEST_HEAD_LIMIT
            )

        self._server = asyncio.run_coroutine_threadsafe(listen(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, mode: str, run: str = "0") -> str:
        """The target base URL of `mode`; `run` tells concurrent runs of one mode apart."""
        return f"{self.origin}/m/{mode}/{run}"

    def seen_by(self, mode: str, run: str = "0") -> Seen:
        return self.seen.setdefault(f"{mode}/{run}", Seen())

    def stop(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for t in list(self._conns):
                t.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, or sent no (whole) request
        except Exception as exc:  # noqa: BLE001 - a bug of this server: the test reports it
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self._conns.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name:
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            mode, run, path = self._route(target)
            seen = self.seen_by(mode, run)
            seen.bytes_in += len(head) + len(body)
            req = Request(method, path, headers, body, f"{self.other_origin}/m/{mode}/{run}")
            seen.requests.append(req)

            def count(n: int, seen: Seen = seen) -> None:
                seen.bytes_out += n

            out = Out(writer, count)
            await self._handler(mode, path)(req, out)
            if out.closed or headers.get("connection", "").lower() == "close":
                return

    def _route(self, target: str) -> tuple[str, str, str]:
        """(mode, run, the path after /m/<mode>/<run>)."""
        parts = target.split("/", 4)  # "", "m", mode, run, rest
        if len(parts) >= 4 and parts[1] == "m":
            return parts[2], parts[3], "/" + (parts[4] if len(parts) > 4 else "")
        return "", "", target

    def _handler(self, mode_name: str, path: str) -> Handler:
        if self.catch_all:
            return normal
        mode = MODES.get(mode_name)
        if mode is None:
            return not_found
        if path.startswith("/v1/chat/completions") or path.startswith("/v1/completions"):
            return mode.chat
        if path.startswith("/v1/models"):
            return mode.models
        if path.startswith("/metrics"):
            return mode.metrics
        if path.startswith("/tokenize"):
            return mode.tokenize
        if path.startswith("/health"):
            return health_ok
        return not_found


def start_pair() -> tuple[HostileServer, HostileServer]:
    """The hostile server and the catcher (the other origin redirect_cross_origin points to)."""
    catcher = HostileServer(catch_all=True).start()
    return HostileServer(other_origin=catcher.origin).start(), catcher
