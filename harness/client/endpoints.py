"""Which API a run speaks: per endpoint, the request body and the decoder of the answer.

`chat` and `completions` stream OpenAI chunks (harness.client.openai); `responses` streams the
Responses API's typed events (harness.client.responses); `embeddings` answers one JSON document,
not a stream (harness.client.embeddings). The engine, `check` and the probes ask here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from harness.client.embeddings import EmbeddingsDecoder
from harness.client.openai import ENDPOINT_PATHS, StreamDecoder, build_body
from harness.client.responses import ResponsesDecoder, build_responses_body

STREAMED = ("chat", "completions", "responses")


def decoder_for(endpoint: str) -> type[StreamDecoder]:
    """The decoder class of an endpoint's answers."""
    if endpoint == "responses":
        return ResponsesDecoder
    if endpoint == "embeddings":
        return EmbeddingsDecoder
    return StreamDecoder


def accept_header(endpoint: str) -> str:
    return "application/json" if endpoint == "embeddings" else "text/event-stream"


def build_generation_body(
    *,
    endpoint: str,
    model: str,
    prompt: str,
    system_prompt: str,
    max_tokens: int,
    ignore_eos: bool,
    continuous_usage: bool,
    temperature: float | None,
    top_p: float | None,
    extra: dict[str, Any],
    max_tokens_key: str = "max_tokens",
    history: Sequence[tuple[str, str]] = (),
    messages: Sequence[dict[str, Any]] | None = None,
) -> bytes:
    """The body of one streamed generation request on `endpoint` (chat, completions, responses).
    `messages`: an agent step's chat messages after the system prompt (chat only:
    harness.workload.scenario.check_endpoint_workload refuses agents elsewhere).

    Responses: vLLM's `ignore_eos` goes in the body as for chat (vLLM's /v1/responses takes its
    sampling extensions too); the chunk API's `stream_options` does not exist there."""
    if endpoint == "responses":
        body = build_responses_body(
            model=model,
            prompt=prompt,
            system_prompt=system_prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            extra=extra,
            history=history,
        )
        if ignore_eos:
            body["ignore_eos"] = True
        return orjson.dumps(body)
    return build_body(
        endpoint=endpoint,
        model=model,
        prompt=prompt,
        system_prompt=system_prompt,
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        continuous_usage=continuous_usage,
        temperature=temperature,
        top_p=top_p,
        extra=extra,
        max_tokens_key=max_tokens_key,
        history=history,
        messages=messages,
    )


__all__ = [
    "ENDPOINT_PATHS",
    "STREAMED",
    "accept_header",
    "build_generation_body",
    "decoder_for",
]
