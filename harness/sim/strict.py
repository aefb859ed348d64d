"""The `openai-strict` API style: a gateway that validates and streams as OpenAI's API does.

Pure functions (no I/O, no clock), used by `app.py` when `api_style = "openai-strict"`:

- `unknown_arguments` / `refusal`: any request argument OpenAI does not document is refused
  with OpenAI's 400 shape, `{"error": {"message": "Unrecognized request argument supplied:
  ignore_eos", "type": "invalid_request_error", "param": null, "code": null}}`. That covers
  vLLM's extensions (`ignore_eos`, `min_tokens`, `top_k`, `repetition_penalty`, ...), llama.cpp's
  (`cache_prompt`, ...) and `stream_options.continuous_usage_stats`.
- `natural_length`: answers end at a natural EOS, drawn below the requested maximum.
- `StrictChunkWriter`: OpenAI's stream shape: `system_fingerprint` and `"usage": null` on every
  chunk when usage was asked, a role chunk with `refusal`, the finish reason on a chunk of its
  own with an empty delta, and usage only on a last chunk with `choices: []`, only when
  `stream_options.include_usage` is true. A reasoning model's thoughts stream as
  `delta.reasoning`, as OpenRouter-style gateways send them, and tool calls as OpenAI's
  `tool_calls` deltas; usage counts the reasoning in `completion_tokens_details`.

The parameter lists are those of OpenAI's API reference for `POST /v1/chat/completions` and
`POST /v1/completions` (the openai-python SDK's `completion_create_params.py`, 2025).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import orjson

from harness.sim.answer_format import (
    FILLER_TOKENS,
    AnswerWriter,
    channel_choice,
    completion_head,
    filler_text,
    message,
)
from harness.sim.protocol import RequestError

CHAT_ARGUMENTS = frozenset(
    {
        "messages",
        "model",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
COMPLETION_ARGUMENTS = frozenset(
    {
        "model",
        "prompt",
        "best_of",
        "echo",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "suffix",
        "temperature",
        "top_p",
        "user",
    }
)
STREAM_OPTIONS = frozenset({"include_usage", "include_obfuscation"})
EOS_MIN_SHARE = 0.25  # natural answers are drawn from [max_tokens / 4, max_tokens - 1]
SYSTEM_FINGERPRINT = "fp_harness_sim"


class StrictError(RequestError):
    """A refusal in OpenAI's error shape (`code` is a string or null, not the status)."""

    def __init__(
        self,
        status: int,
        message: str,
        err_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(status, message, err_type, param)
        self.code = code

    def body(self) -> bytes:
        return openai_error_body(self.message, self.err_type, self.param, self.code)


def openai_error_body(
    message: str,
    err_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    )


def as_strict(e: RequestError) -> StrictError:
    """A vLLM-worded refusal (context length, unknown model, ...) in OpenAI's shape."""
    if isinstance(e, StrictError):
        return e
    code = {404: "model_not_found", 401: "invalid_api_key"}.get(e.status)
    if e.status == 400 and "context length" in e.message:
        code = "context_length_exceeded"
    return StrictError(e.status, e.message, "invalid_request_error", e.param, code)


def unknown_arguments(data: Mapping[str, object], chat: bool) -> list[str]:
    """The arguments of a request body OpenAI's API does not document, in the body's order;
    unknown `stream_options` keys are named `stream_options.KEY`."""
    allowed = CHAT_ARGUMENTS if chat else COMPLETION_ARGUMENTS
    out = [str(k) for k in data if k not in allowed]
    opts = data.get("stream_options")
    if isinstance(opts, Mapping):
        out += [f"stream_options.{k}" for k in opts if k not in STREAM_OPTIONS]
    return out


def refusal(names: list[str]) -> StrictError:
    """OpenAI's answer to unknown arguments."""
    noun = "argument" if len(names) == 1 else "arguments"
    return StrictError(400, f"Unrecognized request {noun} supplied: {', '.join(names)}")


def natural_length(max_tokens: int, rng: np.random.Generator) -> tuple[int, str]:
    """Where the model emits EOS: uniform on [max(1, max_tokens * EOS_MIN_SHARE), max_tokens - 1]
    ("stop"); a maximum of 1 token is reached ("length")."""
    if max_tokens <= 1:
        return max_tokens, "length"
    lo = max(1, int(max_tokens * EOS_MIN_SHARE))
    return int(rng.integers(lo, max_tokens)), "stop"


class StrictChunkWriter(AnswerWriter):
    """The SSE events of one streamed answer in OpenAI's shape (same methods as ChunkWriter)."""

    def _begin(self, request_id: str, created: int) -> None:
        self.head: dict[str, object] = {
            "id": request_id,
            "object": "chat.completion.chunk" if self.req.chat else "text_completion",
            "created": created,
            "model": self.req.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

    def _event(self, choices: list[object], usage: object = None) -> bytes:
        doc = {**self.head, "choices": choices}
        if self.req.include_usage:
            doc["usage"] = usage
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    def _choice(self, text: str, finish_reason: str | None) -> dict[str, object]:
        if self.req.chat:
            delta = {"content": text} if text else {}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}

    def role(self) -> bytes:
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": "", "refusal": None},
            "logprobs": None,
            "finish_reason": None,
        }
        return self._event([choice])

    def chunk(self, start: int, stop: int, finish_reason: str | None) -> bytes:
        """Tokens [start, stop) in one chunk (one per channel they span); the finish reason
        follows in a chunk of its own."""
        if self.layout.plain or not self.req.chat:
            out = self._event([self._choice(filler_text(start, stop), None)])
        else:
            out = b"".join(
                self._event([channel_choice(self.layout, kind, a, b, None, "reasoning")])
                for kind, a, b in self.layout.segments(start, stop)
            )
        if finish_reason is not None:
            out += self._event([self._choice("", finish_reason)])
        return out

    def token(self, i: int, finish_reason: str | None) -> bytes:
        return self.chunk(i, i + 1, finish_reason)

    def final_usage(self, completion: int, cached: int | None = None) -> bytes:
        """The usage chunk; OpenAI always says how many prompt tokens were cached (0: none)."""
        return self._event(
            [],
            _usage(
                self.req.prompt_tokens,
                completion,
                min(self.layout.reasoning, completion),
                cached or 0,
            ),
        )

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"

    def whole(self, completion: int, finish_reason: str, cached: int | None = None) -> bytes:
        """The answer not streamed: one body (`strict_full_response`)."""
        return strict_full_response(self, completion, finish_reason, cached)


def _usage(prompt: int, completion: int, reasoning: int = 0, cached: int = 0) -> dict[str, object]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def strict_full_response(
    w: StrictChunkWriter, completion: int, finish_reason: str, cached: int | None = None
) -> bytes:
    """The non-streamed answer body in OpenAI's shape (no reasoning text: OpenAI keeps it)."""
    req, layout = w.req, w.layout
    text = "".join(FILLER_TOKENS[i % len(FILLER_TOKENS)] for i in range(completion))
    if req.chat:
        msg = message(layout, completion)
        choice: dict[str, object] = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": msg["content"],
                "refusal": None,
                "annotations": [],
                **({"tool_calls": msg["tool_calls"]} if msg["tool_calls"] else {}),
            },
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return orjson.dumps(
        {
            **completion_head(w, obj, choice),
            "usage": _usage(
                req.prompt_tokens, completion, min(layout.reasoning, completion), cached or 0
            ),
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
    )
