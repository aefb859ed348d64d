"""The byte-level fast decoder (`FAST_CHUNK` per event, `FAST_EVENT` per read region) gives the
same results as the orjson path for any event: tokens, usage, finish reason, errors."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.client.openai import FAST_CHUNK, StreamDecoder, StreamError
from harness.client.sse import SSESplitter

TEXT = st.one_of(
    st.sampled_from(["", " tok", "a", "x y", "é", '"', "\\", "\n", "\x01", "\ud7ff"]),
    st.text(max_size=6),
)
INT = st.one_of(st.integers(0, 40), st.sampled_from([2**63, -1]))


SAFE_TEXT = st.sampled_from(["", " tok", "a", "x y", "{}", "[1,2]", "data: "])
SAFE_INT = st.integers(0, 40)


@st.composite
def chunk(draw: st.DrawFn) -> bytes:
    """A chunk in vLLM's shape (half the time exactly it, so the fast path is exercised), or
    bent in one way or another (values, keys, order, whitespace, escapes, repeats, tears)."""
    canon = draw(st.booleans())
    text, num = (SAFE_TEXT, SAFE_INT) if canon else (TEXT, INT)
    chat = draw(st.booleans())
    choice: dict[str, object] = {"index": draw(st.sampled_from([0, 1]))}
    if chat:
        delta: dict[str, object] = {}
        if draw(st.booleans()):
            delta["role"] = "assistant"
        if canon or draw(st.integers(0, 5)):
            delta["content"] = draw(text)
        if not canon and not draw(st.integers(0, 5)):
            delta["reasoning_content"] = draw(st.one_of(st.none(), TEXT))
        # token channels (issue 25): reasoning and tool-call deltas between answers
        other = draw(st.integers(0, 5))
        if other == 1:
            delta.pop("content", None)
            delta[draw(st.sampled_from(["reasoning_content", "reasoning"]))] = draw(text)
        elif other == 2:
            delta.pop("content", None)
            delta["tool_calls"] = [{"index": 0, "function": {"arguments": draw(text)}}]
        choice["delta"] = delta
    else:
        choice["text"] = draw(text if canon else st.one_of(TEXT, st.none()))
    if draw(st.booleans()):
        choice["logprobs"] = None
    choice["finish_reason"] = draw(
        st.sampled_from([None, "stop", "length"] if canon else [None, "stop", "Stop", ""])
    )
    if draw(st.booleans()):
        choice["stop_reason"] = None
    if draw(st.booleans()):
        choice["token_ids"] = None  # vLLM 0.32
    doc: dict[str, object] = {
        "id": draw(st.sampled_from(["cmpl-1", "chatcmpl-ab"] if canon else ['q"x', ""])),
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": draw(num),
        "model": draw(st.sampled_from(["m"] if canon else ["m", "é"])),
    }
    doc["choices"] = [choice] if canon else draw(st.sampled_from([[choice], [], [choice, choice]]))
    if draw(st.integers(0, 3)):
        doc["usage"] = {
            "prompt_tokens": draw(num),
            "total_tokens": draw(num),
            "completion_tokens": draw(num),
        }
        if draw(st.booleans()):
            doc["usage"]["completion_tokens_details"] = None  # vLLM 0.32
    if not canon and not draw(st.integers(0, 4)):
        doc["error"] = {"message": "boom"}
    try:
        raw = orjson.dumps(doc)
    except TypeError:  # an int orjson cannot write: write the JSON text ourselves
        raw = orjson.dumps(doc, default=str)
    bend = 0 if canon else draw(st.integers(0, 6))
    if bend == 1:
        raw = raw.replace(b'":', b'": ', 1)  # whitespace
    elif bend == 2:
        raw = raw.replace(b'"completion_tokens":', b'"completion_tokens":0', 1)  # leading zero
    elif bend == 3:
        raw = raw[:-1] + b',"finish_reason":null}'  # a repeated key, later wins
    elif bend == 4:
        raw = raw[: draw(st.integers(0, len(raw)))]  # torn JSON
    elif bend == 5:
        raw = raw.replace(
            b'"finish_reason":null', b'"finish_reason":null,"finish_reason":"stop"', 1
        )
    return raw


def reference(events: list[bytes]) -> tuple[list[int], object, tuple]:
    """The orjson path, event by event."""
    d = StreamDecoder()
    out: list[int] = []
    err = None
    try:
        for e in events:
            if e == b"[DONE]":
                d.on_event(e)
                continue
            if d.done:
                d.on_event(e)
            n = d._on_json(e)
            if n:
                out.append(n)
                d._tag(1, d._event_channel)
    except StreamError as exc:
        err = (exc.kind, exc.detail)
    return out, err, state(d)


def state(d: StreamDecoder) -> tuple:
    return (
        d.done,
        d.completion_tokens,
        d.prompt_tokens,
        d.usage_per_chunk,
        d._carried,
        d._seen_usage_tokens,
        d.finish_reason,
        d._last_usage,
        d.channel_runs,
        d.reasoning_tokens,
    )


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(chunk(), st.just(b"[DONE]")), max_size=8))
def test_on_event_equals_the_orjson_path(events: list[bytes]) -> None:
    d = StreamDecoder()
    out: list[int] = []
    err = None
    try:
        for e in events:
            n = d.on_event(e)
            if n:
                out.append(n)
    except StreamError as exc:
        err = (exc.kind, exc.detail)
    assert (out, err, state(d)) == reference(events)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(chunk(), st.just(b"[DONE]")), max_size=10), st.data())
def test_on_region_equals_the_orjson_path(events: list[bytes], data: st.DataObject) -> None:
    """The events as an SSE stream cut into reads anywhere: decoding each read's region at once
    gives the orjson path's tokens, error and state."""
    stream = b"".join(b"data: " + e + b"\n\n" for e in events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    sp, d = SSESplitter(), StreamDecoder()
    out: list[int] = []
    err = None
    try:
        for r in reads:
            d.on_region(sp.feed_region(r), out)
    except StreamError as exc:
        err = (exc.kind, exc.detail)
    assert (out, err, state(d)) == reference(events)


@pytest.mark.parametrize(
    "event",
    [
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":8,'
        b'"total_tokens":9,"completion_tokens":1}}',
        b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
        b'"text":" tok","logprobs":null,"finish_reason":"length","stop_reason":null}]}',
        b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
        b'"usage":{"prompt_tokens":8,"total_tokens":8,"completion_tokens":0}}',
    ],
)
def test_the_shapes_vllm_and_the_simulator_send_take_the_fast_path(event: bytes) -> None:
    assert FAST_CHUNK.fullmatch(event) is not None
