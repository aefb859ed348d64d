"""`check`'s requests per endpoint: the bodies it sends and how it reads a whole answer.

chat and completions: OpenAI's chunk API; responses: the Responses API (`input`,
`max_output_tokens`; the answer's text in `output[].content[]` parts of type `output_text`, its
usage as `input_tokens` / `output_tokens`); embeddings: one input, the answer read by
`EmbeddingsDecoder` (never streamed).
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.client.embeddings import EmbeddingsDecoder, build_embeddings_body


def check_body(endpoint: str, model: str, prompt: str, max_tokens: int, stream: bool) -> bytes:
    """The body of `check`'s plain request on `endpoint` (no extensions)."""
    if endpoint == "embeddings":
        return build_embeddings_body(model=model, inputs=[prompt], extra={})
    body: dict[str, Any] = {"model": model}
    if endpoint == "responses":
        body.update(input=prompt, max_output_tokens=max_tokens, stream=stream)
        return orjson.dumps(body)
    body.update(max_tokens=max_tokens, stream=stream)
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def responses_answer(d: dict[str, Any]) -> tuple[str, dict[str, Any]] | str:
    """(text, usage as prompt_tokens / completion_tokens) of a whole Responses answer, or what
    is wrong with its shape."""
    output = d.get("output")
    if not isinstance(output, list):
        return "output is not a list"
    text = ""
    for item in output:
        if not isinstance(item, dict):
            return "output[] is not an object"
        parts = item.get("content") if item.get("type") == "message" else None
        for p in parts if isinstance(parts, list) else ():
            if isinstance(p, dict) and p.get("type") == "output_text":
                t = p.get("text")
                if not isinstance(t, str):
                    return "an output_text part's text is not a string"
                text += t
    usage = d.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return "usage is not an object"
    u = usage or {}
    return text, {
        "prompt_tokens": u.get("input_tokens"),
        "completion_tokens": u.get("output_tokens"),
    }


def embeddings_answer(body: bytes) -> EmbeddingsDecoder:
    """The decoded whole embeddings answer. Raises StreamError for one of another shape."""
    dec = EmbeddingsDecoder()
    dec.on_body(body)
    return dec


__all__ = ["check_body", "embeddings_answer", "responses_answer"]
