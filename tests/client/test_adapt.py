"""Request adaptation: which argument a refusal names, and the negotiation that leaves it out."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from harness.client.adapt import (
    CONTINUOUS_USAGE,
    IGNORE_EOS,
    RequestShape,
    negotiate,
    refused_arguments,
)
from harness.client.probe import probe_target
from harness.config.target import Target
from harness.sim.app import start_sim_server
from harness.sim.settings import SimSettings
from harness.workload.lengths import Fixed
from harness.workload.scenario import Workload

FULL = RequestShape(
    ignore_eos=True, continuous_usage=True, extra={"top_k": 5, "cache_prompt": False}
)


def _openai(message: str, param: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": None,
            }
        }
    )


@pytest.mark.parametrize(
    ("body", "named"),
    [
        # OpenAI, one argument and several
        (_openai("Unrecognized request argument supplied: ignore_eos"), [IGNORE_EOS]),
        (
            _openai(
                "Unrecognized request arguments supplied: top_k, stream_options.continuous_usage_stats"
            ),
            ["top_k", CONTINUOUS_USAGE],
        ),
        # the nested name alone still means the nested argument
        (
            _openai("Unrecognized request argument supplied: continuous_usage_stats"),
            [CONTINUOUS_USAGE],
        ),
        # newer OpenAI models: max_tokens is refused in favour of max_completion_tokens
        (
            _openai(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                "'max_completion_tokens' instead.",
                "max_tokens",
            ),
            ["max_tokens"],
        ),
        # the error's `param` alone
        (_openai("Invalid request.", "cache_prompt"), ["cache_prompt"]),
        # FastAPI/pydantic: 422 with extra_forbidden locations
        (
            orjson.dumps(
                {
                    "detail": [
                        {
                            "type": "extra_forbidden",
                            "loc": ["body", "ignore_eos"],
                            "msg": "Extra inputs are not permitted",
                        }
                    ]
                }
            ),
            [IGNORE_EOS],
        ),
        # a gateway that only mentions the name somewhere, in its own words or in plain text
        (
            b'{"code": 40001, "msg": "field ignore_eos is not allowed for this provider"}',
            [IGNORE_EOS],
        ),
        (b"<html><body>bad request: top_k not permitted</body></html>", ["top_k"]),
        # no argument named (a context-length error): nothing to drop
        (_openai("This model's maximum context length is 4096 tokens."), []),
        # a word inside another word is not a mention
        (b"bad value for not_ignore_eos_x", []),
    ],
)
def test_refused_arguments_reads_each_way_of_saying_it(body: bytes, named: list[str]) -> None:
    assert refused_arguments(body, FULL) == named


def _scripted(refuse: set[str], silent: bool = False):
    """A post() that refuses any of `refuse` present in the shape (naming it unless `silent`)."""
    sent: list[RequestShape] = []

    async def post(shape: RequestShape) -> tuple[int, bytes]:
        sent.append(shape)
        present = [n for n in shape.droppable() if n in refuse]
        if shape.max_tokens_key == "max_tokens" and "max_tokens" in refuse:
            present.append("max_tokens")
        if not present:
            return 200, b"data: [DONE]\n\n"
        if silent:
            return 400, _openai("Bad request.")
        return 400, _openai(f"Unrecognized request argument supplied: {present[0]}")

    return post, sent


def test_negotiate_drops_named_arguments_one_refusal_at_a_time() -> None:
    post, sent = _scripted({IGNORE_EOS, "cache_prompt"})
    n = asyncio.run(negotiate(post, FULL, "chat"))
    assert n.error is None and n.status == 200
    assert [a.parameter for a in n.adaptations] == ["cache_prompt", IGNORE_EOS]
    assert n.shape == RequestShape(False, True, {"top_k": 5})
    assert len(sent) == 3
    a = n.adaptations[1]
    assert a.line() == (
        "ignore_eos refused by the target: output lengths now follow the model's EOS; "
        "planned vs actual lengths are reported"
    )
    assert (
        a.action == "dropped" and "Unrecognized request argument supplied: ignore_eos" in a.evidence
    )


def test_negotiate_finds_an_unnamed_refusal_by_leaving_out_one_argument() -> None:
    post, sent = _scripted({"top_k"}, silent=True)
    n = asyncio.run(negotiate(post, FULL, "chat"))
    assert [a.parameter for a in n.adaptations] == ["top_k"] and n.status == 200
    assert "names no argument" in n.adaptations[0].evidence
    # tried: the full shape, then without continuous usage (still refused), then without top_k
    assert [s.droppable() for s in sent][1:] == [
        ["top_k", "cache_prompt", IGNORE_EOS],
        [CONTINUOUS_USAGE, "cache_prompt", IGNORE_EOS],
    ]


def test_negotiate_renames_max_tokens_on_chat_only() -> None:
    post, _ = _scripted({"max_tokens"})
    n = asyncio.run(negotiate(post, FULL, "chat"))
    assert n.shape.max_tokens_key == "max_completion_tokens"
    assert n.adaptations[0].action == "renamed to max_completion_tokens"
    post, _ = _scripted({"max_tokens"}, silent=False)
    n = asyncio.run(negotiate(post, RequestShape(False, False), "completions"))
    assert n.error is not None and n.status == 400  # nothing to leave out


def test_negotiate_gives_up_with_the_servers_words() -> None:
    async def post(shape: RequestShape) -> tuple[int, bytes]:
        return 400, _openai("This model's maximum context length is 10 tokens.")

    n = asyncio.run(negotiate(post, FULL, "chat"))
    assert (
        n.error == "HTTP 400: This model's maximum context length is 10 tokens."
        and not n.adaptations
    )


def test_shape_body_is_the_runs_body() -> None:
    body = orjson.loads(
        FULL.without(IGNORE_EOS).body(
            endpoint="chat", model="m", prompt="hi", max_tokens=3, temperature=0.5, top_p=None
        )
    )
    assert body["max_tokens"] == 3 and "ignore_eos" not in body and body["top_k"] == 5
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    body = orjson.loads(
        FULL.without("max_tokens")
        .without(CONTINUOUS_USAGE)
        .body(endpoint="chat", model="m", prompt="hi", max_tokens=3, temperature=None, top_p=None)
    )
    assert body["max_completion_tokens"] == 3 and "max_tokens" not in body
    assert body["stream_options"] == {"include_usage": True} and body["ignore_eos"] is True


@pytest.mark.parametrize("style", ["vllm", "openai-strict"])
def test_probe_sends_the_runs_shape_and_learns_what_the_stand_in_refuses(style: str) -> None:
    async def go():
        server = await start_sim_server(SimSettings(speedup=200.0, api_style=style))
        try:
            wl = Workload(Fixed(8), Fixed(4), ignore_eos=True, extra_body={"cache_prompt": False})
            return await probe_target(Target("http", server.url, None, "chat"), wl, timeout_s=10)
        finally:
            await server.close()

    p = asyncio.run(go())
    assert p.error is None and p.model == "Qwen2.5-7B-Instruct"
    if style == "vllm":  # vLLM takes everything (the simulator ignores cache_prompt)
        assert p.adaptations == () and p.continuous_usage and p.per_chunk_usage
        assert p.shape == RequestShape(True, True, {"cache_prompt": False})
    else:
        assert sorted(a.parameter for a in p.adaptations) == sorted(
            [IGNORE_EOS, CONTINUOUS_USAGE, "cache_prompt"]
        )
        assert (
            p.shape == RequestShape(False, False, {})
            and not p.continuous_usage
            and not p.per_chunk_usage
        )
