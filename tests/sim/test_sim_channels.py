"""The simulator speaks token channels: a reasoning model (`reasoning_tokens`) streams its
thoughts before the answer, a request with `tools` ends in a streamed tool call, in both API
styles, and what the harness's decoder reads equals what the simulator says it sent
(`/sim/truth`): reasoning, answer and tool tokens, and the usage's reasoning count."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from simhttp import run, sim, stream

from harness.client.openai import StreamDecoder
from harness.errors import ConfigError, UsageError
from harness.record.records import Channel, chunk_channels
from harness.sim.answer_format import Layout
from harness.sim.cli import build_parser, settings_from_args
from harness.sim.settings import SimSettings

MODEL = "Qwen2.5-7B-Instruct"
CHAT = "/v1/chat/completions"
TOOLS = [{"type": "function", "function": {"name": "lookup"}}]


def _body(strict: bool, max_tokens: int = 12, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "one two three"}],
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
        **kw,
    }
    if not strict:
        body["ignore_eos"] = True
        body["stream_options"]["continuous_usage_stats"] = True
    return body


def _decode(events: list[bytes]) -> tuple[list[int], list[int], StreamDecoder]:
    d = StreamDecoder()
    tokens = [n for e in events if (n := d.on_event(e))]
    return tokens, list(chunk_channels(tuple(d.channel_runs or ()), len(tokens))), d


def _by_channel(tokens: list[int], channels: list[int]) -> dict[Channel, int]:
    out = dict.fromkeys(Channel, 0)
    for k, ch in zip(tokens, channels, strict=True):
        out[Channel(ch)] += k
    return out


@pytest.mark.parametrize("style", ["vllm", "openai-strict"])
@pytest.mark.parametrize(
    ("extra", "tool"),
    [({}, False), ({"tools": TOOLS, "tool_choice": "required"}, True)],
)
def test_reasoning_then_answer_or_tool_call_as_the_truth_says(
    style: str, extra: dict[str, Any], tool: bool
) -> None:
    strict = style == "openai-strict"

    async def main() -> None:
        async with sim(api_style=style, reasoning_tokens=((3, 0.5), (5, 0.5))) as server:
            async with aiohttp.ClientSession() as s:
                got = [
                    await stream(s, server.base_url + CHAT, _body(strict, **extra))
                    for _ in range(6)
                ]
            truths = server.truth.values()
        assert len(truths) == 6
        for st, truth in zip(got, truths, strict=True):
            tokens, channels, d = _decode(st.events)
            n, r = truth.completion_tokens, truth.reasoning_tokens
            assert r in (3, 5) and n > r  # the distribution's values, within max_tokens
            want = {
                Channel.REASONING: r,
                Channel.ANSWER: 0 if tool else n - r,
                Channel.TOOL: n - r if tool else 0,
            }
            if strict:  # no per-chunk usage: one token per chunk, each chunk one token here
                assert _by_channel(tokens, channels) == want
            else:
                assert _by_channel(tokens, channels) == want
                assert sum(tokens) == d.completion_tokens == n
            assert d.reasoning_tokens == r
            assert d.finish_reason == ("tool_calls" if tool else truth.finish_reason)
            assert truth.tool_call == ("lookup" if tool else None)
        # the reasoning lengths are drawn per request: both values come up
        assert {t.reasoning_tokens for t in truths} == {3, 5}

    run(main)


def test_a_model_that_does_not_reason_sends_what_it_sent_before() -> None:
    async def main() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            st = await stream(
                s, server.base_url + CHAT, _body(False, tools=TOOLS, tool_choice="none")
            )
        tokens, channels, d = _decode(st.events)
        assert d.channel_runs is None and d.reasoning_tokens is None
        assert sum(tokens) == 12 and b"reasoning" not in b"".join(st.events)

    run(main)


def test_tool_call_arguments_are_json() -> None:
    import orjson

    layout = Layout(reasoning=2, tool="f", total=9)
    args = layout.arguments(3, 5) + layout.arguments(5, 9)
    assert orjson.loads(args) == {"q": args[7:-2]}
    assert [k for k, _, _ in layout.segments(0, 9)] == ["reasoning", "tool_name", "tool_args"]


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"reasoning_tokens": -1}, "sim.reasoning_tokens: reasoning tokens must be integers"),
        ({"reasoning_tokens": {"values": [10], "weights": [1, 2]}}, "same length"),
        ({"tool_call_share": 1.5}, "sim.tool_call_share: expected a share in [0, 1]"),
    ],
)
def test_bad_channel_settings_name_the_key(table: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        SimSettings.from_mapping(table, "s.toml")


def test_channel_flags_and_settings_round_trip() -> None:
    s = SimSettings.from_mapping(
        {"reasoning_tokens": {"values": [64, 256], "weights": [1, 3]}, "tool_call_share": 0.5},
        "s.toml",
    )
    assert s.reasoning_tokens == ((64, 0.25), (256, 0.75))
    again = settings_from_args(build_parser().parse_args(s.to_argv()))
    assert again == s
    with pytest.raises(UsageError, match="--reasoning-tokens: expected an integer"):
        settings_from_args(build_parser().parse_args(["--reasoning-tokens", "x"]))


def test_bad_tools_are_refused_with_a_400() -> None:
    async def main() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            for extra in ({"tools": [{"type": "x"}]}, {"tool_choice": "required"}):
                st = await stream(s, server.base_url + CHAT, _body(False, **extra))
                assert st.status == 400

    run(main)
