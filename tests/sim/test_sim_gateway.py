"""The simulator as a gateway: `api_style = "openai-strict"` (OpenAI's validation, stream shape
and natural EOS, no /metrics), chunk coalescing, `: ping` keep-alives and RPM/TPM limits."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import aiohttp
import orjson
import pytest
from simhttp import run, sim

from harness.errors import ConfigError, UsageError
from harness.sim.cli import build_parser, settings_from_args
from harness.sim.ratelimit import RateLimiter, duration_text
from harness.sim.settings import SimSettings
from harness.sim.strict import CHAT_ARGUMENTS, COMPLETION_ARGUMENTS, unknown_arguments

MODEL = "Qwen2.5-7B-Instruct"
STRICT = {"api_style": "openai-strict"}
CHAT = "/v1/chat/completions"
PROMPT = "one two three four five"


def _chat(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "stream": True, **kw}


async def _raw(
    s: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[int, Any, list[bytes]]:
    """POST; (status, headers, SSE blocks as sent, comments included) or the error body."""
    async with s.post(url, json=body) as r:
        raw = await r.read()
        if r.status != 200 or not r.headers["Content-Type"].startswith("text/event-stream"):
            return r.status, r.headers, [raw]
        return r.status, r.headers, [b for b in raw.split(b"\n\n") if b]


def _data(blocks: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(b[6:]) for b in blocks if b.startswith(b"data: {")]


# ---- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({"ignore_eos": True}, "argument supplied: ignore_eos"),  # vLLM's extension
        (
            {"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
            "argument supplied: stream_options.continuous_usage_stats",
        ),
        ({"top_k": 5, "min_tokens": 3}, "arguments supplied: top_k, min_tokens"),  # several at once
        ({"repetition_penalty": 1.1}, "argument supplied: repetition_penalty"),
    ],
)
def test_strict_refuses_vllm_extensions_in_openais_shape(extra: dict[str, Any], names: str) -> None:
    async def go() -> None:
        async with sim(**STRICT) as server, aiohttp.ClientSession() as s:
            status, _, (body,) = await _raw(s, server.url + CHAT, _chat(max_tokens=4, **extra))
            assert status == 400
            assert orjson.loads(body) == {
                "error": {
                    "message": f"Unrecognized request {names}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
            assert len(server.truth) == 0  # refused before any work

    run(go)


def test_strict_accepts_openais_documented_arguments() -> None:
    # every documented chat argument is known; vLLM's are not; completions has its own list
    assert unknown_arguments({k: 1 for k in CHAT_ARGUMENTS}, chat=True) == []
    assert unknown_arguments({k: 1 for k in COMPLETION_ARGUMENTS}, chat=False) == []
    assert unknown_arguments({"max_completion_tokens": 4, "prompt": "x"}, chat=False) == [
        "max_completion_tokens"
    ]
    assert (
        unknown_arguments(
            {"stream_options": {"include_usage": True, "include_obfuscation": False}}, chat=True
        )
        == []
    )


def test_vllm_style_still_accepts_its_extensions() -> None:
    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            status, _, blocks = await _raw(
                s, server.url + CHAT, _chat(max_tokens=4, ignore_eos=True, top_k=5)
            )
            assert status == 200 and blocks[-1] == b"data: [DONE]"

    run(go)


# ---- the stream: natural EOS, usage only when asked, only at the end ----------------------


@pytest.mark.parametrize("length_key", ["max_tokens", "max_completion_tokens"])
def test_strict_stream_has_openais_shape_and_natural_eos(length_key: str) -> None:
    async def go() -> None:
        async with sim(**STRICT) as server, aiohttp.ClientSession() as s:
            lengths = []
            for _ in range(20):
                body = _chat(**{length_key: 40}, stream_options={"include_usage": True})
                status, _, blocks = await _raw(s, server.url + CHAT, body)
                assert status == 200 and blocks[-1] == b"data: [DONE]"
                ev = _data(blocks)
                assert ev[0]["choices"][0]["delta"] == {
                    "role": "assistant",
                    "content": "",
                    "refusal": None,
                }
                assert all(e["system_fingerprint"] for e in ev)
                assert all(e["usage"] is None for e in ev[:-1])  # null until the last chunk
                assert ev[-2]["choices"][0] == {
                    "index": 0,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
                assert ev[-1]["choices"] == []
                n = ev[-1]["usage"]["completion_tokens"]
                text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev[1:-1])
                assert len(text.split()) == n
                lengths.append(n)
            # EOS decides: every answer ends below the maximum, and not all at one length
            assert all(10 <= n < 40 for n in lengths) and len(set(lengths)) > 3
            async with s.get(server.url + "/metrics") as r:
                assert r.status == 404  # a gateway publishes no /metrics

    run(go)


def test_strict_sends_no_usage_unless_asked() -> None:
    async def go() -> None:
        async with sim(**STRICT) as server, aiohttp.ClientSession() as s:
            for body in (
                _chat(max_tokens=8),
                _chat(max_tokens=8, stream_options={"include_usage": False}),
            ):
                _, _, blocks = await _raw(s, server.url + CHAT, body)
                ev = _data(blocks)
                assert ev and all("usage" not in e for e in ev)

    run(go)


def test_strict_completions_and_whole_answers() -> None:
    async def go() -> None:
        async with sim(**STRICT) as server, aiohttp.ClientSession() as s:
            body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "stream": True}
            _, _, blocks = await _raw(s, server.url + "/v1/completions", body)
            ev = _data(blocks)
            assert (
                ev[-1]["choices"][0]["finish_reason"] == "stop"
                and ev[-1]["choices"][0]["text"] == ""
            )
            async with s.post(
                server.url + CHAT, json={**_chat(max_tokens=16), "stream": False}
            ) as r:
                d = await r.json()
            assert d["object"] == "chat.completion" and d["choices"][0]["finish_reason"] == "stop"
            assert (
                len(d["choices"][0]["message"]["content"].split())
                == d["usage"]["completion_tokens"]
                < 16
            )

    run(go)


# ---- coalescing and keep-alives ----------------------------------------------------------


@pytest.mark.parametrize("style", ["vllm", "openai-strict"])
def test_chunks_coalesce_tokens_as_the_distribution_says(style: str) -> None:
    async def go() -> None:
        async with (
            sim(api_style=style, chunk_tokens=((1, 0.5), (4, 0.5)), seed=3) as server,
            aiohttp.ClientSession() as s,
        ):
            sizes: Counter[int] = Counter()
            for _ in range(10):
                opts = {"include_usage": True}
                if style == "vllm":
                    opts["continuous_usage_stats"] = True
                _, _, blocks = await _raw(
                    s, server.url + CHAT, _chat(max_tokens=60, stream_options=opts)
                )
                ev = _data(blocks)
                content = [
                    e for e in ev if e["choices"] and e["choices"][0]["delta"].get("content")
                ]
                per_chunk = [len(e["choices"][0]["delta"]["content"].split()) for e in content]
                total = ev[-1]["usage"]["completion_tokens"]
                assert sum(per_chunk) == total
                sizes.update(per_chunk[:-1])  # the last chunk may be cut short
                if style == "vllm":  # per-chunk usage counts the coalesced tokens
                    assert [e["usage"]["completion_tokens"] for e in content] == [
                        sum(per_chunk[: i + 1]) for i in range(len(per_chunk))
                    ]
            assert set(sizes) == {1, 4}
            assert 0.3 < sizes[4] / (sizes[1] + sizes[4]) < 0.7

    run(go)


def test_keepalive_pings_are_sse_comments() -> None:
    async def go() -> None:
        # 2000 model s of keep-alive period: only the stream-opening ping; 1e-4: many
        for keepalive_s, few in ((2000.0, True), (1e-4, False)):
            async with (
                sim(**STRICT, keepalive_s=keepalive_s, speedup=20.0) as server,
                aiohttp.ClientSession() as s,
            ):
                _, _, blocks = await _raw(s, server.url + CHAT, _chat(max_tokens=30))
                pings = [b for b in blocks if b == b": ping"]
                assert blocks[0] == b": ping" and blocks[-1] == b"data: [DONE]"
                assert (len(pings) == 1) is few
                assert all(b.startswith((b"data: ", b": ping")) for b in blocks)

    run(go)


# ---- rate limits --------------------------------------------------------------------------


def test_token_bucket_admits_refuses_and_refills() -> None:
    # 600 tokens/min over a 1 s window: 10 tokens/s, a bucket of 10
    rl = RateLimiter(None, 600, 1.0, now_s=0.0)
    assert rl.admit(6, "m", 0.0).ok  # 10 -> 4
    v = rl.admit(6, "m", 0.0)  # 4 < 6: wait (6 - 4) / 10 = 0.2 s
    assert not v.ok and v.limit == "tokens" and v.retry_after_s == pytest.approx(0.2)
    assert v.headers["Retry-After"] == "1" and v.headers["retry-after-ms"] == "200"
    assert (
        v.headers["x-ratelimit-limit-tokens"] == "600"
        and v.headers["x-ratelimit-remaining-tokens"] == "4"
    )
    assert "tokens per min (TPM): Limit 600" in v.message and "try again in 200ms" in v.message
    assert rl.admit(6, "m", 0.2).ok  # refilled to 6
    assert rl.admit(50, "m", 100.0).ok  # a full bucket admits one large request ...
    assert not rl.admit(1, "m", 100.0).ok  # ... into debt
    rpm = RateLimiter(120, None, 1.0, now_s=0.0)  # 2 requests/s, a bucket of 2
    assert [rpm.admit(0, "m", 0.0).ok for _ in range(3)] == [True, True, False]
    assert [duration_text(x) for x in (0.02, 1.5, 360.0)] == ["20ms", "1.5s", "6m0s"]


@pytest.mark.parametrize("style", ["vllm", "openai-strict"])
def test_tpm_limit_answers_429_with_retry_after(style: str) -> None:
    async def go() -> None:
        # 60 tokens/min over a 100 s window: 100 tokens at once, 1 more each second; each
        # request costs 16 + 40 = 56, so the second waits for 12 tokens, 12 s after the first.
        # (A 10 s window made that 1.2 s: on a loaded CI machine the first stream took longer,
        # and the second went through.)
        async with (
            sim(api_style=style, tpm_limit=60, rate_limit_burst_s=100.0) as server,
            aiohttp.ClientSession() as s,
        ):
            statuses = []
            for _ in range(3):
                status, headers, blocks = await _raw(s, server.url + CHAT, _chat(max_tokens=40))
                statuses.append(status)
                assert headers["x-ratelimit-limit-tokens"] == "60"
            assert statuses == [200, 429, 429]
            err = orjson.loads(blocks[0])["error"]
            assert err["code"] == "rate_limit_exceeded" and err["type"] == "tokens"
            assert int(headers["Retry-After"]) == math.ceil(int(headers["retry-after-ms"]) / 1000)
            assert 0 < int(headers["retry-after-ms"]) <= 12000
            truth = sorted(server.truth.values(), key=lambda t: t.arrival_ns)
            assert [(t.status, t.fault) for t in truth] == [
                (200, None),
                (429, "rate_limit"),
                (429, "rate_limit"),
            ]

    run(go)


# ---- settings: [sim] and the command line --------------------------------------------------


def test_gateway_settings_from_a_scenario_and_the_command_line() -> None:
    s = SimSettings.from_mapping(
        {
            "api_style": "openai-strict",
            "keepalive_s": 2,
            "tpm_limit": 60000,
            "rpm_limit": 500,
            "rate_limit_burst_s": 5,
            "chunk_tokens": {"values": [1, 2, 4], "weights": [2, 1, 1]},
        },
        "s.toml",
    )
    assert s.chunk_tokens == ((1, 0.5), (2, 0.25), (4, 0.25))
    flags = settings_from_args(build_parser().parse_args(s.to_argv()))
    assert flags == s
    assert "--tpm-limit" in s.to_argv() and "--api-style" in s.to_argv()
    assert SimSettings.from_mapping({"chunk_tokens": 3}, "s").chunk_tokens == ((3, 1.0),)
    assert (
        SimSettings.from_mapping({"chunk_tokens": [1, 1]}, "s").chunk_tokens == ()
    )  # one per chunk


@pytest.mark.parametrize(
    ("table", "key", "fragment"),
    [
        ({"api_style": "openai"}, "sim.api_style", "vllm, openai-strict"),
        ({"chunk_tokens": 0}, "sim.chunk_tokens", "integers 1..4096"),
        ({"chunk_tokens": {"values": [1, 2], "weights": [1]}}, "sim.chunk_tokens", "same length"),
        (
            {"chunk_tokens": {"values": [1, 2], "weights": [0, 0]}},
            "sim.chunk_tokens",
            "add up to 0",
        ),
        ({"chunk_tokens": "3"}, "sim.chunk_tokens", "integers"),
        ({"keepalive_s": 0}, "sim.keepalive_s", "seconds > 0"),
        ({"tpm_limit": 0}, "sim.tpm_limit", ">= 1"),
        ({"rate_limit_burst_s": -1}, "sim.rate_limit_burst_s", "seconds > 0"),
    ],
)
def test_bad_gateway_settings_name_the_key(
    table: dict[str, object], key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as e:
        SimSettings.from_mapping(table, "scenario.toml")
    assert e.value.key == key and fragment in str(e.value)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--api-style", "x"], "--api-style: expected one of vllm, openai-strict"),
        (["--chunk-tokens", "a"], "--chunk-tokens: expected an integer"),
        (["--chunk-tokens", "2:x"], "--chunk-tokens: expected a number"),
        (["--tpm-limit", "1.5"], "--tpm-limit: expected an integer"),
        (["--keepalive", "-1"], "--keepalive: expected seconds > 0"),
    ],
)
def test_bad_gateway_flags_name_the_flag(argv: list[str], fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(")):
        settings_from_args(build_parser().parse_args(argv))
