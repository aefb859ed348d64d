"""The Responses API decoder (`harness.client.responses`): typed events to token events with
channels, the terminal event's usage, and every event of another shape `malformed`, never an
exception -- the same event by event (`on_event`) and a read's events at once (`on_region`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.client.endpoints import build_generation_body, decoder_for
from harness.client.openai import StreamError
from harness.client.responses import ResponsesDecoder
from harness.client.sse import SSESplitter
from harness.record.records import Channel, ErrorKind, chunk_channels

A, R, T = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)


def ev(kind: str, **fields: Any) -> bytes:
    """One SSE event as vLLM writes it: `event:` and `data:` naming the type twice."""
    data = orjson.dumps({"type": kind, **fields, "sequence_number": 0})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def completed(out: int, reasoning: int, cached: int = 0, kind: str = "completed") -> bytes:
    usage = {
        "input_tokens": 9,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": 9 + out,
    }
    resp: dict[str, Any] = {"id": "resp_1", "status": kind, "usage": usage}
    if kind == "incomplete":
        resp["incomplete_details"] = {"reason": "max_output_tokens"}
    return ev(f"response.{kind}", response=resp)


# A known stream: 2 reasoning deltas (one a summary), a function call's name (no token) and 2
# argument deltas, an empty answer delta (no token), 2 answer deltas, then the usage.
STREAM = [
    ev("response.created", response={"id": "resp_1", "status": "in_progress"}),
    ev("response.in_progress", response={"id": "resp_1"}),
    ev("response.output_item.added", output_index=0, item={"type": "reasoning"}),
    ev("response.reasoning_text.delta", item_id="r", output_index=0, delta="hmm"),
    ev("response.reasoning_summary_text.delta", item_id="r", output_index=0, delta=" so"),
    ev("response.output_item.added", output_index=1, item={"type": "function_call", "name": "f"}),
    ev("response.function_call_arguments.delta", item_id="f", output_index=1, delta='{"q":'),
    ev("response.function_call_arguments.delta", item_id="f", output_index=1, delta='"x"}'),
    ev("response.function_call_arguments.done", item_id="f", output_index=1, arguments="{}"),
    ev("response.output_text.delta", item_id="m", output_index=2, delta=""),
    ev("response.output_text.delta", item_id="m", output_index=2, delta="Paris"),
    ev("response.output_text.delta", item_id="m", output_index=2, delta=" it is"),
    ev("response.output_text.done", item_id="m", output_index=2, text="Paris it is"),
    completed(6, 2, cached=4),
]
CHANNELS = [R, R, T, T, A, A]


def _events(raw: bytes) -> list[bytes]:
    return [e.data for e in SSESplitter().feed(raw)]


def test_a_known_stream_event_by_event() -> None:
    d = ResponsesDecoder(text=[])
    tokens = [n for e in _events(b"".join(STREAM)) if (n := d.on_event(e))]
    assert tokens == [1] * 6
    assert list(chunk_channels(tuple(d.channel_runs or ()), len(tokens))) == CHANNELS
    assert d.done and d.finish_reason == "tool_calls"
    assert (d.prompt_tokens, d.completion_tokens, d.reasoning_tokens) == (9, 6, 2)
    assert d.cached_tokens == 4  # usage.input_tokens_details.cached_tokens, as sent
    assert d.text == ["Paris", " it is"]  # the answer's text only (multi-turn history)


@pytest.mark.parametrize("cut", [1, 7, 100, 333, 600])
def test_reads_cut_anywhere_decode_the_same(cut: int) -> None:
    raw = b"".join(STREAM)
    d = ResponsesDecoder()
    splitter = SSESplitter()
    tokens: list[int] = []
    for i in range(0, len(raw), cut):  # the lean client's path: a read's events at once
        d.on_region(splitter.feed_region(raw[i : i + cut]), tokens)
    assert tokens == [1] * 6 and d.done
    assert list(chunk_channels(tuple(d.channel_runs or ()), len(tokens))) == CHANNELS


def test_incomplete_is_a_length_finish() -> None:
    d = ResponsesDecoder()
    for e in _events(
        ev("response.output_text.delta", delta="a") + completed(1, 0, kind="incomplete")
    ):
        d.on_event(e)
    assert d.done and d.finish_reason == "length" and d.completion_tokens == 1
    assert d.channel_runs is None  # answers only: nothing to record per event


@pytest.mark.parametrize(
    ("raw", "kind", "fragment"),
    [
        # not JSON
        (b"data: {nope\n\n", ErrorKind.MALFORMED, "not JSON"),
        # JSON, not an object
        (b"data: [1]\n\n", ErrorKind.MALFORMED, "not a JSON object"),
        # an object without a type
        (b'data: {"delta": "x"}\n\n', ErrorKind.MALFORMED, "no string type"),
        # a delta that is not a string
        (ev("response.output_text.delta", delta=5), ErrorKind.MALFORMED, "delta is not a string"),
        # usage that is not an object
        (ev("response.completed", response={"usage": 3}), ErrorKind.MALFORMED, "usage"),
        # the server gave up: response.failed with its error
        (
            ev("response.failed", response={"error": {"code": "server_error", "message": "boom"}}),
            ErrorKind.SERVER_ERROR,
            "boom",
        ),
        # an error event
        (
            ev("error", code="x", message="overloaded", param=None),
            ErrorKind.SERVER_ERROR,
            "overloaded",
        ),
    ],
)
def test_bad_events_end_the_request_with_a_kind(raw: bytes, kind: ErrorKind, fragment: str) -> None:
    d = ResponsesDecoder()
    with pytest.raises(StreamError) as exc:
        for e in _events(raw):
            d.on_event(e)
    assert exc.value.kind is kind and fragment in exc.value.detail


def test_events_after_the_terminal_one_are_ignored_and_counted() -> None:
    """A gateway's `data: [DONE]` (and anything else) after `response.completed` in the same
    read: the response ended at its terminal event, with its usage; the rest is counted."""
    d = ResponsesDecoder()
    tokens: list[int] = []
    region = b"".join(STREAM) + b"data: [DONE]\n\n" + ev("response.output_text.delta", delta="x")
    d.on_region(SSESplitter().feed_region(region), tokens)
    assert d.done and d.completion_tokens == 6 and d.prompt_tokens == 9
    assert len(tokens) == 6 and d.after_end == 2 and d.finish_reason == "tool_calls"


def test_usage_counts_that_are_not_counts_are_flagged_not_read() -> None:
    d = ResponsesDecoder()
    bad = ev("response.completed", response={"usage": {"input_tokens": -1, "output_tokens": "7"}})
    for e in _events(bad):
        d.on_event(e)
    assert d.done and d.prompt_tokens is None and d.completion_tokens is None
    assert len(d.usage_flags) == 2


def test_the_body_is_the_responses_shape() -> None:
    body = orjson.loads(
        build_generation_body(
            endpoint="responses",
            model="m",
            prompt="hi there",
            system_prompt="be brief",
            max_tokens=7,
            ignore_eos=True,
            continuous_usage=True,
            temperature=0.5,
            top_p=None,
            extra={
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                "tool_choice": {"type": "function", "function": {"name": "f"}},
            },
            history=(("q1", "a1"),),
        )
    )
    assert body["input"] == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "hi there"},
    ]
    assert body["instructions"] == "be brief" and body["max_output_tokens"] == 7
    assert body["stream"] is True and "stream_options" not in body and "max_tokens" not in body
    assert body["tools"] == [{"type": "function", "name": "f", "parameters": {}}]
    assert body["tool_choice"] == {"type": "function", "name": "f"}
    assert body["ignore_eos"] is True and body["temperature"] == 0.5
    assert decoder_for("responses") is ResponsesDecoder


def test_a_retry_on_the_lean_client_keeps_the_endpoints_decoder() -> None:
    import asyncio

    from harness.client.fasthttp import Exchange
    from harness.client.state import Counters

    async def go() -> None:
        loop = asyncio.get_running_loop()
        ex = Exchange(0, Counters(), loop.create_future(), ResponsesDecoder)
        ex.reset(loop.create_future())  # a stale kept-alive connection: start over
        assert type(ex.dec) is ResponsesDecoder

    asyncio.run(go())
