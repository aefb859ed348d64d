"""How the simulator's answers look on the wire: filler text, the channels of a chat answer,
vLLM's SSE chunks (`ChunkWriter`) and the whole (non-streamed) body. Pure functions (no I/O, no
clock); the requests they answer are parsed by harness.sim.protocol.

Generated text is filler: token i is " " + FILLER_WORDS[i % len], one word per token, so the
word count of the answer equals `usage.completion_tokens`.

Channels (a chat answer's `Layout`): a reasoning model's first `reasoning` output tokens stream as
`delta.reasoning_content` (vLLM's reasoning parsers; `delta.reasoning` in the strict style, as
OpenRouter-style gateways send it), then the answer as `delta.content`; an answer that calls a
tool streams its remaining tokens as one `tool_calls` entry instead: a first token carrying the
function's name (arguments ""), then the arguments, a JSON object of filler words. A chunk
never mixes channels (one that would is split where the channel changes), so per-chunk usage
counts each channel exactly. Reasoning tokens count within `max_tokens`, as OpenAI's and
vLLM's do, and the usage reports them in `completion_tokens_details.reasoning_tokens`.

Prefix cache: with `enable_prompt_tokens_details` the final usage (streamed: the last
`choices: []` chunk only, not the per-chunk usage; whole: the body's usage) carries
`prompt_tokens_details: {"cached_tokens": N}`, N the prompt tokens the engine found cached when
it first scheduled the request, as vLLM 0.32 sends it (0 for a miss).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from harness.sim.protocol import ParsedRequest

FILLER_WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was")
FILLER_TOKENS = tuple(" " + w for w in FILLER_WORDS)
ANSWER, REASONING, TOOL_NAME, TOOL_ARGS = "answer", "reasoning", "tool_name", "tool_args"


@dataclass(frozen=True, slots=True)
class Layout:
    """Which output tokens are which: [0, reasoning) reasoning, then, with `tool` (a function
    name), a tool call to `total` (its first token the name), else the answer."""

    reasoning: int = 0
    tool: str | None = None
    total: int = 0

    @property
    def plain(self) -> bool:
        return self.reasoning == 0 and self.tool is None

    def segments(self, start: int, stop: int) -> list[tuple[str, int, int]]:
        """[start, stop) cut where the kind of token changes: (kind, start, stop) pieces."""
        cuts = [(0, REASONING), (self.reasoning, ANSWER)]
        if self.tool is not None:
            cuts = [(0, REASONING), (self.reasoning, TOOL_NAME), (self.reasoning + 1, TOOL_ARGS)]
        out: list[tuple[str, int, int]] = []
        for i, (at, kind) in enumerate(cuts):
            end = cuts[i + 1][0] if i + 1 < len(cuts) else stop
            a, b = max(start, at), min(stop, end)
            if a < b:
                out.append((kind, a, b))
        return out

    def arguments(self, start: int, stop: int, name_token: bool = True) -> str:
        """The tool call's arguments carried by tokens [start, stop): a JSON object of filler
        words, opened by the first argument token and closed by the last. `name_token`: the
        call's first token carries its name (chat); without (the Responses API), every token
        after the reasoning is an argument token."""
        first, last = self.reasoning + (1 if name_token else 0), self.total - 1
        text = filler_text(start, stop)
        if start <= first:
            text = '{"q": "' + text[1:]
        if stop > last:
            text += '"}'
        return text

    def completion_details(self, completion: int) -> dict[str, int]:
        return {"reasoning_tokens": min(self.reasoning, completion)}


PLAIN = Layout()  # every token an answer (a model that neither reasons nor calls tools)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


def filler_text(start: int, stop: int) -> str:
    return "".join(FILLER_TOKENS[i % len(FILLER_TOKENS)] for i in range(start, stop))


class AnswerWriter:
    """What the writers of a streamed answer share (vLLM's `ChunkWriter`, the strict gateway's,
    the Responses API's): the request and its channel layout; each one's `_begin` sets up its
    own header from the request's id and creation time."""

    def __init__(
        self, req: ParsedRequest, request_id: str, created: int, layout: Layout = PLAIN
    ) -> None:
        self.req = req
        self.layout = layout
        self.request_id = request_id
        self.created = created
        self._begin(request_id, created)

    def _begin(self, request_id: str, created: int) -> None:
        raise NotImplementedError


class ChunkWriter(AnswerWriter):
    """Builds the SSE events of one streamed answer, exactly as vLLM formats them."""

    def _begin(self, request_id: str, created: int) -> None:
        self.head = {
            "id": request_id,
            "object": "chat.completion.chunk" if self.req.chat else "text_completion",
            "created": created,
            "model": self.req.model,
        }

    def _event(
        self,
        choices: list[object],
        completion: int | None,
        details: bool = False,
        cached: int | None = None,
    ) -> bytes:
        doc: dict[str, object] = {**self.head, "choices": choices}
        if completion is not None:
            u: dict[str, object] = {**usage(self.req.prompt_tokens, completion)}
            if cached is not None:
                u["prompt_tokens_details"] = {"cached_tokens": cached}
            if details:
                u["completion_tokens_details"] = self.layout.completion_details(completion)
            doc["usage"] = u
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    def role(self) -> bytes:
        """Chat only: the first chunk, role and empty content, before any token."""
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return self._event([choice], 0 if self.req.continuous_usage else None)

    def token(self, i: int, finish_reason: str | None) -> bytes:
        """The chunk carrying output token i (0-based); the last one carries finish_reason."""
        return self.chunk(i, i + 1, finish_reason)

    def chunk(self, start: int, stop: int, finish_reason: str | None) -> bytes:
        """One chunk carrying output tokens [start, stop) (several when a gateway coalesces);
        with continuous usage its `completion_tokens` is `stop`. Under a `Layout` with
        reasoning or a tool call, one event per channel the tokens span."""
        if not self.layout.plain and self.req.chat:
            segs = self.layout.segments(start, stop)
            return b"".join(
                self._event(
                    [channel_choice(self.layout, kind, a, b, finish_reason if b == stop else None)],
                    b if self.req.continuous_usage else None,
                )
                for kind, a, b in segs
            )
        if stop - start == 1:
            piece = FILLER_TOKENS[start % len(FILLER_TOKENS)]
        else:
            piece = filler_text(start, stop)
        if self.req.chat:
            choice: dict[str, object] = {
                "index": 0,
                "delta": {"content": piece},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        else:
            choice = {
                "index": 0,
                "text": piece,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        if finish_reason is not None and self.req.chat:
            choice["stop_reason"] = None
        return self._event([choice], stop if self.req.continuous_usage else None)

    def final_usage(self, completion: int, cached: int | None = None) -> bytes:
        """The last chunk: usage only; `cached`: prompt_tokens_details.cached_tokens (None:
        left out, as vLLM without --enable-prompt-tokens-details)."""
        return self._event([], completion, details=self.layout.reasoning > 0, cached=cached)

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"

    def whole(self, completion: int, finish_reason: str, cached: int | None = None) -> bytes:
        """The answer not streamed: one body (`full_response`)."""
        return full_response(self, completion, finish_reason, cached)


def channel_choice(
    layout: Layout,
    kind: str,
    start: int,
    stop: int,
    finish_reason: str | None,
    reasoning_key: str = "reasoning_content",
) -> dict[str, object]:
    """The chat choice carrying tokens [start, stop) of one kind (`Layout.segments`)."""
    delta: dict[str, object]
    if kind == REASONING:
        delta = {reasoning_key: filler_text(start, stop)}
    elif kind == ANSWER:
        delta = {"content": filler_text(start, stop)}
    else:
        fn = (
            {"name": layout.tool, "arguments": "{}" if layout.total == stop else ""}
            if kind == TOOL_NAME
            else {"arguments": layout.arguments(start, stop)}
        )
        call: dict[str, object] = {"index": 0, "function": fn}
        if kind == TOOL_NAME:
            call = {"index": 0, "id": "call_0", "type": "function", "function": fn}
        delta = {"tool_calls": [call]}
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def message(layout: Layout, completion: int) -> dict[str, object]:
    """A non-streamed chat answer's message: reasoning, content and tool calls as `layout`
    splits `completion` tokens."""
    r = min(layout.reasoning, completion)
    msg: dict[str, object] = {
        "role": "assistant",
        "reasoning_content": filler_text(0, r) if r else None,
        "content": filler_text(r, completion) if layout.tool is None else None,
        "tool_calls": [],
    }
    if layout.tool is not None and completion > r:
        args = layout.arguments(r + 1, completion) if completion > r + 1 else "{}"
        msg["tool_calls"] = [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": layout.tool, "arguments": args},
            }
        ]
    return msg


def completion_head(w: AnswerWriter, obj: str, choice: dict[str, object]) -> dict[str, object]:
    """A whole completion body's first fields, as vLLM and OpenAI both send them."""
    return {
        "id": w.request_id,
        "object": obj,
        "created": w.created,
        "model": w.req.model,
        "choices": [choice],
    }


def full_response(
    w: ChunkWriter, completion: int, finish_reason: str, cached: int | None = None
) -> bytes:
    """The non-streamed answer body (`cached`: as `ChunkWriter.final_usage`'s)."""
    req, layout = w.req, w.layout
    text = filler_text(0, completion)
    if req.chat:
        choice: dict[str, object] = {
            "index": 0,
            "message": message(layout, completion),
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        obj = "text_completion"
    return orjson.dumps(
        {
            **completion_head(w, obj, choice),
            "usage": {
                **usage(req.prompt_tokens, completion),
                "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
                **(
                    {"completion_tokens_details": layout.completion_details(completion)}
                    if layout.reasoning
                    else {}
                ),
            },
        }
    )
