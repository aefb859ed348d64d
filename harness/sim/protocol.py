"""OpenAI/vLLM wire shapes for the simulator: parse requests, count tokens, build chunks.

Pure functions (no I/O, no clock). Token counting matches how the harness synthesises
prompts -- each whitespace-separated word is one token:

- completions: the words of `prompt` (a string, or one token-id list counts its ids);
- chat: for each message `<|start|> role : words... <|end|>` (the words of its content plus
  CHAT_TOKENS_PER_MESSAGE = 4 template tokens), then `<|start|> assistant :` to open the
  answer (CHAT_TOKENS_REPLY = 3).

The answer side (filler text, channels, chunks, whole bodies) is harness.sim.answer_format.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

CHAT_TOKENS_PER_MESSAGE = 4  # <|start|>, role, ":", <|end|>
CHAT_TOKENS_REPLY = 3  # <|start|> assistant : -- the generation prompt


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
