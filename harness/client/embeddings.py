"""The Embeddings API (`POST /v1/embeddings`), sans-I/O: the request body and the answer.

An embeddings answer is not streamed: one JSON document, `{"object": "list", "data": [{"object":
"embedding", "index": i, "embedding": [...] | "<base64>"}, ...], "usage": {"prompt_tokens": n,
"total_tokens": n}}` (OpenAI's reference; vLLM's pooling runner answers the same shape). The
transports hand the whole body to `EmbeddingsDecoder.on_body` when the response is complete
(`whole_body`); the request's latency is then sent -> the read that completed the body. There is
no token event, so no TTFT and no ITL: the record carries no stamps, its `prompt_tokens` from
`usage.prompt_tokens`, and `n_embeddings`, which the engine holds against the inputs it sent.

The body asks for `encoding_format = "base64"`: 4 bytes a dimension on the wire instead of a
decimal float's ~10, and nothing here decodes the vectors (their count is what is checked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from harness.client.openai import StreamDecoder, StreamError, _malformed, server_text
from harness.record.records import ErrorKind
from harness.record.usage import MAX_COUNT

# The most body bytes an embeddings answer may carry before the client ends it as body_too_large:
# per input, a 16k-dimension float32 vector in base64 (~88 KiB) or as decimal text (~200 KiB),
# with room to spare. A bound against a server that never ends its answer, not a size it is owed.
EMBEDDING_BYTES_PER_INPUT = 1 << 20
EMBEDDING_BYTES_BASE = 1 << 20


def embeddings_bytes_bound(n_inputs: int) -> int:
    """Body bytes an answer for `n_inputs` inputs may carry."""
    return EMBEDDING_BYTES_BASE + EMBEDDING_BYTES_PER_INPUT * max(n_inputs, 1)


def build_embeddings_body(*, model: str, inputs: list[str], extra: dict[str, Any]) -> bytes:
    """The JSON body of one `/v1/embeddings` request for `inputs` (a batch of texts)."""
    body: dict[str, Any] = {"model": model, "input": inputs, "encoding_format": "base64"}
    body.update(extra)
    return orjson.dumps(body)


@dataclass(slots=True)
class EmbeddingsDecoder(StreamDecoder):
    """The decoder of a whole (not streamed) embeddings answer."""

    n_embeddings: int | None = None  # entries of `data` in the answer
    parts: list[bytes] = field(default_factory=list)  # the body as it arrives

    whole_body: ClassVar[bool] = True

    def feed_body(self, data: bytes) -> None:
        self.parts.append(data)

    def end_body(self) -> None:
        """The body is complete: decode it. Raises StreamError (malformed / server_error)."""
        data = b"".join(self.parts)
        self.parts.clear()
        self.on_body(data)

    def on_body(self, data: bytes) -> None:
        """Read the answer's `data` count and `usage`; `done` after. Raises StreamError."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamError(ErrorKind.MALFORMED, f"answer is not JSON: {data[:80]!r}") from None
        if type(obj) is not dict:
            raise _malformed("answer is not a JSON object", data)
        err = obj.get("error")
        if err is not None:
            msg = err.get("message", err) if type(err) is dict else err
            raise StreamError(ErrorKind.SERVER_ERROR, server_text(msg))
        items = obj.get("data")
        if type(items) is not list:
            raise _malformed("data is not a list", data)
        for item in items:
            if type(item) is not dict or not isinstance(item.get("embedding"), list | str):
                raise _malformed("data[] is not an embedding object", data)
        problem = vectors_problem(items)
        if problem:
            raise StreamError(ErrorKind.MALFORMED, problem)
        self.n_embeddings = len(items)
        usage = obj.get("usage")
        if usage is not None and type(usage) is not dict:
            raise _malformed("usage is not an object", data)
        pt = (usage or {}).get("prompt_tokens")
        if pt is not None:
            if type(pt) is int and 0 <= pt <= MAX_COUNT:
                self.prompt_tokens = pt
            else:
                self._not_a_count("prompt_tokens", pt)
        self.completion_tokens = 0
        self.done = True


def vectors_problem(items: list[dict[str, Any]]) -> str | None:
    """What is wrong with an answer's embeddings, None when nothing: each `index` (where any is
    given) an integer, together a permutation of 0..n-1 (no input answered twice or not at
    all), and every vector non-empty and of one length (base64 text: one length of text)."""
    indices = [item.get("index") for item in items]
    if any(i is not None for i in indices):
        if any(type(i) is not int for i in indices):
            return "an embedding's index is not an integer"
        if sorted(indices) != list(range(len(items))):  # type: ignore[type-var]
            bad = sorted(set(indices))  # type: ignore[type-var]
            return (
                f"the embeddings' indices are not a permutation of 0..{len(items) - 1}: {bad[:8]}"
            )
    lengths = {len(item["embedding"]) for item in items}
    if 0 in lengths:
        return "an embedding is empty"
    if len(lengths) > 1:
        return f"the embeddings differ in length: {sorted(lengths)[:8]}"
    return None


def answer_bound_detail(limit_bytes: int) -> str:
    """The detail of an embeddings answer past its byte bound (the run and `check` alike)."""
    return f"the answer went on past {limit_bytes} bytes, its bound for the inputs sent"


__all__ = [
    "EmbeddingsDecoder",
    "answer_bound_detail",
    "vectors_problem",
    "build_embeddings_body",
    "embeddings_bytes_bound",
]
