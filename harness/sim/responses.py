"""The Responses API (`POST /v1/responses`) for the simulator: the request read as a chat request,
and the typed events of a streamed answer (or the whole response object).

Pure functions (no I/O, no clock). `as_chat` turns a Responses body into the chat body the
simulator already parses (`input` -> messages, `instructions` -> a system message,
`max_output_tokens` -> max_tokens, flat `tools` -> chat tools), so a prompt counts the same
tokens on either route. `ResponsesWriter` has `ChunkWriter`'s interface (`role`, `chunk`,
`final_usage`, `done`) and writes what vLLM's /v1/responses writes, as `event: <type>` +
`data: <json>` SSE events with a `sequence_number`: `response.created` and
`response.in_progress` first; per output item (`reasoning`, then a `message` or a
`function_call`) `response.output_item.added` (and `response.content_part.added` for a message),
one delta event per chunk of tokens (`response.reasoning_text.delta`,
`response.output_text.delta`, `response.function_call_arguments.delta`), then the item's
`...done` events; last `response.completed` (`response.incomplete` when `max_output_tokens`
ended it) with the usage (`input_tokens`, `output_tokens`, their details). No `[DONE]`.

A tool call's first output token (the function's name on the chat route) is here the first
arguments delta: the name travels in `output_item.added`, which is no token, and every output
token stays one token of some delta, so the channels' counts equal the chat route's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from harness.sim.answer_format import ANSWER, REASONING, AnswerWriter, filler_text
from harness.sim.protocol import RequestError

RESPONSES_ARGUMENTS = frozenset(  # OpenAI's documented request body (openai-python, 2025)
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
        "background",
        "include",
        "conversation",
    }
)


def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, "BadRequestError", param)


def as_chat(data: object) -> dict[str, Any]:
    """A Responses request body as the chat body with the same prompt. Raises RequestError."""
    if not isinstance(data, Mapping):
        raise _bad("request body must be a JSON object")
    raw = data.get("input")
    messages: list[object] = []
    instructions = data.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    elif isinstance(raw, list) and raw:
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping) or not isinstance(item.get("role"), str):
                raise _bad("each input item needs a string 'role'", f"input[{i}]")
            content = item.get("content")
            if isinstance(content, list):  # input_text / output_text parts
                content = [
                    {"type": "text", "text": p.get("text", "")} if isinstance(p, Mapping) else p
                    for p in content
                ]
            messages.append({"role": item["role"], "content": content})
    else:
        raise _bad("input must be a string or a non-empty list of messages", "input")
    chat: dict[str, Any] = {"model": data.get("model"), "messages": messages}
    if data.get("max_output_tokens") is not None:
        chat["max_tokens"] = data["max_output_tokens"]
    chat["stream"] = bool(data.get("stream", False))
    chat["stream_options"] = {"include_usage": True}  # usage rides on response.completed
    if data.get("ignore_eos"):
        chat["ignore_eos"] = True
    tools = data.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools must be a list of function definitions", "tools")
        chat["tools"] = [
            {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
            if isinstance(t, Mapping) and t.get("type") == "function" and "function" not in t
            else t
            for t in tools
        ]
    choice = data.get("tool_choice")
    if isinstance(choice, Mapping) and "name" in choice:
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None:
        chat["tool_choice"] = choice
    return chat


def _usage(prompt: int, completion: int, reasoning: int, cached: int | None) -> dict[str, object]:
    """The Responses usage; `cached`: the prompt tokens the engine found cached (None: the
    settings do not report them, sent as 0, as the API always has the field)."""
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached or 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


class ResponsesWriter(AnswerWriter):
    """The SSE events of one streamed Responses answer (`ChunkWriter`'s interface)."""

    def _begin(self, request_id: str, created: int) -> None:
        self.id = request_id if request_id.startswith("resp") else f"resp_{request_id}"
        self.created = created
        self.seq = 0
        self.item: str | None = None  # the open output item's kind
        self.index = -1  # its output_index
        self.finish: str | None = None

    def _event(self, kind: str, fields: dict[str, object]) -> bytes:
        doc = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"

    def _response(self, status: str, usage: object = None) -> dict[str, object]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "model": self.req.model,
            "status": status,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "output": [],
            "usage": usage,
        }

    def _item_id(self) -> str:
        return f"{self.item}_{self.index}"

    def role(self) -> bytes:
        return self._event(
            "response.created", {"response": self._response("in_progress")}
        ) + self._event("response.in_progress", {"response": self._response("in_progress")})

    def _open(self, kind: str) -> bytes:
        out = self._close()
        self.item, self.index = kind, self.index + 1
        item: dict[str, object] = {"id": self._item_id(), "status": "in_progress"}
        if kind == REASONING:
            item.update(type="reasoning", summary=[], content=[])
        elif kind == ANSWER:
            item.update(type="message", role="assistant", content=[])
        else:
            item.update(type="function_call", name=self.layout.tool, call_id="call_0", arguments="")
        out += self._event("response.output_item.added", {"output_index": self.index, "item": item})
        if kind == ANSWER:
            out += self._event(
                "response.content_part.added",
                {
                    "item_id": self._item_id(),
                    "output_index": self.index,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                },
            )
        return out

    def _close(self) -> bytes:
        if self.item is None:
            return b""
        where = {"item_id": self._item_id(), "output_index": self.index}
        if self.item == REASONING:
            out = self._event("response.reasoning_text.done", {**where, "content_index": 0})
        elif self.item == ANSWER:
            out = self._event("response.output_text.done", {**where, "content_index": 0})
            out += self._event("response.content_part.done", {**where, "content_index": 0})
        else:
            out = self._event("response.function_call_arguments.done", where)
        out += self._event(
            "response.output_item.done",
            {"output_index": self.index, "item": {"id": self._item_id(), "status": "completed"}},
        )
        self.item = None
        return out

    def chunk(self, start: int, stop: int, finish_reason: str | None) -> bytes:
        """Output tokens [start, stop): one delta event per output item they span."""
        if finish_reason is not None:
            self.finish = finish_reason
        out = b""
        for kind, a, b in (
            self.layout.segments(start, stop) if not self.layout.plain else [(ANSWER, start, stop)]
        ):
            item = ANSWER if kind == ANSWER else (REASONING if kind == REASONING else "tool")
            if item != self.item:
                out += self._open(item)
            where: dict[str, object] = {"item_id": self._item_id(), "output_index": self.index}
            if item == REASONING:
                out += self._event(
                    "response.reasoning_text.delta",
                    {**where, "content_index": 0, "delta": filler_text(a, b)},
                )
            elif item == ANSWER:
                out += self._event(
                    "response.output_text.delta",
                    {**where, "content_index": 0, "delta": filler_text(a, b), "logprobs": []},
                )
            else:
                out += self._event(
                    "response.function_call_arguments.delta",
                    {**where, "delta": self.layout.arguments(a, b, name_token=False)},
                )
        return out

    def final_usage(self, completion: int, cached: int | None = None) -> bytes:
        """The stream's end: the open item closed, then `response.completed` with the usage."""
        status = "incomplete" if self.finish == "length" else "completed"
        usage = _usage(
            self.req.prompt_tokens, completion, min(self.layout.reasoning, completion), cached
        )
        return self._close() + self._event(
            f"response.{status}", {"response": self._response(status, usage)}
        )

    @staticmethod
    def done() -> bytes:
        return b""  # the Responses API sends no [DONE]

    def whole(self, completion: int, finish_reason: str, cached: int | None = None) -> bytes:
        """The answer not streamed: one response object (`full_responses_body`)."""
        return full_responses_body(self, completion, finish_reason, cached)


def full_responses_body(
    w: ResponsesWriter, completion: int, finish_reason: str, cached: int | None = None
) -> bytes:
    """The non-streamed response object."""
    req, layout = w.req, w.layout
    r = min(layout.reasoning, completion)
    output: list[dict[str, object]] = []
    if r:
        output.append(
            {
                "type": "reasoning",
                "id": "reasoning_0",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": filler_text(0, r)}],
            }
        )
    if layout.tool is not None and completion > r:
        output.append(
            {
                "type": "function_call",
                "id": f"tool_{len(output)}",
                "call_id": "call_0",
                "name": layout.tool,
                "arguments": layout.arguments(r, completion, name_token=False),
                "status": "completed",
            }
        )
    elif completion > r:
        output.append(
            {
                "type": "message",
                "id": f"answer_{len(output)}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": filler_text(r, completion), "annotations": []}
                ],
            }
        )
    status = "incomplete" if finish_reason == "length" else "completed"
    doc = w._response(status, _usage(req.prompt_tokens, completion, r, cached))
    doc["output"] = output
    return orjson.dumps(doc)


def unknown_responses_arguments(data: Mapping[str, object]) -> list[str]:
    """The arguments of a Responses body that OpenAI does not document (strict style)."""
    unknown = sorted(k for k in data if k not in RESPONSES_ARGUMENTS)
    opts = data.get("stream_options")
    if isinstance(opts, Mapping):
        unknown += sorted(f"stream_options.{k}" for k in opts if k != "include_obfuscation")
    return unknown


__all__ = [
    "RESPONSES_ARGUMENTS",
    "ResponsesWriter",
    "as_chat",
    "full_responses_body",
    "unknown_responses_arguments",
]
