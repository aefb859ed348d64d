"""Which API a run speaks: per endpoint, the request body and the decoder of the answer.

`chat` and `completions` stream OpenAI chunks (harness.client.openai); `responses` streams the
Responses API's typed events (harness.client.responses); `embeddings` answers one JSON document,
not a stream (harness.client.embeddings). The engine, `check` and the probes ask here.
"""

from __future__ import annotations

from harness.client.embeddings import EmbeddingsDecoder
from harness.client.openai import ENDPOINT_PATHS, StreamDecoder, build_body
from harness.client.responses import ResponsesDecoder

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


# one streamed generation request's body on `endpoint` (chat, completions, responses): see its
# docstring; the name the engine, `check` and the probes call it by
build_generation_body = build_body


__all__ = [
    "ENDPOINT_PATHS",
    "STREAMED",
    "accept_header",
    "build_generation_body",
    "decoder_for",
]
