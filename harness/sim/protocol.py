"""OpenAI/vLLM wire shapes for the simulator: parse requests, count tokens, build chunks.

Pure functions (no I/O, no clock). Token counting matches how the harness synthesises
prompts -- each whitespace-separated word is one token:

- completions: the words of `prompt` (a string, or one token-id list counts its ids);
- chat: for each message `<|start|> role : words... <|end|>` (the words of its content plus
  CHAT_TOKENS_PER_MESSAGE = 4 template tokens), then `<|start|> assistant :` to open the
  answer (CHAT_TOKENS_REPLY = 3).

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

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

CHAT_TOKENS_PER_MESSAGE = 4  # <|start|>, role, ":", <|end|>
CHAT_TOKENS_REPLY = 3  # <|start|> assistant : -- the generation prompt
FILLER_WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was")
FILLER_TOKENS = tuple(" " + w for w in FILLER_WORDS)


class RequestError(Exception):
    """A request the server refuses. Carries the HTTP status and OpenAI error fields."""

    def __init__(self, status: int, message: str, err_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.err_type, self.param)


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> bytes:
    """OpenAI's error shape, as vLLM sends it."""
    return orjson.dumps(
        {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    )


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    chat: bool
    model: str
    prompt_tokens: int
    token_words: tuple[str, ...]  # the prompt as tokens (for prefix-cache block hashes)
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    ignore_eos: bool
    tools: tuple[str, ...] = ()  # the function names of `tools` (chat)
    tool_choice: str = "auto"  # "auto", "none", "required", or the one function named


def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, "BadRequestError", param)


def _content_words(content: object, i: int) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):
        words: list[str] = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                words += str(part.get("text", "")).split()
            else:
                raise _bad("only text content parts are supported", f"messages[{i}].content")
        return words
    raise _bad("content must be a string or a list of parts", f"messages[{i}].content")


def _call_words(calls: object, i: int) -> list[str]:
    """An assistant message's tool calls as tokens: each function's name and the words of its
    arguments (an agent's history sends its calls back)."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise _bad("tool_calls must be a list", f"messages[{i}].tool_calls")
    words: list[str] = []
    for call in calls:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            raise _bad("each tool call needs a function", f"messages[{i}].tool_calls")
        words += [str(fn.get("name", "")), *str(fn.get("arguments", "")).split()]
    return words


def chat_tokens(messages: object) -> list[str]:
    """The prompt of a chat request as template + word tokens. Raises RequestError."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list", "messages")
    tokens: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise _bad("each message needs a string 'role'", f"messages[{i}]")
        tokens += ["<|start|>", m["role"], ":", *_content_words(m.get("content"), i)]
        tokens += [*_call_words(m.get("tool_calls"), i), "<|end|>"]
    return tokens + ["<|start|>", "assistant", ":"]


def completion_tokens(prompt: object) -> list[str]:
    """The prompt of a completion request as word tokens. Raises RequestError."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.split()
    if isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return [str(t) for t in prompt]
    raise _bad(
        "prompt must be a string or one list of token ids (one prompt per request)", "prompt"
    )


def parse_request(
    data: object, chat: bool, default_model: str, max_model_len: int
) -> ParsedRequest:
    """Validate a decoded JSON body. Raises RequestError (400) with vLLM's wording."""
    if not isinstance(data, Mapping):
        raise _bad("request body must be a JSON object")
    model = data.get("model") or default_model
    if not isinstance(model, str):
        raise _bad("model must be a string", "model")
    words = chat_tokens(data.get("messages")) if chat else completion_tokens(data.get("prompt"))
    n_prompt = len(words)
    n = data.get("n", 1)
    if n != 1:
        raise _bad("the simulator answers n = 1 only", "n")
    raw = data.get("max_completion_tokens") if chat else None
    if raw is None:
        raw = data.get("max_tokens")
    if n_prompt >= max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {n_prompt} input tokens. Please reduce the length of the input messages.",
            "messages" if chat else "prompt",
        )
    if raw is None:
        max_tokens = max_model_len - n_prompt
    elif isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise _bad(f"max_tokens must be at least 1, got {raw!r}.", "max_tokens")
    else:
        max_tokens = raw
    if n_prompt + max_tokens > max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} "
            "in the completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    stream = bool(data.get("stream", False))
    opts = data.get("stream_options") or {}
    if not isinstance(opts, Mapping):
        raise _bad("stream_options must be an object", "stream_options")
    include_usage = stream and bool(opts.get("include_usage", False))
    tools, tool_choice = parse_tools(data) if chat else ((), "auto")
    return ParsedRequest(
        chat=chat,
        model=model,
        prompt_tokens=n_prompt,
        token_words=tuple(words),
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=include_usage and bool(opts.get("continuous_usage_stats", False)),
        ignore_eos=bool(data.get("ignore_eos", False)),
        tools=tools,
        tool_choice=tool_choice,
    )


def parse_tools(data: Mapping[str, object]) -> tuple[tuple[str, ...], str]:
    """`tools` (function definitions) as their names, and `tool_choice` ("auto", "none",
    "required" or the named function's name). Raises RequestError (400) for another shape."""
    raw = data.get("tools")
    names: list[str] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise _bad("tools must be a list of function definitions", "tools")
        for i, t in enumerate(raw):
            fn = t.get("function") if isinstance(t, Mapping) else None
            if (
                not isinstance(t, Mapping)
                or t.get("type") != "function"
                or not isinstance(fn, Mapping)
                or not isinstance(fn.get("name"), str)
                or not fn["name"]
            ):
                raise _bad(
                    'each tool must be {"type": "function", "function": {"name": ...}}',
                    f"tools[{i}]",
                )
            names.append(fn["name"])
    choice = data.get("tool_choice", "auto")
    if isinstance(choice, Mapping):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if choice.get("type") != "function" or name not in names:
            raise _bad("tool_choice names a function that is not in tools", "tool_choice")
        return tuple(names), str(name)
    if choice not in ("auto", "none", "required"):
        raise _bad('tool_choice must be "auto", "none", "required" or a function', "tool_choice")
    if choice == "required" and not names:
        raise _bad('tool_choice "required" needs tools', "tool_choice")
    return tuple(names), str(choice)


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

    def arguments(self, start: int, stop: int) -> str:
        """The tool call's arguments carried by tokens [start, stop): a JSON object of filler
        words, opened by the first argument token and closed by the last."""
        first, last = self.reasoning + 1, self.total - 1
        text = filler_text(start, stop)
        if start <= first:
            text = '{"q": "' + text[1:]
        if stop > last:
            text += '"}'
        return text

    def completion_details(self, completion: int) -> dict[str, int]:
        return {"reasoning_tokens": min(self.reasoning, completion)}


PLAIN = Layout()  # every token an answer (a model that neither reasons nor calls tools)


VOCAB_SIZE = (
    128_256  # token ids /tokenize reports are word hashes below this (Llama 3's vocabulary size)
)


def tokenize(data: object, max_model_len: int) -> dict[str, object]:
    """vLLM's POST /tokenize, counted by the functions that count a request's prompt
    (`chat_tokens`, `completion_tokens`), so `count` equals the `usage.prompt_tokens` the same
    messages or prompt get. `{"prompt": ...}` or `{"messages": [...], "add_generation_prompt":
    true}`; `add_special_tokens` changes nothing (the simulator has no BOS). Raises RequestError."""
    if not isinstance(data, Mapping):
        raise _bad("request body must be a JSON object")
    if "messages" in data:
        words = chat_tokens(data.get("messages"))
        if data.get("add_generation_prompt", True) is False:
            words = words[:-CHAT_TOKENS_REPLY]
    elif "prompt" in data:
        if not isinstance(data.get("prompt"), str):
            raise _bad("prompt must be a string", "prompt")
        words = completion_tokens(data["prompt"])
    else:
        raise _bad("give `prompt` (a string) or `messages` (a list)")
    return {
        "count": len(words),
        "max_model_len": max_model_len,
        "tokens": [zlib.crc32(w.encode()) % VOCAB_SIZE for w in words],
        "token_strs": list(words) if data.get("return_token_strs") else None,
    }


def block_hashes(tokens: Sequence[str], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks, as vLLM's prefix cache names them."""
    out: list[int] = []
    prev = 0
    for i in range(len(tokens) // block_size):
        prev = hash((prev, *tokens[i * block_size : (i + 1) * block_size]))
        out.append(prev)
    return tuple(out)


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


def filler_text(start: int, stop: int) -> str:
    return "".join(FILLER_TOKENS[i % len(FILLER_TOKENS)] for i in range(start, stop))


class ChunkWriter:
    """Builds the SSE events of one streamed answer, exactly as vLLM formats them."""

    def __init__(
        self, req: ParsedRequest, request_id: str, created: int, layout: Layout = PLAIN
    ) -> None:
        self.req = req
        self.layout = layout
        self.head = {
            "id": request_id,
            "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": created,
            "model": req.model,
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


def full_response(
    req: ParsedRequest,
    request_id: str,
    created: int,
    completion: int,
    finish_reason: str,
    layout: Layout = PLAIN,
    cached: int | None = None,
) -> bytes:
    """The non-streamed answer body (`cached`: as `ChunkWriter.final_usage`'s)."""
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
            "id": request_id,
            "object": obj,
            "created": created,
            "model": req.model,
            "choices": [choice],
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
