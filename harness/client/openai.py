"""The OpenAI request and chunk protocol, sans-I/O: build request bodies, decode stream events.

A *token event* is a chunk that carries generated content: `choices[0].text` (completions),
`choices[0].delta.content`, `delta.reasoning_content` or `delta.reasoning` (chat). The role-only
first chunk of a chat stream, empty deltas and the usage-only last chunk are not tokens --
except, under per-chunk usage, an empty delta whose usage grows (below).

Tokens per chunk: with `stream_options.continuous_usage_stats` vLLM puts the cumulative
`usage.completion_tokens` on every chunk, so a chunk carries the increase since the previous
one. Without per-chunk usage each content chunk counts as one token, and the record says so.

Per-chunk usage is established by a content chunk that carries usage, or by two consecutive
chunks with choices that both carry it (vLLM's role-only first chunk reports 0 tokens, then
every chunk reports its count). From then on a chunk whose `delta.content` is "" while
`completion_tokens` grows is a token event of that many tokens, at its own arrival: vLLM
holds back the bytes of a token that ends inside a UTF-8 character, but the token was made
then, and stream counts must equal usage. Before that, growth behind an empty chunk is
carried into the next token event (llama.cpp's completions finish chunk: empty text with the
whole usage, after content chunks without usage, is not a token event).

Channels: every token event is tagged `answer` (`content`, completions' `text`), `reasoning`
(`reasoning_content`, or `reasoning` as OpenRouter-style gateways name it) or `tool`
(`tool_calls[].function.name` or `.arguments`); a chunk with several takes the first of tool,
answer, reasoning. A token event with no text of its own (usage grew behind an empty delta)
continues the channel before it. The decoder keeps the channels run-length encoded
(`channel_runs`: the event index where each run starts and its channel), so a stream of one
channel costs nothing per event; the fast shape below is always an answer.
`usage.completion_tokens_details.reasoning_tokens` is kept as sent (`reasoning_tokens`), to
check the reasoning events' count against it.

Prefix cache: `usage.prompt_tokens_details.cached_tokens` (vLLM with
`--enable-prompt-tokens-details`, on its final usage chunk; OpenAI on every usage) is kept as
sent (`cached_tokens`, the last one seen; None: never sent); harness.record.usage vets it
against the prompt count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from harness.client.sse import split_region
from harness.record.records import Channel, ErrorKind
from harness.record.usage import MAX_COUNT, count_problem

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


# The common chunk shape of vLLM (and OpenAI), compact JSON in vLLM's key order (0.32 adds
# `"token_ids":null` to the choice and `"completion_tokens_details":null` to usage), matched as bytes
# so that a token event needs no JSON parse (benchmarks/decode_bench.py). Only what parses to
# the same values for sure is accepted: strings of printable ASCII without quotes or backslashes
# (no escapes, valid UTF-8), integers without leading zeros or signs, no repeated keys. Anything
# else -- other keys, another order, whitespace, escapes, non-ASCII text, usage-only chunks,
# errors -- goes through orjson, with identical results (tests/client/test_openai_fast.py).
# The repeats are possessive (`*+`, Python 3.11): what follows each is a character they never
# take (a quote, a comma, a brace), so giving one back cannot lead to a match; the regex engine
# then keeps no backtracking state per character (about 5 % of a chunk's match).
_STR = rb"[ !#-\[\]-~]*+"
_INT = rb"(?:0|[1-9][0-9]{0,17}+)"
FAST_CHUNK = re.compile(
    rb'\{"id":"'
    + _STR
    + rb'","object":"(?:chat\.completion\.chunk|text_completion)","created":'
    + _INT
    + rb',"model":"'
    + _STR
    + rb'","choices":\[\{"index":'
    + _INT
    + rb',(?:"delta":\{(?:"role":"assistant",)?"content":"('
    + _STR
    + rb')"\}|"text":"('
    + _STR
    + rb')")'
    + rb'(?:,"logprobs":null)?,"finish_reason":(?:null|"([a-z_]{1,40})")(?:,"stop_reason":null)?'
    + rb'(?:,"token_ids":null)?\}\]'
    + rb'(?:,"usage":\{"prompt_tokens":('
    + _INT
    + rb'),"total_tokens":'
    + _INT
    + rb',"completion_tokens":('
    + _INT
    + rb')(?:,"completion_tokens_details":null)?\})?\}'
)

# A region's blocks, left to right: an SSE event in the fast shape (`data: {...}` and its blank
# line; its fields captured) or any other block up to its blank line (the last group). Both end
# at the block's first blank line (the fast shape holds no newline), so the blocks are those of
# `split_region` and one `findall` decodes a whole read's events in one C-level pass.
REGION_BLOCKS = re.compile(rb"data: ?" + FAST_CHUNK.pattern + rb"\n\n|([\s\S]*?\n\n)")


class StreamError(Exception):
    """A stream event that ends the request as failed."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


ANSWER, REASONING, TOOL = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)


@dataclass(slots=True)
class StreamDecoder:
    """Per-request state while reading one stream's events."""

    done: bool = False
    completion_tokens: int | None = None  # last cumulative usage seen
    prompt_tokens: int | None = None
    usage_per_chunk: bool = False
    _carried: int = 0  # tokens reported behind contentless chunks
    _seen_usage_tokens: int = 0
    _last_usage: bool = False  # the last chunk with choices carried usage
    finish_reason: str | None = None
    text: list[str] | None = None  # a list: the answer's text is kept here, piece by piece
    # (multi-turn sessions send it back as history)
    calls: list[list[str]] | None = None  # a list: the tool calls' [name, arguments], kept
    # with `text` (agent sessions send them back; harness.client.agent)
    usage_flags: tuple[str, ...] = ()  # usage counts that were not counts (not read)
    # (first token event index, Channel) at each change of channel, from answer at 0
    channel_runs: list[tuple[int, int]] | None = None
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    _channel: int = ANSWER  # the channel of the last token event
    _events: int = 0  # token events so far
    _event_channel: int = ANSWER  # the channel of the event `_decode` just read

    # Whether the answer is one document handed over at its end (`feed_body`, `end_body`:
    # embeddings) instead of a stream of events (`on_event`, `on_region`). A class attribute,
    # not a property: the lean client reads it on every socket read.
    whole_body: ClassVar[bool] = False

    def feed_body(self, data: bytes) -> None:
        raise TypeError(f"{type(self).__name__} decodes a stream, not a whole body")

    def end_body(self) -> None:
        raise TypeError(f"{type(self).__name__} decodes a stream, not a whole body")

    def _tag(self, n_events: int, channel: int) -> None:
        """Count `n_events` token events of `channel`, opening a run where the channel changes."""
        if channel != self._channel:
            if self.channel_runs is None:
                self.channel_runs = []
            self.channel_runs.append((self._events, channel))
            self._channel = channel
        self._events += n_events

    def on_region(self, region: bytes, tokens: Any) -> None:
        """Decode every event of a region (`SSESplitter.feed_region`), appending the tokens of
        each token event to `tokens` (an array or list), exactly as `on_event` per event would.
        Raises StreamError as `on_event` does, after appending the tokens of the events before.

        One `findall` walks the region block by block: a block in the fast shape comes back
        as its captured fields, any other block whole (the last group), for `on_event`."""
        append = tokens.append
        if self.text is not None or b'data: {"id":"' not in region:
            # keeping the text, or no event can be in the fast shape: event by event
            for ev in split_region(region):
                n = self.on_event(ev.data)
                if n:
                    append(n)
            return
        # Every token appended by the fast shape is an answer: their channel is settled at
        # each write-back (`_tag` from `mark`), not per event.
        mark = len(tokens)
        # The loop keeps the decoder's state in locals and writes it back before anything that
        # reads it (an other-shaped block, an error, the end): per event it only compares,
        # converts the cumulative count and appends.
        seen, carried, per_chunk = self._seen_usage_tokens, self._carried, self.usage_per_chunk
        done, last_usage = self.done, self._last_usage
        last_pt = b""
        for content, text, fr, pt, ct, other in REGION_BLOCKS.findall(region):
            if other:
                self._seen_usage_tokens, self._carried, self.usage_per_chunk = (
                    seen,
                    carried,
                    per_chunk,
                )
                self._last_usage = last_usage
                if last_pt:
                    self.prompt_tokens, self.completion_tokens, last_pt = int(last_pt), seen, b""
                if len(tokens) > mark:
                    self._tag(len(tokens) - mark, ANSWER)
                for ev in split_region(other):
                    n = self.on_event(ev.data)
                    if n:
                        append(n)
                mark = len(tokens)
                seen, carried, per_chunk = (
                    self._seen_usage_tokens,
                    self._carried,
                    self.usage_per_chunk,
                )
                done, last_usage = self.done, self._last_usage
                continue
            if done:
                self._seen_usage_tokens, self._carried, self.usage_per_chunk = (
                    seen,
                    carried,
                    per_chunk,
                )
                self._last_usage = last_usage
                if last_pt:
                    self.prompt_tokens, self.completion_tokens = int(last_pt), seen
                if len(tokens) > mark:
                    self._tag(len(tokens) - mark, ANSWER)
                raise StreamError(ErrorKind.MALFORMED, "data after [DONE]")
            if fr:
                self.finish_reason = fr.decode("ascii")
            if ct:
                c = int(ct)
                d = c - seen if c > seen else 0
                seen = c
                last_pt = pt
                if content or text or last_usage:
                    per_chunk = True
                last_usage = True
                if content or text:
                    n = d + carried
                    carried = 0
                    append(n if n > 1 else 1)
                elif per_chunk and d:
                    append(d + carried)
                    carried = 0
                    if len(tokens) == mark + 1:  # no answer before it here: it continues the
                        self._events += 1  # channel before (a tool call's or reasoning's run),
                        mark += 1  # as `on_event` tags it
                else:
                    carried += d
            else:
                last_usage = False
                if content or text:
                    if per_chunk:
                        n = carried
                        carried = 0
                        append(n if n > 1 else 1)
                    else:
                        append(1)
        self._seen_usage_tokens, self._carried, self.usage_per_chunk = seen, carried, per_chunk
        self._last_usage = last_usage
        if last_pt:
            self.prompt_tokens, self.completion_tokens = int(last_pt), seen
        added = len(tokens) - mark
        if added:
            if self._channel == ANSWER:  # `_tag` without the call: the answer run goes on
                self._events += added
            else:
                self._tag(added, ANSWER)

    def on_event(self, data: bytes) -> int:
        """Tokens carried by this event (0 for role-only, empty or usage-only chunks); a token
        event's channel goes to `channel_runs`.

        Raises StreamError for a non-JSON event, an `error` object, or events after [DONE].
        """
        n = self._decode(data)
        if n:
            self._tag(1, self._event_channel)
        return n

    def _decode(self, data: bytes) -> int:
        """`on_event` without the channel bookkeeping; sets `_event_channel`."""
        if data == b"[DONE]":
            self.done = True
            return 0
        if self.done:
            raise StreamError(ErrorKind.MALFORMED, "data after [DONE]")
        m = FAST_CHUNK.fullmatch(data)
        if m is None:
            return self._on_json(data)
        content, text, fr, pt, ct = m.groups()
        self._event_channel = ANSWER if (content or text) else self._channel
        if self.text is not None and (content or text):
            self.text.append((content or text).decode("ascii"))
        if fr is not None:
            self.finish_reason = fr.decode("ascii")
        delta_tokens = 0
        if ct is not None:
            self.prompt_tokens = int(pt)
            c = int(ct)
            if content or text or self._last_usage:
                self.usage_per_chunk = True
            delta_tokens = max(c - self._seen_usage_tokens, 0)
            self._seen_usage_tokens = c
            self.completion_tokens = c
        self._last_usage = ct is not None
        if not (content or text):
            if self.usage_per_chunk and delta_tokens:
                n = delta_tokens + self._carried
                self._carried = 0
                return n
            self._carried += delta_tokens
            return 0
        if self.usage_per_chunk:
            n = delta_tokens + self._carried
            self._carried = 0
            return max(n, 1)
        return 1

    def _on_json(self, data: bytes) -> int:
        """`on_event` for any event, through orjson: the reference the fast path must equal.

        Every field read is checked for its type: a chunk of another shape (`choices` not a
        list, a `delta` that is not an object, text that is not a string, ...) raises
        StreamError(MALFORMED). A usage count that is not a count (`count_problem`) is not
        read; it is kept in `usage_flags`."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamError(ErrorKind.MALFORMED, f"chunk is not JSON: {data[:80]!r}") from None
        if type(obj) is not dict:
            raise StreamError(ErrorKind.MALFORMED, f"chunk is not a JSON object: {data[:80]!r}")
        err = obj.get("error")
        if err is not None:
            msg = err.get("message", err) if type(err) is dict else err
            raise StreamError(ErrorKind.SERVER_ERROR, server_text(msg))
        has_content = False
        self._event_channel = self._channel
        choices = obj.get("choices")
        if choices is not None and type(choices) is not list:
            raise _malformed("choices is not a list", data)
        if choices:
            c0 = choices[0]
            if type(c0) is not dict:
                raise _malformed("choices[0] is not an object", data)
            text = c0.get("text")
            if text is not None and type(text) is not str:
                raise _malformed("choices[0].text is not a string", data)
            delta = c0.get("delta")
            if delta is not None and type(delta) is not dict:
                raise _malformed("choices[0].delta is not an object", data)
            content = None
            channel = ANSWER if text else self._channel
            if delta:
                content = delta.get("content")
                reasoning = delta.get("reasoning_content")
                reasoning_alt = delta.get("reasoning")
                for name, v in (
                    ("content", content),
                    ("reasoning_content", reasoning),
                    ("reasoning", reasoning_alt),
                ):
                    if v is not None and type(v) is not str:
                        raise _malformed(f"choices[0].delta.{name} is not a string", data)
                tool = _tool_text(delta.get("tool_calls"), data)
                if tool and self.calls is not None:
                    keep_calls(self.calls, delta["tool_calls"])
                if text is None:
                    text = tool or content or reasoning or reasoning_alt
                    if tool:
                        channel = TOOL
                    elif content:
                        channel = ANSWER
                    elif reasoning or reasoning_alt:
                        channel = REASONING
            self._event_channel = channel
            has_content = bool(text)
            if self.text is not None:
                answer = c0.get("text") if "text" in c0 else content
                if answer:
                    self.text.append(answer)
            fr = c0.get("finish_reason")
            if fr is not None and type(fr) is not str:
                raise _malformed("choices[0].finish_reason is not a string", data)
            if fr:
                self.finish_reason = fr
        usage = obj.get("usage")
        if usage is not None and type(usage) is not dict:
            raise _malformed("usage is not an object", data)
        delta_tokens = 0
        with_usage = False
        if usage:
            ct = usage.get("completion_tokens")
            pt = usage.get("prompt_tokens")
            # a count in range is read as it is; anything else through _not_a_count
            if ct is not None and not (type(ct) is int and 0 <= ct <= MAX_COUNT):
                self._not_a_count("completion_tokens", ct)
                ct = None
            if pt is not None and not (type(pt) is int and 0 <= pt <= MAX_COUNT):
                self._not_a_count("prompt_tokens", pt)
                pt = None
            if pt is not None:
                self.prompt_tokens = pt
            rt = self._detail_count(usage, "completion_tokens_details", "reasoning_tokens")
            if rt is not None:
                self.reasoning_tokens = rt
            cached = self._detail_count(usage, "prompt_tokens_details", "cached_tokens")
            if cached is not None:
                self.cached_tokens = cached
            if ct is not None:
                if choices:
                    with_usage = True
                    if has_content or self._last_usage:
                        self.usage_per_chunk = True
                    delta_tokens = max(ct - self._seen_usage_tokens, 0)
                    self._seen_usage_tokens = ct
                self.completion_tokens = ct
        if choices:
            self._last_usage = with_usage
        if not has_content:
            if self.usage_per_chunk and delta_tokens:  # bytes held back, token made: count it now
                n = delta_tokens + self._carried
                self._carried = 0
                return n
            self._carried += delta_tokens
            return 0
        if self.usage_per_chunk:
            n = delta_tokens + self._carried
            self._carried = 0
            return max(n, 1)
        return 1

    def _detail_count(self, usage: dict[str, Any], block: str, key: str) -> int | None:
        """usage[block][key] when it is a count; flagged (and None) when sent but not one."""
        details = usage.get(block)
        if type(details) is not dict:
            return None
        return self._count(details.get(key), key)

    def _count(self, value: object, name: str) -> int | None:
        """A usage count as sent, or None (absent, or not a count: flagged, not read)."""
        if value is None:
            return None
        if type(value) is int and 0 <= value <= MAX_COUNT:
            return value
        self._not_a_count(name, value)
        return None

    def _not_a_count(self, name: str, value: object) -> None:
        """A usage value that is not a count: flagged once per field (`count_problem`), not read."""
        problem = count_problem(name, value)
        if problem is not None and not any(
            f.partition(": ")[2].startswith(name + " ") for f in self.usage_flags
        ):
            self.usage_flags = (*self.usage_flags, problem)


def _tool_text(calls: object, data: bytes) -> str:
    """The text `delta.tool_calls` carries: each call's function name and arguments, joined
    ("" for none). Raises StreamError(MALFORMED) for a shape other than OpenAI's."""
    if calls is None:
        return ""
    if type(calls) is not list:
        raise _malformed("choices[0].delta.tool_calls is not a list", data)
    out = ""
    for call in calls:
        if type(call) is not dict:
            raise _malformed("choices[0].delta.tool_calls[] is not an object", data)
        fn = call.get("function")
        if fn is None:
            continue
        if type(fn) is not dict:
            raise _malformed("choices[0].delta.tool_calls[].function is not an object", data)
        for name in ("name", "arguments"):
            v = fn.get(name)
            if v is not None:
                if type(v) is not str:
                    raise _malformed(
                        f"choices[0].delta.tool_calls[].function.{name} is not a string", data
                    )
                out += v
    return out


MAX_KEPT_CALLS = 16  # tool calls of one answer an agent sends back; more are not kept


def keep_calls(calls: list[list[str]], deltas: list[Any]) -> None:
    """Add the pieces of `delta.tool_calls` (checked by `_tool_text`) to `calls`, one
    [name, arguments] per call `index` (a call without an index continues the last)."""
    for d in deltas:
        fn = d.get("function")
        if not fn:
            continue
        i = d.get("index")
        if type(i) is not int or i < 0:
            i = max(len(calls) - 1, 0)
        if i >= MAX_KEPT_CALLS:
            continue
        while len(calls) <= i:
            calls.append(["", ""])
        calls[i][0] += fn.get("name") or ""
        calls[i][1] += fn.get("arguments") or ""


def _malformed(what: str, data: bytes) -> StreamError:
    return StreamError(ErrorKind.MALFORMED, f"{what}: {data[:80]!r}")


SERVER_TEXT_LIMIT = 200  # characters of a server's error text kept (its first line)


def server_text(text: object) -> str:
    """A server-supplied error text as the harness keeps it: its first non-blank line, at most
    SERVER_TEXT_LIMIT characters (a padded or multi-line message costs nothing downstream)."""
    s = str(text)[: 64 * 1024].strip()
    return s.split("\n", 1)[0].strip()[:SERVER_TEXT_LIMIT]


def error_message(body: bytes) -> str:
    """The `error.message` of an OpenAI-shaped error body, else the start of the body (either
    as `server_text` keeps it)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and "message" in err:
            return server_text(err["message"])
        if "message" in obj:
            return server_text(obj["message"])
        if "detail" in obj:
            return server_text(obj["detail"])
    return server_text(body[:4096].decode("utf-8", "replace"))
