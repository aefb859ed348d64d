"""Token channels in the stream decoder: every token event is an answer, reasoning or tool event,
read from the delta's fields, the same on the aiohttp path (`on_event`, event by event) and the
lean client's (`on_region`, a read's events at once, cut anywhere)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.client.openai import StreamDecoder, StreamError
from harness.client.sse import SSESplitter
from harness.record.records import Channel, ErrorKind, chunk_channels

A, R, T = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)


def delta(
    d: dict[str, Any], usage: dict[str, Any] | None = None, finish: str | None = None
) -> bytes:
    doc: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        doc["usage"] = usage
    return orjson.dumps(doc)


def fast(text: str, c: int) -> bytes:
    """An answer chunk in vLLM's exact shape (the decoder's fast path)."""
    return (
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
        b'[{"index":0,"delta":{"content":"' + text.encode() + b'"},"logprobs":null,'
        b'"finish_reason":null}],"usage":{"prompt_tokens":8,"total_tokens":%d,'
        b'"completion_tokens":%d}}' % (8 + c, c)
    )


def usage(c: int, reasoning: int | None = None) -> dict[str, Any]:
    u: dict[str, Any] = {"prompt_tokens": 8, "total_tokens": 8 + c, "completion_tokens": c}
    if reasoning is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return u


def tool(name: str | None = None, args: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if args is not None:
        fn["arguments"] = args
    call: dict[str, Any] = {"index": 0, "function": fn}
    if name is not None:
        call |= {"id": "call_1", "type": "function"}
    return {"tool_calls": [call]}


# A reasoning model that then answers (vLLM's reasoning parser: `reasoning_content`), with
# per-chunk usage, the answer in the fast shape, and the usage's reasoning count.
REASON_THEN_ANSWER = [
    delta({"role": "assistant", "content": ""}, usage(0)),
    delta({"reasoning_content": "Let"}, usage(1)),
    delta({"reasoning_content": " me"}, usage(2)),
    delta({"reasoning_content": " think"}, usage(4)),  # two tokens in one chunk
    fast(" Paris", 5),
    fast(" is", 6),
    delta({}, usage(7)),  # bytes held back, a token made: it continues the answer
    orjson.dumps({"id": "x", "choices": [], "usage": usage(7, reasoning=4)}),
    b"[DONE]",
]
# An OpenRouter-style gateway (`reasoning`), then a tool call, without per-chunk usage.
REASON_THEN_TOOL = [
    delta({"role": "assistant"}),
    delta({"reasoning": "hmm"}),
    delta(tool("get_weather", "")),
    delta(tool(args='{"city": ')),
    delta(tool(args='"Paris"}')),
    delta({}, finish="tool_calls"),
    orjson.dumps({"id": "x", "choices": [], "usage": usage(9, reasoning=1)}),
    b"[DONE]",
]
PLAIN = [
    delta({"role": "assistant", "content": ""}, usage(0)),
    fast(" a", 1),
    fast(" b", 2),
    b"[DONE]",
]


def on_events(events: list[bytes]) -> tuple[list[int], StreamDecoder]:
    d = StreamDecoder()
    out = [n for e in events if (n := d.on_event(e))]
    return out, d


def on_regions(events: list[bytes], cuts: list[int]) -> tuple[list[int], StreamDecoder]:
    stream = b"".join(b"data: " + e + b"\n\n" for e in events)
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    sp, d = SSESplitter(), StreamDecoder()
    out: list[int] = []
    for r in reads:
        d.on_region(sp.feed_region(r), out)
    return out, d


@pytest.mark.parametrize(
    ("events", "tokens", "channels", "reasoning_usage"),
    [
        (REASON_THEN_ANSWER, [1, 1, 2, 1, 1, 1], [R, R, R, A, A, A], 4),
        (REASON_THEN_TOOL, [1, 1, 1, 1], [R, T, T, T], 1),  # the name chunk is the first tool event
        (PLAIN, [1, 1], [A, A], None),  # no reasoning: no runs at all
    ],
)
def test_channels_from_the_delta_fields_on_both_paths(
    events: list[bytes], tokens: list[int], channels: list[int], reasoning_usage: int | None
) -> None:
    stream_len = len(b"".join(b"data: " + e + b"\n\n" for e in events))
    splits: list[list[int]] = [[], *([i] for i in range(1, stream_len))]  # whole, and cut anywhere
    results = [on_events(events)] + [on_regions(events, c) for c in splits]
    for out, d in results:
        assert out == tokens
        runs = tuple(d.channel_runs or ())
        assert list(chunk_channels(runs, len(out))) == channels
        assert d.reasoning_tokens == reasoning_usage
        assert d.done
    if channels == [A] * len(channels):
        assert all(d.channel_runs is None for _, d in results)  # nothing kept per event


def test_a_multi_turn_history_keeps_the_answer_only() -> None:
    d = StreamDecoder()
    d.text = []
    for e in REASON_THEN_ANSWER:
        d.on_event(e)
    assert "".join(d.text) == " Paris is"


@pytest.mark.parametrize(
    ("calls", "what"),
    [
        ({"tool_calls": {"x": 1}}, "tool_calls is not a list"),
        ({"tool_calls": [3]}, "tool_calls[] is not an object"),
        ({"tool_calls": [{"function": "f"}]}, "function is not an object"),
        ({"tool_calls": [{"function": {"arguments": 7}}]}, "function.arguments is not a string"),
    ],
)
def test_a_tool_call_of_another_shape_is_malformed(calls: dict[str, Any], what: str) -> None:
    with pytest.raises(StreamError) as e:
        StreamDecoder().on_event(delta(calls))
    assert e.value.kind is ErrorKind.MALFORMED and what in e.value.detail


def test_a_reasoning_count_that_is_not_a_count_is_flagged_not_read() -> None:
    d = StreamDecoder()
    d.on_event(
        orjson.dumps(
            {
                "choices": [],
                "usage": {**usage(3), "completion_tokens_details": {"reasoning_tokens": -2}},
            }
        )
    )
    assert d.reasoning_tokens is None
    assert d.usage_flags == ("negative: reasoning_tokens -2",)
