"""The OpenAI request and chunk protocol, sans-I/O: build request bodies, decode stream events.

A *token event* is a chunk that carries generated content: `choices[0].text` (completions),
`choices[0].delta.content`, `delta.reasoning_content` or `delta.reasoning` (chat). The role-only
first chunk of a chat stream, empty deltas and the usage-only last chunk are not tokens.

Tokens per chunk: with `stream_options.continuous_usage_stats` vLLM puts the cumulative
`usage.completion_tokens` on every chunk, so a chunk carries the increase since the previous
one (tokens generated behind an empty delta are carried into the next content chunk). Without
per-chunk usage each content chunk counts as one token, and the record says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from harness.record.records import ErrorKind

ENDPOINT_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def build_body(*, endpoint: str, model: str, prompt: str, system_prompt: str, max_tokens: int,
               ignore_eos: bool, continuous_usage: bool, temperature: float | None,
               top_p: float | None, extra: dict[str, Any]) -> bytes:
    """The JSON body of one streaming request."""
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        messages = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": prompt})
        body["messages"] = messages
    else:
        body["prompt"] = f"{system_prompt} {prompt}" if system_prompt else prompt
    body["max_tokens"] = max_tokens
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


class StreamError(Exception):
    """A stream event that ends the request as failed."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(slots=True)
class StreamDecoder:
    """Per-request state while reading one stream's events."""

    done: bool = False
    completion_tokens: int | None = None     # last cumulative usage seen
    prompt_tokens: int | None = None
    usage_per_chunk: bool = False
    _carried: int = 0                        # tokens reported behind contentless chunks
    _seen_usage_tokens: int = 0
    finish_reason: str | None = None

    def on_event(self, data: bytes) -> int:
        """Tokens carried by this event (0 for role-only, empty or usage-only chunks).

        Raises StreamError for a non-JSON event, an `error` object, or events after [DONE].
        """
        if data == b"[DONE]":
            self.done = True
            return 0
        if self.done:
            raise StreamError(ErrorKind.MALFORMED, "data after [DONE]")
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamError(ErrorKind.MALFORMED, f"chunk is not JSON: {data[:80]!r}") from None
        if not isinstance(obj, dict):
            raise StreamError(ErrorKind.MALFORMED, f"chunk is not a JSON object: {data[:80]!r}")
        err = obj.get("error")
        if err is not None:
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamError(ErrorKind.SERVER_ERROR, str(msg)[:300])
        has_content = False
        choices = obj.get("choices")
        if choices:
            c0 = choices[0]
            if not isinstance(c0, dict):
                raise StreamError(ErrorKind.MALFORMED, f"choices[0] is not an object: {data[:80]!r}")
            text = c0.get("text")
            if text is None:
                delta = c0.get("delta")
                if delta:
                    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            has_content = bool(text)
            fr = c0.get("finish_reason")
            if fr:
                self.finish_reason = fr
        usage = obj.get("usage")
        delta_tokens = 0
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            pt = usage.get("prompt_tokens")
            if isinstance(pt, int):
                self.prompt_tokens = pt
            if isinstance(ct, int):
                if choices:
                    self.usage_per_chunk = True
                    delta_tokens = max(ct - self._seen_usage_tokens, 0)
                    self._seen_usage_tokens = ct
                self.completion_tokens = ct
        if not has_content:
            self._carried += delta_tokens
            return 0
        if self.usage_per_chunk:
            n = delta_tokens + self._carried
            self._carried = 0
            return max(n, 1)
        return 1


def error_message(body: bytes) -> str:
    """The `error.message` of an OpenAI-shaped error body, else the start of the body."""
    try:
        obj = orjson.loads(body)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])[:300]
        if isinstance(obj, dict) and "message" in obj:
            return str(obj["message"])[:300]
        if isinstance(obj, dict) and "detail" in obj:
            return str(obj["detail"])[:300]
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return body[:300].decode("utf-8", "replace")
