"""The simulator's `/v1/responses` and `/v1/embeddings`, in both API styles: what the harness's
decoders read equals what the simulator says it did (`/sim/truth`), the strict style refuses what
OpenAI's API refuses, an embeddings batch costs prefill in the engine, and `check` passes
against both."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from simhttp import run, sim

from harness.client.check import PASS, SKIP, run_checks
from harness.client.embeddings import EmbeddingsDecoder
from harness.client.responses import ResponsesDecoder
from harness.client.sse import SSESplitter
from harness.config.target import Target, Timeouts
from harness.record.records import Channel, chunk_channels
from harness.sim.embeddings import EMBEDDING_DIMS

MODEL = "Qwen2.5-7B-Instruct"
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]


async def _post(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with s.post(url, json=body) as resp:
        return resp.status, await resp.read()


def _decode(raw: bytes) -> tuple[ResponsesDecoder, dict[Channel, int], list[dict[str, Any]]]:
    d = ResponsesDecoder()
    events = SSESplitter().feed(raw)
    tokens = [n for e in events if (n := d.on_event(e.data))]
    chans = chunk_channels(tuple(d.channel_runs or ()), len(tokens))
    by = dict.fromkeys(Channel, 0)
    for k, ch in zip(tokens, chans, strict=True):
        by[Channel(ch)] += k
    docs = [orjson.loads(e.data) for e in events]
    assert [e.event for e in events] == [doc["type"] for doc in docs]  # `event:` names the type
    return d, by, docs


@pytest.mark.parametrize("style", ["vllm", "openai-strict"])
@pytest.mark.parametrize("tool", [False, True])
def test_responses_stream_channels_as_the_truth_says(style: str, tool: bool) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "input": "one two three",
        "instructions": "be brief",
        "max_output_tokens": 12,
        "stream": True,
    }
    if tool:
        body |= {"tools": TOOLS, "tool_choice": "required"}

    async def main() -> None:
        async with sim(api_style=style, reasoning_tokens=((3, 1.0),)) as server:
            async with aiohttp.ClientSession() as s:
                got = [await _post(s, server.base_url + "/v1/responses", body) for _ in range(3)]
            truths = server.truth.values()
        for (status, raw), truth in zip(got, truths, strict=True):
            assert status == 200 and truth.endpoint == "responses"
            d, by, docs = _decode(raw)
            n = truth.completion_tokens
            assert by == {
                Channel.REASONING: 3,
                Channel.ANSWER: 0 if tool else n - 3,
                Channel.TOOL: n - 3 if tool else 0,
            }
            assert d.done and d.completion_tokens == n and d.reasoning_tokens == 3
            assert d.prompt_tokens == truth.prompt_tokens
            assert docs[0]["type"] == "response.created"
            assert docs[-1]["type"] in ("response.completed", "response.incomplete")
            assert [doc["sequence_number"] for doc in docs] == list(range(len(docs)))
            if tool:
                args = "".join(
                    doc["delta"]
                    for doc in docs
                    if doc["type"] == "response.function_call_arguments.delta"
                )
                assert set(orjson.loads(args)) == {"q"}  # the arguments are a JSON object

    run(main)


def test_responses_usage_reports_the_prefix_cache_as_the_truth_says() -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "input": " ".join(f"w{i}" for i in range(200)),
        "max_output_tokens": 4,
        "stream": True,
    }

    async def main() -> None:
        async with sim() as server:
            async with aiohttp.ClientSession() as s:
                got = [await _post(s, server.base_url + "/v1/responses", body) for _ in range(2)]
            truths = list(server.truth.values())
        cached = [_decode(raw)[0].cached_tokens for _, raw in got]
        assert cached == [t.cached_tokens or 0 for t in truths]
        assert cached[0] == 0 and cached[1] > 0  # the second finds the first's prompt

    run(main)


def test_responses_whole_answer_and_strict_refusals() -> None:
    async def main() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            status, raw = await _post(
                s,
                server.base_url + "/v1/responses",
                {"model": MODEL, "input": "a b c", "max_output_tokens": 5, "ignore_eos": True},
            )
            assert status == 200
            doc = orjson.loads(raw)
            assert doc["object"] == "response" and doc["usage"]["output_tokens"] == 5
            assert doc["output"][0]["content"][0]["type"] == "output_text"
            status, raw = await _post(s, server.base_url + "/v1/responses", {"model": MODEL})
            assert status == 400 and b"input must be" in raw
        async with sim(api_style="openai-strict") as server, aiohttp.ClientSession() as s:
            status, raw = await _post(
                s,
                server.base_url + "/v1/responses",
                {"model": MODEL, "input": "a", "ignore_eos": True, "stream": True},
            )
            err = orjson.loads(raw)["error"]
            assert status == 400 and "ignore_eos" in err["message"] and err["code"] is None

    run(main)


@pytest.mark.parametrize("style", ["vllm", "openai-strict"])
def test_embeddings_answer_and_usage(style: str) -> None:
    async def main() -> None:
        async with sim(api_style=style) as server, aiohttp.ClientSession() as s:
            url = server.base_url + "/v1/embeddings"
            status, raw = await _post(
                s, url, {"model": MODEL, "input": ["a b c", "d e"], "encoding_format": "base64"}
            )
            assert status == 200
            d = EmbeddingsDecoder()
            d.on_body(raw)
            assert d.n_embeddings == 2 and d.prompt_tokens == 5
            status, raw = await _post(s, url, {"model": MODEL, "input": "a b"})
            vec = orjson.loads(raw)["data"][0]["embedding"]
            assert status == 200 and len(vec) == EMBEDDING_DIMS  # floats by default
            status, raw = await _post(s, url, {"model": MODEL, "input": [""]})
            assert status == 400 and b"empty" in raw
            status, raw = await _post(s, url, {"model": MODEL, "input": "a", "ignore_eos": True})
            assert (status == 400) == (style == "openai-strict")  # a gateway refuses extensions
            truths = server.truth.values()
            assert truths[0].endpoint == "embeddings" and truths[0].prompt_tokens == 5

    run(main)


def test_an_embeddings_batch_is_priced_as_prefill() -> None:
    """A bigger batch costs the engine more model time (its roofline prices the prefill)."""

    async def model_s(inputs: list[str]) -> float:
        async with sim() as server, aiohttp.ClientSession() as s:
            status, _ = await _post(s, server.base_url + "/v1/embeddings", {"input": inputs})
            assert status == 200
            return server.engine.model_s

    small = asyncio.run(model_s(["w " * 16]))
    big = asyncio.run(model_s(["w " * 1024] * 16))
    assert big > 4 * small > 0


@pytest.mark.parametrize("endpoint", ["responses", "embeddings"])
def test_check_passes_on_both_endpoints(endpoint: str) -> None:
    async def go() -> dict[str, Any]:
        async with sim() as server:
            t = Target(
                "http",
                server.url,
                MODEL,
                endpoint,
                timeouts=Timeouts(connect_s=2.0, first_token_s=30, idle_s=30),
            )
            steps = await run_checks(t, health_path="/health", max_tokens=8, read_timeout_s=30)
        return {s.name: s for s in steps}

    steps = asyncio.run(go())
    want = [PASS] * 4 + ([SKIP] if endpoint == "embeddings" else [PASS])
    assert [s.status for s in steps.values()] == want, steps
    if endpoint == "embeddings":
        assert "1 embedding(s), usage: " in steps["non-streaming request"].detail
    else:
        assert "TTFT" in steps["streaming request"].detail
