"""check's verdicts as pure functions (harness.client.check_verdicts): from what a step saw to
its Step, without a server (tests/client/test_check.py walks real servers through them)."""

from __future__ import annotations

import orjson

from harness.client.check_verdicts import (
    FAIL,
    PASS,
    WARN,
    completion,
    embeddings_verdict,
    stream_verdict,
    whole_verdict,
)
from harness.client.openai import StreamDecoder


def _chat(content: object, usage: object = None) -> bytes:
    body: dict[str, object] = {"choices": [{"message": {"content": content}}]}
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


def _whole(body: bytes, elapsed: float = 0.1, max_tokens: int = 16) -> tuple[str, str, str]:
    s = whole_verdict("w", body, "chat", elapsed, 64, max_tokens, 10.0)
    return s.status, s.detail, s.cause


def test_completion_names_what_is_wrong_with_the_shape() -> None:
    assert completion(b"not json", "chat") == "the body is not JSON"
    assert completion(b"[1]", "chat") == "the body is not a JSON object"
    assert completion(b'{"choices": {}}', "chat") == "choices is not a list"
    assert completion(b'{"choices": [{"text": 3}]}', "completions") == (
        "the answer's content is not a string"
    )
    assert completion(_chat("hi", {"prompt_tokens": 1}), "chat") == ("hi", {"prompt_tokens": 1})


def test_whole_verdict_pass_warn_and_fail() -> None:
    good = {"prompt_tokens": 70, "completion_tokens": 5}
    assert _whole(_chat("hello", good))[0] == PASS
    assert "5 completion tokens" in _whole(_chat("hello", good))[1]
    assert _whole(_chat(""))[0] == FAIL  # no content
    assert _whole(_chat("hello"))[:1] == (WARN,)  # no usage
    status, _, cause = _whole(_chat("hello", {"prompt_tokens": 70, "completion_tokens": 99}))
    assert status == FAIL and "ignores max_tokens" in cause
    status, detail, _ = _whole(_chat("hello", {"prompt_tokens": -1, "completion_tokens": 5}))
    assert status == FAIL and "usage is not counts" in detail
    status, detail, _ = _whole(_chat("hello", good), elapsed=6.0)  # over half the read timeout
    assert status == WARN and "took 6.0s" in detail


def test_stream_verdict_needs_a_token_believed_counts_and_the_end() -> None:
    dec = StreamDecoder()
    assert stream_verdict("s", dec, None, 0, 0, 0, 16, "chat").status == FAIL
    not_done = stream_verdict("s", dec, 0.01, 3, 3, 300, 16, "chat")
    assert not_done.status == FAIL and not_done.detail.endswith("no data: [DONE]")
    responses = stream_verdict("s", dec, 0.01, 3, 3, 300, 16, "responses")
    assert responses.detail.endswith("no response.completed")
    dec.done = True
    assert stream_verdict("s", dec, 0.01, 3, 3, 300, 16, "chat").status == PASS
    assert stream_verdict("s", dec, 0.01, 20, 20, 2000, 16, "chat").status == WARN
    dec.completion_tokens = 10**6  # a count this stream cannot have
    assert "usage not believed" in stream_verdict("s", dec, 0.01, 3, 3, 300, 16, "chat").detail


def test_embeddings_verdict() -> None:
    one = orjson.dumps(
        {"data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}], "usage": {}}
    )
    assert embeddings_verdict("e", one, 0.1).status == WARN  # no prompt_tokens in usage
    assert embeddings_verdict("e", b"[]", 0.1).status == FAIL
