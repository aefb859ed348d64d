"""The embeddings answer (`harness.client.embeddings`): one JSON document, its vectors counted
and its usage read; anything of another shape is `malformed` (or `server_error`), never an
exception of another kind."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.client.embeddings import (
    EmbeddingsDecoder,
    build_embeddings_body,
    embeddings_bytes_bound,
)
from harness.client.openai import StreamError
from harness.record.records import ErrorKind


def answer(n: int, prompt_tokens: Any = 12, vector: Any = "AAAA") -> bytes:
    return orjson.dumps(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": vector} for i in range(n)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )


def test_a_whole_answer_in_pieces() -> None:
    d = EmbeddingsDecoder()
    raw = answer(3)
    assert d.whole_body
    for i in range(0, len(raw), 7):
        d.feed_body(raw[i : i + 7])
    d.end_body()
    assert d.done and d.n_embeddings == 3 and d.prompt_tokens == 12
    assert d.completion_tokens == 0 and d.channel_runs is None


def test_float_vectors_count_too() -> None:
    d = EmbeddingsDecoder()
    d.on_body(answer(1, vector=[0.5, 0.25]))
    assert d.n_embeddings == 1


@pytest.mark.parametrize(
    ("raw", "kind", "fragment"),
    [
        # cut mid-document
        (answer(2)[:-5], ErrorKind.MALFORMED, "not JSON"),
        # a list, not an object
        (b"[]", ErrorKind.MALFORMED, "not a JSON object"),
        # no data list
        (b'{"object": "list"}', ErrorKind.MALFORMED, "data is not a list"),
        # an entry without a vector
        (b'{"data": [{"index": 0}]}', ErrorKind.MALFORMED, "not an embedding"),
        # usage that is not an object
        (b'{"data": [], "usage": 1}', ErrorKind.MALFORMED, "usage"),
        # the server's error object in a 200
        (b'{"error": {"message": "no pooling"}}', ErrorKind.SERVER_ERROR, "no pooling"),
    ],
)
def test_bad_answers_have_a_kind(raw: bytes, kind: ErrorKind, fragment: str) -> None:
    with pytest.raises(StreamError) as exc:
        EmbeddingsDecoder().on_body(raw)
    assert exc.value.kind is kind and fragment in exc.value.detail


def test_a_count_that_is_no_count_is_flagged_not_read() -> None:
    d = EmbeddingsDecoder()
    d.on_body(answer(1, prompt_tokens=-3))
    assert d.prompt_tokens is None and d.usage_flags


def test_body_and_bound() -> None:
    body = orjson.loads(build_embeddings_body(model="m", inputs=["a b", "c"], extra={"user": "u"}))
    assert body == {"model": "m", "input": ["a b", "c"], "encoding_format": "base64", "user": "u"}
    assert embeddings_bytes_bound(8) > embeddings_bytes_bound(1) > 0
