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
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from harness.client.openai_body import ENDPOINT_PATHS, build_body
from harness.client.server_text import (
    SERVER_TEXT_LIMIT,
    StreamError,
    error_message,
    server_text,
)
from harness.client.server_text import malformed as _malformed
from harness.client.sse import split_region
from harness.client.tool_calls import MAX_KEPT_CALLS, keep_calls, tool_text
from harness.record.records import Channel, ErrorKind
from harness.record.usage import MAX_COUNT, count_problem

# The request side, the stream error and server text, and tool calls live in their own modules
# (openai_body, server_text, tool_calls); their names are re-exported here, where callers of the
# protocol have always found them.
__all__ = [
    "ANSWER",
    "ENDPOINT_PATHS",
    "FAST_CHUNK",
    "MAX_KEPT_CALLS",
    "REASONING",
    "REGION_BLOCKS",
    "SERVER_TEXT_LIMIT",
    "TOOL",
    "StreamDecoder",
    "StreamError",
    "_malformed",
    "build_body",
    "error_message",
    "keep_calls",
    "server_text",
]

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
            if other:  # not in the fast shape: its events one by one, on the decoder's state
                self._flush(tokens, mark, seen, carried, per_chunk, last_usage, last_pt)
                last_pt = b""
                for ev in split_region(other):
                    n = self.on_event(ev.data)
                    if n:
                        append(n)
                mark = len(tokens)
                seen, carried, per_chunk, done, last_usage = self._locals()
                continue
            if done:
                self._flush(tokens, mark, seen, carried, per_chunk, last_usage, last_pt)
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

    def _locals(self) -> tuple[int, int, bool, bool, bool]:
        """The state `on_region` keeps in locals, read back after an event of another shape."""
        return (
            self._seen_usage_tokens,
            self._carried,
            self.usage_per_chunk,
            self.done,
            self._last_usage,
        )

    def _flush(
        self,
        tokens: Any,
        mark: int,
        seen: int,
        carried: int,
        per_chunk: bool,
        last_usage: bool,
        last_pt: bytes,
    ) -> None:
        """Write `on_region`'s local state back before anything that reads it (an event of
        another shape, an error), and tag the answer events appended since `mark`. The end of
        a region writes back inline: it runs on every read, this only off the fast shape."""
        self._seen_usage_tokens, self._carried, self.usage_per_chunk = seen, carried, per_chunk
        self._last_usage = last_usage
        if last_pt:
            self.prompt_tokens, self.completion_tokens = int(last_pt), seen
        if len(tokens) > mark:
            self._tag(len(tokens) - mark, ANSWER)

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
        # the same tail as _on_json's, written out in both: a shared helper would be a call per
        # token event on the per-read path (on_region is the inlined third copy)
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
        read; it is kept in `usage_flags`.

        One function on purpose (~110 lines): it runs once per event for every server whose
        chunks are not in the fast shape (llama.cpp, SGLang, gateways). Split into a method for
        `choices[0]` and one for `usage` (two calls more per event), the decoder took 1.046x the
        CPU per event (8 alternating rounds, 1.025-1.093; benchmarks/decoder_bench.py, BENCHMARKS.md)."""
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
                tool = tool_text(delta.get("tool_calls"), data)
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
        # on_event's tail again, not a helper: a call per token event (see there)
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
