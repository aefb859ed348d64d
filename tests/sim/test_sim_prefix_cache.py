"""The simulator's prefix cache per request: usage.prompt_tokens_details.cached_tokens is exactly
what the engine found cached (its truth), and POST /reset_prefix_cache empties the cache."""

from __future__ import annotations

import aiohttp
import orjson
from simhttp import run, sim, stream

from harness.sim.kvcache import BlockPool

MODEL = "Qwen2.5-7B-Instruct"
SHARED = " ".join(f"w{i}" for i in range(100))  # 100 words: 6 full blocks of 16 tokens


def _body(tail: str, rid: str | None = None) -> dict:
    return {
        "model": MODEL,
        "prompt": f"{SHARED} {tail}",
        "max_tokens": 4,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }


async def _cached(s: aiohttp.ClientSession, url: str, tail: str, rid: str) -> int | None:
    r = await stream(s, url + "/v1/completions", _body(tail), {"X-Request-Id": rid})
    assert r.status == 200 and r.done
    usage = r.json_events[-1]["usage"]
    details = usage.get("prompt_tokens_details")
    return None if details is None else details["cached_tokens"]


def test_cached_tokens_per_request_are_the_engines_and_a_reset_empties_the_cache() -> None:
    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            first = await _cached(s, server.url, "alpha", "a")
            second = await _cached(s, server.url, "beta", "b")
            assert first == 0 and second == 96  # the shared 6 full blocks, found cached
            for rid, seen in (("a", first), ("b", second)):
                assert server.truth[rid].cached_tokens == seen  # usage says the engine's truth
            async with s.post(server.url + "/reset_prefix_cache") as resp:
                assert resp.status == 200 and orjson.loads(await resp.read()) == {"success": True}
            assert await _cached(s, server.url, "gamma", "c") == 0  # nothing left to find
            assert await _cached(s, server.url, "delta", "d") == 96
            async with s.get(server.url + "/sim/truth") as resp:
                truth = orjson.loads(await resp.read())["requests"]
            assert [truth[r]["cached_tokens"] for r in "abcd"] == [0, 96, 0, 96]

    run(go)


def test_without_prompt_tokens_details_the_usage_says_nothing() -> None:
    async def go() -> None:
        async with sim(enable_prompt_tokens_details=False) as server, aiohttp.ClientSession() as s:
            await _cached(s, server.url, "alpha", "a")
            assert await _cached(s, server.url, "beta", "b") is None  # vLLM's default
            assert server.truth["b"].cached_tokens == 96  # the cache still works

    run(go)


def test_the_strict_style_always_reports_and_has_no_reset_route() -> None:
    async def go() -> None:
        async with sim(api_style="openai-strict") as server, aiohttp.ClientSession() as s:
            body = {k: v for k, v in _body("x").items() if k != "ignore_eos"}  # refused there
            for tail, want in (("alpha", 0), ("beta", 96)):
                body["prompt"] = f"{SHARED} {tail}"
                r = await stream(s, server.url + "/v1/completions", body)
                assert r.status == 200, r.events
                usage = r.json_events[-1]["usage"]
                assert usage["prompt_tokens_details"]["cached_tokens"] == want
            async with s.post(server.url + "/reset_prefix_cache") as resp:
                assert resp.status in (404, 405)  # a gateway has none

    run(go)


def test_the_block_pool_resets_only_when_no_request_holds_a_block() -> None:
    pool = BlockPool(8)
    assert pool.allocate(2)
    assert pool.promote(11) and pool.promote(12)  # two full blocks cached, still held
    assert pool.reset() is False and pool.lookup([11, 12], 2) == 2  # held: nothing dropped
    pool.release(0, [11, 12])  # the request ends: its blocks stay cached, evictable
    assert pool.lookup([11, 12], 2) == 2
    assert pool.reset() is True
    assert pool.lookup([11, 12], 2) == 0 and pool.allocatable == 8
