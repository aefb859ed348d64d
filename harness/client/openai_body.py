"""The OpenAI request side: each endpoint's path, and the JSON body of one streaming request.

harness.client.openai decodes what comes back; harness.client.endpoints picks the body and the
decoder per endpoint (embeddings and Responses bodies are their own modules').
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",  # harness.client.responses
    "embeddings": "/v1/embeddings",  # harness.client.embeddings
}


def build_body(
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
    """The JSON body of one streaming request. `max_tokens_key`: "max_completion_tokens" for
    targets that refuse the older name (harness.client.adapt). `history`: a multi-turn session's
    earlier (user message, assistant answer) pairs, sent before `prompt` (chat: as messages;
    completions: as text, in order). `messages` (chat): the whole conversation after the system
    prompt, given instead of `history` and `prompt` (an agent's, with tool calls and results:
    harness.client.agent)."""
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        msgs: list[Any] = []
        if system_prompt:
            msgs.append({"role": "system", "content": system_prompt})
        if messages is not None:
            msgs += messages
        else:
            for user, answer in history:
                msgs.append({"role": "user", "content": user})
                msgs.append({"role": "assistant", "content": answer})
            msgs.append({"role": "user", "content": prompt})
        body["messages"] = msgs
    else:
        parts = [system_prompt] if system_prompt else []
        for user, answer in history:
            parts += [user, answer]
        body["prompt"] = " ".join([*parts, prompt]) if parts else prompt
    body[max_tokens_key] = max_tokens
    body["stream"] = True
    opts: dict[str, bool] = {"include_usage": True}
    if continuous_usage:
        opts["continuous_usage_stats"] = True
    body["stream_options"] = opts
    if ignore_eos:
        body["ignore_eos"] = True
    if temperature is not None:
        body["temperature"] = temperature
    if top_p is not None:
        body["top_p"] = top_p
    body.update(extra)
    return orjson.dumps(body)
