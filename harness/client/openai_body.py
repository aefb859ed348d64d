"""The OpenAI request side: each endpoint's path, and the JSON body of one streaming request.

harness.client.openai decodes what comes back; harness.client.endpoints picks the body and the
decoder per endpoint (embeddings bodies are their own module's; the Responses API's is here,
`build_responses_body`, beside the chunk API's, and harness.client.responses decodes it).
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
    harness.client.agent).

    Responses (`build_responses_body`): vLLM's `ignore_eos` goes in the body as for chat (vLLM's
    /v1/responses takes its sampling extensions too); the chunk API's `stream_options` does not
    exist there, nor `messages` (harness.workload.scenario.check_endpoint_workload refuses
    agents there)."""
    if endpoint == "responses":
        rbody = build_responses_body(
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
            rbody["ignore_eos"] = True
        return orjson.dumps(rbody)
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        msgs: list[Any] = []
        if system_prompt:
            msgs.append({"role": "system", "content": system_prompt})
        msgs += messages if messages is not None else _turns(history, prompt)
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


def _turns(history: Sequence[tuple[str, str]], prompt: str) -> list[dict[str, str]]:
    """The earlier (user, assistant) turns as messages, then `prompt` as the user's."""
    msgs: list[dict[str, str]] = []
    for user, answer in history:
        msgs.append({"role": "user", "content": user})
        msgs.append({"role": "assistant", "content": answer})
    msgs.append({"role": "user", "content": prompt})
    return msgs


def build_responses_body(
    *,
    model: str,
    prompt: str,
    system_prompt: str,
    max_tokens: int,
    temperature: float | None,
    top_p: float | None,
    extra: dict[str, Any],
    history: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """The JSON body (as a dict) of one streamed `/v1/responses` request."""
    body: dict[str, Any] = {"model": model}
    body["input"] = _turns(history, prompt) if history else prompt
    if system_prompt:
        body["instructions"] = system_prompt
    body["max_output_tokens"] = max_tokens
    body["stream"] = True
    if temperature is not None:
        body["temperature"] = temperature
    if top_p is not None:
        body["top_p"] = top_p
    extra = dict(extra)
    if isinstance(extra.get("tools"), list):
        extra["tools"] = [_flat_tool(t) for t in extra["tools"]]
    choice = extra.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        extra["tool_choice"] = {"type": "function", "name": choice["function"].get("name")}
    body.update(extra)
    return body


def _flat_tool(tool: object) -> object:
    """A chat-style tool definition in the Responses API's flat shape (others as they are)."""
    if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
        return {"type": tool.get("type", "function"), **tool["function"]}
    return tool
