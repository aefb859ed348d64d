"""The chunk decoder checks the type of every field it reads: a chunk of another shape is
`malformed` (a StreamError), never an AttributeError or TypeError, whether it comes alone
(`on_event`) or inside a read's region (`on_region`, the lean client's path); a usage count that
is not a count is not read, and is flagged (harness.record.usage)."""

from __future__ import annotations

from array import array
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.client.openai import StreamDecoder, StreamError
from harness.record.records import ErrorKind

FAST = b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'

WRONG_SHAPES = [
    ({"choices": [{"index": 0, "delta": "x"}]}, "choices[0].delta is not an object"),
    ({"choices": 5}, "choices is not a list"),
    ({"choices": {}}, "choices is not a list"),
    ({"choices": "abc"}, "choices is not a list"),
    ({"choices": [5]}, "choices[0] is not an object"),
    ({"choices": [{"text": 5}]}, "choices[0].text is not a string"),
    ({"choices": [{"delta": {"content": ["a"]}}]}, "choices[0].delta.content is not a string"),
    ({"choices": [{"delta": {"reasoning_content": 1}}]}, "delta.reasoning_content is not"),
    ({"choices": [{"delta": {"reasoning": {}}}]}, "choices[0].delta.reasoning is not a string"),
    ({"choices": [{"delta": {"content": "a"}, "finish_reason": 3}]}, "finish_reason is not"),
    ({"choices": [], "usage": [1, 2]}, "usage is not an object"),
    ({"choices": [], "usage": "12"}, "usage is not an object"),
    ([1, 2], "chunk is not a JSON object"),
    ("text", "chunk is not a JSON object"),
    (None, "chunk is not a JSON object"),
]


@pytest.mark.parametrize(("obj", "what"), WRONG_SHAPES, ids=[w for _, w in WRONG_SHAPES])
def test_a_wrong_shape_is_malformed_alone_and_in_a_region(obj: Any, what: str) -> None:
    data = orjson.dumps(obj)
    with pytest.raises(StreamError) as one:
        StreamDecoder().on_event(data)
    assert one.value.kind is ErrorKind.MALFORMED and what in one.value.detail
    # the lean client decodes a read's events at once: the same error, after the good event
    tokens: array[int] = array("q")
    with pytest.raises(StreamError) as region:
        StreamDecoder().on_region(FAST + b"data: " + data + b"\n\n", tokens)
    assert region.value.kind is ErrorKind.MALFORMED and what in region.value.detail
    assert list(tokens) == [1]


@pytest.mark.parametrize(
    "raw",
    [
        b"NaN",  # not JSON
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":NaN}}',
        b'{"choices":[],"usage":{"completion_tokens":1e400}}',  # beyond a double
        b"{",
    ],
)
def test_not_json_is_malformed(raw: bytes) -> None:
    with pytest.raises(StreamError) as e:
        StreamDecoder().on_event(raw)
    assert e.value.kind is ErrorKind.MALFORMED


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "not_integer"),  # a float
        (64.0, "not_integer"),  # a float, even a whole one
        ("12", "not_integer"),  # a string
        (True, "not_integer"),  # a boolean is not a count
        (-3, "negative"),
        (2**63, "over_bytes"),  # beyond any body (and beyond int64)
        (2**64 - 1, "over_bytes"),
    ],
)
def test_a_count_that_is_not_a_count_is_flagged_not_read(value: Any, reason: str) -> None:
    dec = StreamDecoder()
    chunk = {
        "choices": [{"index": 0, "delta": {"content": "a"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": value},
    }
    assert dec.on_event(orjson.dumps(chunk)) == 1  # one token event, counted as one
    assert dec.completion_tokens is None and dec.prompt_tokens == 5
    assert dec.usage_flags and dec.usage_flags[0].startswith(f"{reason}: completion_tokens")
    dec.on_event(orjson.dumps(chunk))  # flagged once per field
    assert len(dec.usage_flags) == 1


def test_a_bad_prompt_count_is_flagged_apart() -> None:
    dec = StreamDecoder()
    dec.on_event(
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":-1,"completion_tokens":1}}'
    )
    assert dec.prompt_tokens is None and dec.completion_tokens == 1
    assert dec.usage_flags == ("negative: prompt_tokens -1",)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    choices=JSON,
    c0=JSON,
    delta=JSON,
    content=JSON,
    finish=JSON,
    usage=JSON,
    ct=JSON,
    where=st.sampled_from(["choices", "c0", "delta", "content", "finish", "usage", "ct"]),
)
def test_any_value_in_any_field_is_data_or_malformed(
    choices: Any, c0: Any, delta: Any, content: Any, finish: Any, usage: Any, ct: Any, where: str
) -> None:
    # a well-formed chunk with one field replaced by an arbitrary JSON value
    obj: dict[str, Any] = {
        "choices": [
            {"index": 0, "delta": {"content": "a"}, "finish_reason": None},
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    if where == "choices":
        obj["choices"] = choices
    elif where == "c0":
        obj["choices"] = [c0]
    elif where == "delta":
        obj["choices"][0]["delta"] = delta
    elif where == "content":
        obj["choices"][0]["delta"]["content"] = content
    elif where == "finish":
        obj["choices"][0]["finish_reason"] = finish
    elif where == "usage":
        obj["usage"] = usage
    else:
        obj["usage"]["completion_tokens"] = ct
    try:
        data = orjson.dumps(obj)
    except orjson.JSONEncodeError:  # integers beyond 64 bits cannot be sent
        return
    for dec in (StreamDecoder(), StreamDecoder(text=[])):
        try:
            n = dec.on_event(data)
        except StreamError as e:
            assert e.kind in (ErrorKind.MALFORMED, ErrorKind.SERVER_ERROR)
            continue
        assert isinstance(n, int) and 0 <= n < 2**63
        assert dec.completion_tokens is None or 0 <= dec.completion_tokens < 2**53
