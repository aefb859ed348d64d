"""Exact lengths from a server's /tokenize, against a stand-in tokenizer served on 127.0.0.1: the
words it splits are left out, the first word is one it keeps whole at a text's start, the chat
template (or BOS) is measured, and every prompt the plan then makes counts exactly as planned.
A tokenizer that merges across words, and a server without /tokenize, keep the estimate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from harness.client.tokenize import TokenizeUnavailable, measure_vocabulary
from harness.config.target import Target
from harness.workload.plan import build_plan, with_vocabulary
from harness.workload.prompts import WORDS
from harness.workload.scenario import load_scenario

SPLIT = {"government", "century", "including"}  # two tokens after a space
SPLIT_AT_START = {"of", "and", "to"}  # two tokens at a text's start
PER_MESSAGE, GENERATION, BOS = 3, 2, 1


def _count_text(text: str, merge: bool) -> int:
    words = text.split()
    n = 0
    for i, w in enumerate(words):
        n += 2 if (w in SPLIT_AT_START if i == 0 else w in SPLIT) else 1
        if merge and i and words[i - 1][-1] == w[0]:  # "world data": "d d" merges into one token
            n -= 1
    return n


def _app(merge: bool = False) -> web.Application:
    async def tokenize(request: web.Request) -> web.Response:
        d = orjson.loads(await request.read())
        if "messages" in d:
            n = sum(PER_MESSAGE + _count_text(m["content"], merge) for m in d["messages"])
            n += GENERATION if d.get("add_generation_prompt", True) else 0
            n += BOS if d.get("add_special_tokens", False) else 0
        else:
            n = _count_text(d["prompt"], merge) + (BOS if d.get("add_special_tokens", True) else 0)
        return web.json_response(
            {"count": n, "max_model_len": 4096, "tokens": list(range(n)), "token_strs": None}
        )

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    return app


@asynccontextmanager
async def _serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _plan(write_scenario, system: int):  # type: ignore[no-untyped-def]
    return build_plan(
        load_scenario(
            write_scenario(f"""
name = "t"
[workload]
prompt_tokens = {{ dist = "uniform", min = 1, max = 400 }}
output_tokens = {{ dist = "fixed", value = 4 }}
system_prompt_tokens = {system}
[[phases]]
name = "p"
requests = 60
arrival = {{ process = "poisson", rate = 10 }}
""")
        )
    )


@pytest.mark.parametrize(
    ("endpoint", "system", "template"),
    [
        ("chat", 0, PER_MESSAGE + GENERATION),  # one user message
        ("chat", 40, 2 * PER_MESSAGE + GENERATION),  # a system message too
        ("completions", 40, BOS),  # the text, with the BOS the server adds
    ],
)
def test_vocabulary_template_and_exact_counts(write_scenario, endpoint, system, template):
    plan = _plan(write_scenario, system)

    async def go():  # type: ignore[no-untyped-def]
        async with _serve(_app()) as url:
            return await measure_vocabulary(Target("http", url, "m", endpoint), plan, endpoint)

    vocab, info = asyncio.run(go())
    assert set(vocab.words) == set(WORDS) - SPLIT and not set(vocab.first_words) & SPLIT_AT_START
    assert vocab.template_tokens == template == info["template_tokens"]
    assert info["method"] == "server_tokenize" and info["vocabulary_words"] == len(WORDS) - len(
        SPLIT
    )
    assert info["tokenize_requests"] < len(WORDS) // 2  # groups halved, not one request per word
    exact = with_vocabulary(plan, vocab, info)
    assert exact.workload["prompt_lengths"] == info and exact.digest() != plan.digest()
    pp = exact.phases[0]
    for k in range(pp.count):
        planned = int(pp.prompt_tokens[k])
        text = exact.prompt_text(planned, pp.first_seq + k)
        if endpoint == "chat":
            msgs = ([{"content": exact.system_prompt}] if system else []) + [{"content": text}]
            served = sum(PER_MESSAGE + _count_text(m["content"], False) for m in msgs) + GENERATION
        else:
            served = _count_text(f"{exact.system_prompt} {text}" if system else text, False) + BOS
        # what the server counts is the plan's length, once the planned length leaves room for the
        # template (a 1-token request cannot be shorter than its template)
        assert served == system + max(planned, template + 1), (k, planned, served)


def test_a_tokenizer_that_merges_across_words_or_no_tokenize_keeps_the_estimate(write_scenario):
    plan = _plan(write_scenario, 0)

    async def go(app: web.Application) -> str:
        async with _serve(app) as url:
            with pytest.raises(TokenizeUnavailable) as ei:
                await measure_vocabulary(Target("http", url, None, "chat"), plan, "chat")
        return str(ei.value)

    assert "merges across words" in asyncio.run(go(_app(merge=True)))
    assert "has no /tokenize (HTTP 404" in asyncio.run(go(web.Application()))
    assert "no `count`" in asyncio.run(go(_json_app({"tokens": []})))


def _json_app(doc: dict) -> web.Application:
    async def h(request: web.Request) -> web.Response:
        return web.json_response(doc)

    app = web.Application()
    app.router.add_post("/tokenize", h)
    return app


def test_server_tokenize_key(write_scenario, tmp_path: Path):
    from harness.errors import ConfigError

    base = 'name = "t"\n[workload]\nprompt_tokens = { dist = "fixed", value = 8 }\noutput_tokens = { dist = "fixed", value = 8 }\n{}\n[[phases]]\nname = "p"\nrequests = 2\narrival = { process = "poisson", rate = 1 }\n'
    assert load_scenario(write_scenario(base.replace("{}", ""))).workload.server_tokenize == "auto"
    assert (
        load_scenario(
            write_scenario(base.replace("{}", 'server_tokenize = "on"'))
        ).workload.server_tokenize
        == "on"
    )
    with pytest.raises(
        ConfigError, match="workload.server_tokenize: expected one of 'auto', 'on', 'off'"
    ):
        load_scenario(write_scenario(base.replace("{}", 'server_tokenize = "yes"')))


def test_tokenize_requests_carry_the_key_and_the_settings_headers(write_scenario):
    """/tokenize is asked with the headers every request carries (Target.request_headers)."""
    from harness.config.target import Secret

    seen: list[tuple[str | None, str | None]] = []

    @web.middleware
    async def record(request: web.Request, handler):  # type: ignore[no-untyped-def]
        seen.append((request.headers.get("Authorization"), request.headers.get("X-Gateway")))
        return await handler(request)

    app = _app()
    app.middlewares.append(record)
    plan = _plan(write_scenario, 0)

    async def go():  # type: ignore[no-untyped-def]
        async with _serve(app) as url:
            target = Target(
                "http", url, "m", "chat", api_key=Secret("sk-test-key"), headers={"X-Gateway": "g1"}
            )
            return await measure_vocabulary(target, plan, "chat")

    asyncio.run(go())
    assert seen and set(seen) == {("Bearer sk-test-key", "g1")}
