"""Property tests of the decoders against hostile input (hypothesis).

What a server sends goes through three parsers before it is a record: the lean client's HTTP/1.1
response parser (`harness.client.http1`), the SSE splitter (`harness.client.sse`) and the OpenAI
stream decoder (`harness.client.openai`). Fed arbitrary bytes, split anywhere, and arbitrary
JSON values in and around the chunk shape, each gives back what it promises (body bytes,
events, token counts of the right types) or raises the harness's own classified error --
HTTPProtocolError, SSEError, StreamError with an ErrorKind -- and never anything else: any
other exception escapes the transports as a bug (harness.client.transport.classify_exception).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.client.http1 import ResponseParser
from harness.client.openai import StreamDecoder, StreamError, error_message
from harness.client.sse import MAX_PENDING_BYTES, SSEError, SSESplitter, split_region
from harness.client.transport import HTTPProtocolError
from harness.record.records import ErrorKind

EXAMPLES = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- strategies ----------------------------------------------------------------------------------


def from_pieces(pieces: list[bytes]) -> st.SearchStrategy[bytes]:
    """Bytes made of protocol-looking pieces and arbitrary ones, so that hypothesis reaches the
    parsers' deeper states as often as their first line."""
    return st.lists(st.one_of(st.sampled_from(pieces), st.binary(max_size=24)), max_size=40).map(
        b"".join
    )


SSE_PIECES = [
    b"data:",
    b"data: ",
    b"event: ",
    b"id: 1",
    b": comment",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"[DONE]",
    b'{"choices":[{"index":0,"delta":{"content":"x"}}]}',
    b"\xff\xfe",
]
HTTP_PIECES = [
    b"HTTP/1.1 200 OK\r\n",
    b"HTTP/1.0 404 Not Found\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Content-Length: 5\r\n",
    b"Content-Length: -1\r\n",
    b"Content-Length: 99999999999999999999999\r\n",
    b"Connection: close\r\n",
    b"\r\n",
    b"0\r\n\r\n",
    b"5\r\nhello\r\n",
    b"ffffffffffffffffff\r\n",
    b"1;ext=1\r\n",
    b"data: x\n\n",
]
sse_bytes = st.one_of(st.binary(max_size=400), from_pieces(SSE_PIECES))
http_bytes = st.one_of(st.binary(max_size=400), from_pieces(HTTP_PIECES))
cuts = st.lists(st.integers(min_value=0, max_value=600), max_size=8)

# Any JSON value orjson writes: big and negative integers, floats, deep nesting, odd text.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def shaped(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of these keys, each with its own strategy (or any JSON value)."""
    return st.fixed_dictionaries(
        {}, optional={k: st.one_of(v, json_values) for k, v in keys.items()}
    )


counts = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from([0, 1, 10**12, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
)
deltas = shaped(
    {
        "content": st.text(max_size=6),
        "reasoning_content": st.text(max_size=6),
        "reasoning": st.text(max_size=6),
        "role": st.just("assistant"),
        "tool_calls": json_values,
    }
)
choices = shaped(
    {
        "index": st.integers(0, 3),
        "delta": deltas,
        "text": st.text(max_size=6),
        "finish_reason": st.sampled_from(["stop", "length"]),
        "logprobs": st.none(),
    }
)
usages = shaped({"prompt_tokens": counts, "completion_tokens": counts, "total_tokens": counts})
chunk_objects = shaped(
    {
        "id": st.text(max_size=6),
        "object": st.just("chat.completion.chunk"),
        "choices": st.lists(choices, max_size=2),
        "usage": usages,
        "error": shaped({"message": st.text(max_size=20), "code": json_values}),
    }
)
# A well-formed chunk (chat or completions) with one or two of its fields replaced by anything:
# type confusion one field at a time, the rest intact, so the decoder reads up to that field.
CHAT_CHUNK = {
    "id": "c",
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "tok"}, "finish_reason": None}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
}
TEXT_CHUNK = {
    "id": "c",
    "object": "text_completion",
    "choices": [{"index": 0, "text": "tok", "finish_reason": None}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
}
FIELDS: list[tuple[str | int, ...]] = [
    ("choices",),
    ("choices", 0),
    ("choices", 0, "delta"),
    ("choices", 0, "delta", "content"),
    ("choices", 0, "delta", "reasoning_content"),
    ("choices", 0, "delta", "reasoning"),
    ("choices", 0, "text"),
    ("choices", 0, "finish_reason"),
    ("usage",),
    ("usage", "completion_tokens"),
    ("usage", "prompt_tokens"),
    ("error",),
]


@st.composite
def mutated_chunks(draw: st.DrawFn) -> dict[str, Any]:
    obj = orjson.loads(orjson.dumps(draw(st.sampled_from([CHAT_CHUNK, TEXT_CHUNK]))))
    for _ in range(draw(st.integers(1, 2))):
        *parents, last = draw(st.sampled_from(FIELDS))
        node: Any = obj
        for key in parents:
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        settable = isinstance(node, dict) and isinstance(last, str)
        if settable or (isinstance(node, list) and isinstance(last, int) and node):
            node[last] = draw(st.one_of(counts, json_values))
    return obj


# An event: a chunk with a field replaced, a chunk-shaped object, any JSON value, arbitrary
# bytes, or [DONE].
events = st.one_of(
    mutated_chunks().map(orjson.dumps),
    chunk_objects.map(orjson.dumps),
    json_values.map(orjson.dumps),
    st.binary(max_size=60).filter(lambda b: b"\n" not in b and b"\r" not in b),  # one line
    st.just(b"[DONE]"),
)


def split(data: bytes, at: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in at})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


# -- the SSE splitter ----------------------------------------------------------------------------


def sse_events(pieces: list[bytes], cap: int) -> tuple[list[tuple[bytes, str]], bool | None]:
    """The events of the pieces fed in order, and close()'s verdict; (events so far, None)
    when an SSEError ended the stream. Anything else propagates, and fails the test."""
    s = SSESplitter(cap)
    out: list[tuple[bytes, str]] = []
    for piece in pieces:
        try:
            evs = s.feed(piece)
        except SSEError:
            return out, None
        for ev in evs:
            assert isinstance(ev.data, bytes) and isinstance(ev.event, str)
            out.append((ev.data, ev.event))
    torn = s.close()
    assert isinstance(torn, bool)
    return out, torn


@EXAMPLES
@given(sse_bytes, cuts, st.sampled_from([16, 64, MAX_PENDING_BYTES]))
def test_the_sse_splitter_takes_any_bytes(data: bytes, at: list[int], cap: int) -> None:
    sse_events(split(data, at), cap)


@EXAMPLES
@given(sse_bytes, cuts)
def test_the_sse_splitter_gives_the_same_events_however_the_bytes_are_split(
    data: bytes, at: list[int]
) -> None:
    assert sse_events(split(data, at), MAX_PENDING_BYTES) == sse_events([data], MAX_PENDING_BYTES)


@EXAMPLES
@given(st.binary(max_size=300))
def test_split_region_takes_any_region(data: bytes) -> None:
    """A region is what feed_region returns: LF-normalised, ending in a blank line."""
    region = data.replace(b"\r", b"\n") + b"\n\n"
    for ev in split_region(region):
        assert isinstance(ev.data, bytes) and isinstance(ev.event, str)


# -- the lean client's HTTP/1.1 parser -----------------------------------------------------------


@EXAMPLES
@given(http_bytes, cuts)
def test_the_http_parser_takes_any_bytes(data: bytes, at: list[int]) -> None:
    p = ResponseParser()
    try:
        for piece in split(data, at):
            body = p.feed(piece)
            assert isinstance(body, bytes)
            if p.complete:
                break
        else:
            assert isinstance(p.eof(), bool)
    except HTTPProtocolError:
        return
    if p.head_done:
        assert isinstance(p.status, int) and isinstance(p.headers, dict)


# -- the OpenAI stream decoder -------------------------------------------------------------------


def decode(dec: StreamDecoder, data: bytes) -> int | StreamError:
    """The event's tokens, or the StreamError it raised (anything else propagates)."""
    try:
        n = dec.on_event(data)
    except StreamError as exc:
        return exc
    return n


def assert_sane(dec: StreamDecoder, outcome: int | StreamError) -> None:
    """Token counts are non-negative ints; an error carries an ErrorKind and a string; what the
    decoder kept has the types the records need."""
    if isinstance(outcome, StreamError):
        assert isinstance(outcome.kind, ErrorKind) and isinstance(outcome.detail, str)
    else:
        assert type(outcome) is int and outcome >= 0, outcome
    assert dec.completion_tokens is None or type(dec.completion_tokens) is int
    assert dec.prompt_tokens is None or type(dec.prompt_tokens) is int
    assert dec.finish_reason is None or isinstance(dec.finish_reason, str), dec.finish_reason
    assert isinstance(dec.usage_per_chunk, bool) and isinstance(dec.done, bool)


@EXAMPLES
@given(st.lists(st.binary(max_size=120), max_size=6))
def test_the_decoder_takes_any_bytes(datas: list[bytes]) -> None:
    dec = StreamDecoder()
    for data in datas:
        outcome = decode(dec, data)
        assert_sane(dec, outcome)
        if isinstance(outcome, StreamError):
            break


@EXAMPLES
@given(json_values)
def test_the_decoder_takes_any_json_value(value: Any) -> None:
    dec = StreamDecoder(text=[])
    assert_sane(dec, decode(dec, orjson.dumps(value)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, max_size=6), st.booleans())
def test_the_decoder_takes_any_chunk_shaped_stream(stream: list[bytes], keep_text: bool) -> None:
    """Chunk-shaped objects with any value in any field (a string delta, choices that are a
    number, counts that are negative, huge, floats or text), in any order: per event, and as
    one region, with the same outcome."""
    dec = StreamDecoder(text=[] if keep_text else None)
    tokens: list[int] = []
    failure: StreamError | None = None
    for data in stream:
        outcome = decode(dec, data)
        assert_sane(dec, outcome)
        if isinstance(outcome, StreamError):
            failure = outcome
            break
        if outcome:
            tokens.append(outcome)
    # the same stream as one read: on_region must agree with on_event
    region_dec = StreamDecoder(text=[] if keep_text else None)
    region_tokens: list[int] = []
    region = b"".join(b"data: " + d + b"\n\n" for d in stream)
    try:
        region_dec.on_region(region, region_tokens)
    except StreamError as exc:
        assert failure is not None and exc.kind == failure.kind, (exc.kind, failure)
    else:
        assert failure is None, failure
    assert region_tokens == tokens
    assert_sane(region_dec, 0)


# The fields the decoder reads, with the JSON types they may hold (null: absent).
TYPED: dict[tuple[str | int, ...], tuple[type, ...]] = {
    ("choices",): (list,),
    ("choices", 0): (dict,),
    ("choices", 0, "delta"): (dict,),
    ("choices", 0, "delta", "content"): (str,),
    ("choices", 0, "delta", "reasoning_content"): (str,),
    ("choices", 0, "delta", "reasoning"): (str,),
    ("choices", 0, "text"): (str,),
    ("choices", 0, "finish_reason"): (str,),
    ("usage",): (dict,),
}


# (chunk, field) pairs: a completions chunk has no delta to read
CHUNK_FIELDS = [
    (name, chunk, path)
    for name, chunk in (("chat", CHAT_CHUNK), ("completions", TEXT_CHUNK))
    for path in TYPED
    if not (chunk is TEXT_CHUNK and "delta" in path)
]


def with_field(chunk: dict[str, Any], path: tuple[str | int, ...], value: Any) -> bytes:
    obj = orjson.loads(orjson.dumps(chunk))
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return orjson.dumps(obj)


@EXAMPLES
@given(st.sampled_from(CHUNK_FIELDS), json_values)
def test_a_field_of_the_wrong_type_is_malformed(
    case: tuple[str, dict[str, Any], tuple[str | int, ...]], value: Any
) -> None:
    """A field the decoder reads, holding a JSON type it may not (bool is not a number, a
    number is not text, an object is not a list), ends the request as `malformed`."""
    _, chunk, path = case
    if value is None or (isinstance(value, TYPED[path]) and not isinstance(value, bool)):
        return  # its own type (whose contents other examples vary), or null: absent
    outcome = decode(StreamDecoder(), with_field(chunk, path, value))
    assert isinstance(outcome, StreamError) and outcome.kind is ErrorKind.MALFORMED, outcome


NULLABLE = [c for c in CHUNK_FIELDS if c[2] != ("choices", 0)]
NULLABLE += [("chat", CHAT_CHUNK, ("error",)), ("completions", TEXT_CHUNK, ("error",))]


@pytest.mark.parametrize(
    ("name", "chunk", "path"),
    NULLABLE,
    ids=[f"{n}-{'.'.join(map(str, p))}" for n, _, p in NULLABLE],
)
def test_null_means_absent(name: str, chunk: dict[str, Any], path: tuple[str | int, ...]) -> None:
    """`null` in a field the decoder reads is the field left out: no error."""
    dec = StreamDecoder()
    outcome = decode(dec, with_field(chunk, path, None))
    assert not isinstance(outcome, StreamError), outcome
    assert_sane(dec, outcome)


@EXAMPLES
@given(st.one_of(st.binary(max_size=200), json_values.map(orjson.dumps)))
def test_error_messages_of_any_body_are_short_text(body: bytes) -> None:
    msg = error_message(body)
    assert isinstance(msg, str) and len(msg) <= 300
