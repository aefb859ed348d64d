"""The simulator's OpenAI-compatible HTTP face, against a server started on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from simhttp import run, sim, stream

from harness.sim.app import SimServer
from harness.sim.protocol import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_REPLY

MODEL = "Qwen2.5-7B-Instruct"
PROMPT = "alpha beta gamma delta epsilon"  # 5 tokens: one per whitespace-separated word
USAGE_BOTH = {"include_usage": True, "continuous_usage_stats": True}


def _text_of(events: list[dict[str, Any]], chat: bool) -> str:
    out = []
    for e in events:
        for c in e["choices"]:
            out.append(c["delta"].get("content", "") if chat else c["text"])
    return "".join(out)


def test_streamed_completion_has_vllm_chunk_shape_and_exact_usage() -> None:
    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            body = {
                "model": MODEL,
                "prompt": PROMPT,
                "max_tokens": 12,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            }
            r = await stream(s, server.url + "/v1/completions", body)
            assert r.status == 200 and r.done and r.error is None
            assert r.headers["Content-Type"].startswith("text/event-stream")
            events = r.json_events
            tokens, last = events[:-1], events[-1]
            assert len(tokens) == 12  # one event per token
            for i, e in enumerate(tokens):
                assert e["object"] == "text_completion" and e["model"] == MODEL
                assert set(e["choices"][0]) >= {"index", "text", "finish_reason", "logprobs"}
                assert e["choices"][0]["finish_reason"] == ("length" if i == 11 else None)
                assert "usage" not in e
            assert last["choices"] == []
            assert last["usage"] == {
                "prompt_tokens": 5,
                "completion_tokens": 12,
                "total_tokens": 17,
                # vLLM 0.32 with --enable-prompt-tokens-details (the simulator's default): a miss
                "prompt_tokens_details": {"cached_tokens": 0},
            }
            assert len(_text_of(tokens, chat=False).split()) == 12

    run(go)


def test_streamed_chat_has_role_chunk_continuous_usage_and_done() -> None:
    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            messages = [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": PROMPT},
            ]
            body = {
                "model": MODEL,
                "messages": messages,
                "max_completion_tokens": 6,
                "stream": True,
                "ignore_eos": True,
                "stream_options": USAGE_BOTH,
            }
            r = await stream(s, server.url + "/v1/chat/completions", body)
            events = r.json_events
            prompt = 2 + 5 + 2 * CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_REPLY
            role = events[0]
            assert role["object"] == "chat.completion.chunk"
            assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
            assert role["usage"]["completion_tokens"] == 0
            content = events[1:-1]
            assert len(content) == 6
            for i, e in enumerate(content, start=1):
                assert e["usage"] == {
                    "prompt_tokens": prompt,
                    "completion_tokens": i,
                    "total_tokens": prompt + i,
                }
                assert "role" not in e["choices"][0]["delta"]
            assert content[-1]["choices"][0]["finish_reason"] == "length"
            assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 6
            assert len(_text_of(content, chat=True).split()) == 6
            assert r.done

    run(go)


def test_non_streamed_answers_count_words_as_tokens() -> None:
    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            async with s.post(
                server.url + "/v1/completions",
                json={"prompt": PROMPT, "max_tokens": 9, "ignore_eos": True},
            ) as resp:
                doc = await resp.json()
            assert doc["object"] == "text_completion"
            assert doc["usage"]["prompt_tokens"] == 5 and doc["usage"]["completion_tokens"] == 9
            assert len(doc["choices"][0]["text"].split()) == 9
            chat = {
                "model": MODEL,
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": 4,
                "ignore_eos": True,
            }
            async with s.post(server.url + "/v1/chat/completions", json=chat) as resp:
                doc = await resp.json()
            assert doc["object"] == "chat.completion"
            msg = doc["choices"][0]["message"]
            assert msg["role"] == "assistant" and len(msg["content"].split()) == 4
            assert doc["usage"]["completion_tokens"] == 4
            assert doc["choices"][0]["finish_reason"] == "length"

    run(go)


def test_eos_is_seeded_and_can_stop_early() -> None:
    async def go(seed: int) -> list[tuple[int, str]]:
        out = []
        async with sim(seed=seed) as server, aiohttp.ClientSession() as s:
            for _ in range(6):
                body = {"prompt": PROMPT, "max_tokens": 400}
                async with s.post(server.url + "/v1/completions", json=body) as resp:
                    doc = await resp.json()
                out.append((doc["usage"]["completion_tokens"], doc["choices"][0]["finish_reason"]))
        return out

    import asyncio

    a, b = asyncio.run(go(5)), asyncio.run(go(5))
    assert a == b
    assert any(reason == "stop" and n < 400 for n, reason in a)
    assert all((reason == "stop") == (n < 400) for n, reason in a)


def test_request_id_header_is_echoed_and_keys_the_truth() -> None:
    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            body = {
                "prompt": PROMPT,
                "max_tokens": 5,
                "stream": True,
                "ignore_eos": True,
                "stream_options": USAGE_BOTH,
            }
            r = await stream(
                s, server.url + "/v1/completions", body, headers={"X-Request-Id": "req-42"}
            )
            assert r.headers["X-Request-Id"] == "req-42"
            assert all(e["id"] == "req-42" for e in r.json_events)
            t = server.truth["req-42"]
            assert len(t.token_ns) == 5 == t.completion_tokens
            assert t.arrival_ns <= t.scheduled_ns <= t.first_token_ns == t.token_ns[0]  # type: ignore[operator]
            assert list(t.token_ns) == sorted(t.token_ns)
            assert t.finish_reason == "length" and t.preemptions == 0
            async with s.get(server.url + "/sim/truth") as resp:
                doc = orjson.loads(await resp.read())
            assert doc["requests"]["req-42"]["token_ns"] == list(t.token_ns)

    run(go)


def test_api_key_is_required_when_set() -> None:
    async def go() -> None:
        async with sim(api_key="sk-test-123") as server, aiohttp.ClientSession() as s:
            url = server.url + "/v1/completions"
            body = {"prompt": PROMPT, "max_tokens": 2}
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": "sk-test-123"},
            ):
                async with s.post(url, json=body, headers=headers) as resp:
                    assert resp.status == 401
                    err = (await resp.json())["error"]
                    assert set(err) == {"message", "type", "param", "code"} and err["code"] == 401
            ok = {"Authorization": "Bearer sk-test-123"}
            async with s.post(url, json=body, headers=ok) as resp:
                assert resp.status == 200
            async with s.get(server.url + "/v1/models") as resp:
                assert resp.status == 401
            for open_path in ("/health", "/metrics"):  # vLLM leaves these open
                async with s.get(server.url + open_path) as resp:
                    assert resp.status == 200

    run(go)


def test_unknown_model_is_404_and_hf_id_is_accepted() -> None:
    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            url = server.url + "/v1/completions"
            async with s.post(url, json={"model": "gpt-4", "prompt": "x", "max_tokens": 1}) as resp:
                assert resp.status == 404
                err = (await resp.json())["error"]
                assert err["type"] == "NotFoundError" and "gpt-4" in err["message"]
            body = {"model": "Qwen/Qwen2.5-7B-Instruct", "prompt": "x", "max_tokens": 1}
            async with s.post(url, json=body) as resp:
                assert resp.status == 200
            async with s.get(server.url + "/v1/models") as resp:
                doc = await resp.json()
            # every name it answers to is listed, the served name first (as vLLM lists each
            # --served-model-name)
            assert [m["id"] for m in doc["data"]] == [MODEL, "Qwen/Qwen2.5-7B-Instruct"]

    run(go)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"prompt": "w " * 2000, "max_tokens": 10}, "maximum context length is 2000 tokens"),
        ({"prompt": "w " * 1990, "max_tokens": 20}, "you requested 2010 tokens (1990 in the"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens must be at least 1"),
        ({"prompt": 42}, "prompt must be a string"),
        ({"prompt": "x", "n": 2}, "n = 1"),
    ],
)
def test_bad_requests_get_400_in_vllm_style(body: dict[str, Any], fragment: str) -> None:
    async def go() -> None:
        async with sim(max_model_len=2000) as server, aiohttp.ClientSession() as s:
            async with s.post(server.url + "/v1/completions", json=body) as resp:
                assert resp.status == 400
                err = (await resp.json())["error"]
            assert err["type"] == "BadRequestError" and err["code"] == 400
            assert fragment in err["message"]

    run(go)


def test_request_larger_than_the_kv_cache_is_refused() -> None:
    async def post(server: SimServer, s: aiohttp.ClientSession) -> str:
        body = {"prompt": "w " * 100, "max_tokens": 100}
        async with s.post(server.url + "/v1/completions", json=body) as resp:
            assert resp.status == 400
            return str((await resp.json())["error"]["message"])

    async def go() -> None:
        # 10 blocks of 16 = 160 tokens of cache; max_model_len defaults to that.
        async with sim(num_gpu_blocks=10) as server, aiohttp.ClientSession() as s:
            assert "maximum context length is 160 tokens" in await post(server, s)
        # An explicit, larger max_model_len: the cache is what refuses.
        async with (
            sim(num_gpu_blocks=10, max_model_len=1000) as server,
            aiohttp.ClientSession() as s,
        ):
            assert "the cache holds 160 tokens" in await post(server, s)

    run(go)


def test_root_path_moves_the_routes() -> None:
    async def go() -> None:
        async with sim(root_path="/api") as server, aiohttp.ClientSession() as s:
            body = {"prompt": PROMPT, "max_tokens": 2}
            async with s.post(server.url + "/api/v1/completions", json=body) as resp:
                assert resp.status == 200
            async with s.post(server.url + "/v1/completions", json=body) as resp:
                assert resp.status == 404
            for path in (
                "/api/health",
                "/health",
                "/api/metrics",
                "/metrics",
                "/api/v1/models",
                "/api/sim/truth",
            ):
                async with s.get(server.url + path) as resp:
                    assert resp.status == 200, path
            assert server.base_url == server.url + "/api"

    run(go)


def test_many_concurrent_streams_all_complete_with_exact_counts() -> None:
    async def go() -> None:
        import asyncio

        async with sim(max_num_seqs=8) as server, aiohttp.ClientSession() as s:
            url = server.url + "/v1/chat/completions"

            async def one(i: int) -> int:
                body = {
                    "messages": [{"role": "user", "content": PROMPT * (i + 1)}],
                    "max_tokens": 10 + i,
                    "stream": True,
                    "ignore_eos": True,
                    "stream_options": USAGE_BOTH,
                }
                r = await stream(s, url, body, headers={"X-Request-Id": f"c{i}"})
                assert r.done
                return r.json_events[-1]["usage"]["completion_tokens"]

            counts = await asyncio.gather(*(one(i) for i in range(30)))
            assert counts == [10 + i for i in range(30)]
            assert all(len(server.truth[f"c{i}"].token_ns) == 10 + i for i in range(30))
            assert server.engine.scheduler.idle

    run(go)


def test_client_that_goes_away_frees_its_place() -> None:
    async def go() -> None:
        import asyncio

        async with sim(speedup=1.0) as server, aiohttp.ClientSession() as s:
            body = {"prompt": PROMPT, "max_tokens": 5000, "stream": True, "ignore_eos": True}
            async with s.post(
                server.url + "/v1/completions", json=body, headers={"X-Request-Id": "leaver"}
            ) as resp:
                await resp.content.readuntil(b"\n\n")
            for _ in range(200):  # the server notices on its next write
                if server.engine.scheduler.idle:
                    break
                await asyncio.sleep(0.01)
            assert server.engine.scheduler.idle
            assert server.truth["leaver"].finish_reason == "abort"

    run(go)


def test_tokenize_counts_what_usage_counts() -> None:
    """vLLM's POST /tokenize: the same count the request's usage.prompt_tokens gets (the chat
    template included, or left out of the generation prompt when asked), for chat messages and a
    completion prompt; token strings on request; a body without prompt or messages is a 400."""

    async def go() -> None:
        async with sim() as server, aiohttp.ClientSession() as s:
            messages = [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": PROMPT},
            ]

            async def post(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
                async with s.post(server.url + path, data=orjson.dumps(body)) as resp:
                    return resp.status, orjson.loads(await resp.read())

            for chat, body in ((True, {"messages": messages}), (False, {"prompt": PROMPT})):
                status, tok = await post("/tokenize", {"model": MODEL, **body})
                assert status == 200 and set(tok) == {
                    "count",
                    "max_model_len",
                    "tokens",
                    "token_strs",
                }
                path = "/v1/chat/completions" if chat else "/v1/completions"
                r = await stream(
                    s,
                    server.url + path,
                    {
                        "model": MODEL,
                        **body,
                        "max_tokens": 2,
                        "stream": True,
                        "stream_options": {"include_usage": True},
                    },
                )
                usage = r.json_events[-1]["usage"]["prompt_tokens"]
                assert tok["count"] == usage == len(tok["tokens"]) and tok["token_strs"] is None
            _, tok = await post(
                "/tokenize",
                {"messages": messages, "add_generation_prompt": False, "return_token_strs": True},
            )
            assert tok["count"] == 2 + 5 + 2 * CHAT_TOKENS_PER_MESSAGE
            assert tok["token_strs"][:3] == ["<|start|>", "system", ":"]
            status, err = await post("/tokenize", {"model": MODEL})
            assert status == 400 and "prompt" in err["error"]["message"]

    run(go)
