"""The Responses API (`POST /v1/responses`), sans-I/O: the stream's events (body: openai_body).

A streamed response is a sequence of typed SSE events (`event: <type>` beside a JSON `data:`
whose `type` names it again); there is no `data: [DONE]`: the stream ends with a terminal
event. What the decoder reads:

- token events, one token each (the Responses API sends no per-event usage): the `delta`
  string of `response.output_text.delta` and `response.refusal.delta` (channel `answer`),
  `response.reasoning_text.delta` and `response.reasoning_summary_text.delta` (`reasoning`),
  `response.function_call_arguments.delta` and `response.custom_tool_call_input.delta`
  (`tool`). An empty delta is no token. Any other event type (`response.created`,
  `response.output_item.added`, `...done`, ...) carries no token and is passed over.
- terminal events: `response.completed` and `response.incomplete` end the stream with the
  final `response.usage` (`input_tokens`, `output_tokens`,
  `output_tokens_details.reasoning_tokens`, `input_tokens_details.cached_tokens`);
  `response.failed` (its `response.error.message`) and `error` (its `message`) end it as
  `server_error`.
- anything else -- not JSON, no string `type`, a `delta` that is not a string -- is
  `malformed`. The terminal event ends the response: events after it (gateways append
  `data: [DONE]`) are ignored and counted (`after_end`), in the run and in `check` alike.

Sources relied on (2026-12): OpenAI's Responses streaming reference, as the openai-python SDK's
types model it (`ResponseStreamEvent`, `ResponseUsage`, `ResponseErrorEvent`), and vLLM 0.32's
`entrypoints/openai/responses` (its SSE framing `event: <type>` + `data: <json>`, the event types it
emits, no `[DONE]`, usage on `response.completed`).

The request (built in harness.client.openai_body): `input` (the prompt as one user message, after
earlier turns), `instructions` (the system prompt), `max_output_tokens`, `stream`; chat-style
`tools` are flattened to the Responses shape (`{"type": "function", "name": ..., "parameters":
...}`), and a named `tool_choice` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from harness.client.openai import (
    ANSWER,
    REASONING,
    TOOL,
    StreamDecoder,
    StreamError,
    _malformed,
    server_text,
)
from harness.client.openai_body import build_responses_body
from harness.client.sse import split_region
from harness.record.records import ErrorKind

DELTA_CHANNELS = {
    "response.output_text.delta": ANSWER,
    "response.refusal.delta": ANSWER,
    "response.reasoning_text.delta": REASONING,
    "response.reasoning_summary_text.delta": REASONING,
    "response.function_call_arguments.delta": TOOL,
    "response.custom_tool_call_input.delta": TOOL,
}
TERMINAL = ("response.completed", "response.incomplete")


@dataclass(slots=True)
class ResponsesDecoder(StreamDecoder):
    """`StreamDecoder` for a Responses API stream: `done` at its terminal event."""

    _tool_seen: bool = False
    after_end: int = 0  # events after the terminal one (a gateway's `data: [DONE]`): ignored

    def on_region(self, region: bytes, tokens: Any) -> None:
        """Every event of a region, in order (no fast shape: a Responses event is parsed)."""
        append = tokens.append
        for ev in split_region(region):
            n = self.on_event(ev.data)
            if n:
                append(n)

    def _decode(self, data: bytes) -> int:
        if self.done:  # the terminal event ended the response: what follows is nobody's
            self.after_end += 1
            return 0
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamError(ErrorKind.MALFORMED, f"event is not JSON: {data[:80]!r}") from None
        if type(obj) is not dict:
            raise _malformed("event is not a JSON object", data)
        kind = obj.get("type")
        if type(kind) is not str:
            raise _malformed("event has no string type", data)
        channel = DELTA_CHANNELS.get(kind)
        if channel is not None:
            delta = obj.get("delta")
            if type(delta) is not str:
                raise _malformed(f"{kind}.delta is not a string", data)
            if not delta:
                return 0
            self._event_channel = channel
            if channel == TOOL:
                self._tool_seen = True
            elif channel == ANSWER and self.text is not None:
                self.text.append(delta)
            return 1
        if kind in TERMINAL:
            self._terminal(obj, kind, data)
            return 0
        if kind == "response.failed":
            resp = obj.get("response")
            err = resp.get("error") if type(resp) is dict else None
            msg = err.get("message", err) if type(err) is dict else err
            raise StreamError(ErrorKind.SERVER_ERROR, server_text(msg or "response.failed"))
        if kind == "error":
            msg = obj.get("message")
            if msg is None and type(obj.get("error")) is dict:
                msg = obj["error"].get("message")
            raise StreamError(ErrorKind.SERVER_ERROR, server_text(msg or "error event"))
        return 0

    def _terminal(self, obj: dict[str, Any], kind: str, data: bytes) -> None:
        """`response.completed` / `.incomplete`: the usage, the finish reason; the stream ends."""
        self.done = True
        resp = obj.get("response")
        if resp is not None and type(resp) is not dict:
            raise _malformed(f"{kind}.response is not an object", data)
        resp = resp or {}
        if kind == "response.incomplete":
            details = resp.get("incomplete_details")
            reason = details.get("reason") if type(details) is dict else None
            self.finish_reason = "length" if reason == "max_output_tokens" else str(reason)[:40]
        else:
            self.finish_reason = "tool_calls" if self._tool_seen else "stop"
        usage = resp.get("usage")
        if usage is None:
            return
        if type(usage) is not dict:
            raise _malformed(f"{kind}.response.usage is not an object", data)
        out = self._count(usage.get("output_tokens"), "output_tokens")
        if out is not None:
            self.completion_tokens = out
        inp = self._count(usage.get("input_tokens"), "input_tokens")
        if inp is not None:
            self.prompt_tokens = inp
        od = usage.get("output_tokens_details")
        if type(od) is dict:
            self.reasoning_tokens = self._count(od.get("reasoning_tokens"), "reasoning_tokens")
        idt = usage.get("input_tokens_details")
        if type(idt) is dict:
            self.cached_tokens = self._count(idt.get("cached_tokens"), "cached_tokens")


__all__ = ["DELTA_CHANNELS", "ResponsesDecoder", "build_responses_body"]
