"""The Embeddings API (`POST /v1/embeddings`) for the simulator: parse the request, build the answer.

Pure functions (no I/O, no clock). An input is a string (its words are its tokens, as a
completion prompt's) or a list of token ids; `input` is one input or a list of them. The cost
is prefill only: `app.py` submits one engine request per HTTP request, its prompt all the
batch's tokens and one output token (the pooled vector is ready when the prefill's last step
ends, as vLLM's pooling runner returns it), so the engine's roofline prices the batch and the
answer waits its turn in the running batch like any prefill. Each vector is
`EMBEDDING_DIMS` float32 zeros-but-one, base64 when `encoding_format = "base64"`, else floats.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import orjson

from harness.sim.protocol import RequestError, completion_tokens

EMBEDDING_DIMS = 64  # small: the simulator prices compute, not the bytes of a 4k-wide vector
MAX_INPUTS = 2048  # OpenAI's limit of inputs per request
EMBEDDINGS_ARGUMENTS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    input_tokens: tuple[int, ...]  # per input
    words: tuple[str, ...]  # every input's tokens, in order (prefix-cache hashes)
    base64: bool


def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, "BadRequestError", param)


def parse_embeddings(data: object, default_model: str, max_model_len: int) -> EmbeddingsRequest:
    """Validate an embeddings body. Raises RequestError (400)."""
    if not isinstance(data, Mapping):
        raise _bad("request body must be a JSON object")
    model = data.get("model") or default_model
    if not isinstance(model, str):
        raise _bad("model must be a string", "model")
    raw = data.get("input")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and all(type(t) is int for t in raw)):
        items: list[object] = [raw]
    elif isinstance(raw, list) and raw:
        items = list(raw)
    else:
        raise _bad("input must be a string, a list of strings or token-id lists", "input")
    if len(items) > MAX_INPUTS:
        raise _bad(f"at most {MAX_INPUTS} inputs per request, got {len(items)}", "input")
    lengths: list[int] = []
    words: list[str] = []
    for i, item in enumerate(items):
        try:
            toks = completion_tokens(item)
        except RequestError:
            raise _bad(
                "each input must be a string or a list of token ids", f"input[{i}]"
            ) from None
        if not toks:
            raise _bad("an input is empty", f"input[{i}]")
        if len(toks) > max_model_len:
            raise _bad(
                f"This model's maximum context length is {max_model_len} tokens. However, "
                f"input[{i}] has {len(toks)} tokens.",
                "input",
            )
        lengths.append(len(toks))
        words += toks
    fmt = data.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise _bad('encoding_format must be "float" or "base64"', "encoding_format")
    return EmbeddingsRequest(model, tuple(lengths), tuple(words), fmt == "base64")


def _vector(i: int, as_base64: bool) -> object:
    v = np.zeros(EMBEDDING_DIMS, dtype=np.float32)
    v[i % EMBEDDING_DIMS] = 1.0
    if as_base64:
        return base64.b64encode(v.tobytes()).decode("ascii")
    return v.tolist()


def embeddings_body(req: EmbeddingsRequest) -> bytes:
    """The answer: one vector per input, and the usage."""
    n = sum(req.input_tokens)
    return orjson.dumps(
        {
            "object": "list",
            "model": req.model,
            "data": [
                {"object": "embedding", "index": i, "embedding": _vector(i, req.base64)}
                for i in range(len(req.input_tokens))
            ],
            "usage": {"prompt_tokens": n, "total_tokens": n},
        }
    )


__all__ = [
    "EMBEDDINGS_ARGUMENTS",
    "EMBEDDING_DIMS",
    "EmbeddingsRequest",
    "embeddings_body",
    "parse_embeddings",
]
