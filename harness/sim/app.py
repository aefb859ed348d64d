"""The simulator's HTTP face: vLLM's OpenAI-compatible routes on aiohttp, plus `/sim/truth`.

`start_sim_server(settings)` is the in-process API (tests, the launcher's fallback); the CLI
in `cli.py` wraps it. Routes, under `root_path` when one is set:

    POST /v1/completions, /v1/chat/completions   streamed (SSE) or not
    POST /v1/responses                           the Responses API, streamed or not (responses.py)
    POST /v1/embeddings                          prefill-only cost, one JSON answer (embeddings.py)
    GET  /v1/models, /health, /metrics           /health and /metrics also without the root
    GET  /sim/truth                              server-side truth (JSON), never needs the key
    POST /reset_prefix_cache                     vLLM's (dev mode): drop the cached blocks;
                                                 {"success": false} while a request holds any

With an API key, `/v1/*` needs `Authorization: Bearer <key>` (401 otherwise), as vLLM does.

Gateway behaviour (settings.py): `api_style = "openai-strict"` validates, refuses and streams
as OpenAI's API does (`strict.py`) and serves no `/metrics`; `chunk_tokens` coalesces tokens
into chunks; `keepalive_s` writes `: ping` comments; `rpm_limit` / `tpm_limit` answer 429
with Retry-After (`ratelimit.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from harness.sim import faults as F
from harness.sim.answers import json_response, write_answer
from harness.sim.embeddings import EMBEDDINGS_ARGUMENTS, embeddings_body, parse_embeddings
from harness.sim.engine import RequestHandle, SimEngine, output_target
from harness.sim.metrics import render
from harness.sim.protocol import (
    ParsedRequest,
    RequestError,
    block_hashes,
    error_body,
    parse_request,
    tokenize,
)
from harness.sim.responses import as_chat, unknown_responses_arguments
from harness.sim.settings import SimSettings
from harness.sim.state import ChunkSizes, SimState, channels_of, tool_draw
from harness.sim.strict import (
    as_strict,
    natural_length,
    openai_error_body,
    refusal,
    unknown_arguments,
)
from harness.sim.truth import RequestTruth, TruthStore

# Moved to harness.sim.state with the rest of the per-request draws; named here for callers.
__all__ = [
    "ChunkSizes",
    "SimServer",
    "SimState",
    "build_app",
    "channels_of",
    "start_sim_server",
    "tool_draw",
]

SHUTDOWN_TIMEOUT_S = 1.0  # open streams are cut after this on close
_json = json_response


def _error(e: RequestError, state: SimState) -> web.Response:
    if state.strict:
        e = as_strict(e)
    return _json(e.status, e.body())


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _auth_middleware(state: SimState, prefix: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (
            state.api_key
            and request.path.startswith(prefix)
            and request.headers.get("Authorization", "") != f"Bearer {state.api_key}"
        ):
            if state.strict:
                return _json(
                    401,
                    openai_error_body(
                        "Incorrect API key provided.",
                        "invalid_request_error",
                        None,
                        "invalid_api_key",
                    ),
                )
            return _json(401, error_body(401, "Unauthorized", "AuthenticationError"))
        return await handler(request)

    return auth


async def _read_json(
    request: web.Request, state: SimState, unknown: Callable[[dict[str, Any]], list[str]]
) -> Any:
    """The request's JSON body; a web.Response to answer with instead where it is not JSON or
    (strict gateway) names an argument OpenAI's API does not know (`unknown(data)`)."""
    try:
        data = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(RequestError(400, "request body is not valid JSON", "BadRequestError"), state)
    if state.strict and isinstance(data, dict):
        names = unknown(data)
        if names:
            return _error(refusal(names), state)
    return data


def _check_model(model: str, state: SimState) -> None:
    if model not in state.served_names:
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def _parse_generation(data: Any, state: SimState, chat: bool, responses: bool) -> ParsedRequest:
    """The request as the engine takes it; RequestError where vLLM would refuse it."""
    r = state.resolved
    if responses:
        data = as_chat(data)
    req = parse_request(data, chat, state.model_name, r.max_model_len)
    _check_model(req.model, state)
    if req.prompt_tokens + req.max_tokens > r.kv_capacity_tokens:
        raise RequestError(
            400,
            f"This request needs {req.prompt_tokens + req.max_tokens} tokens of KV cache "
            f"({req.prompt_tokens} in the messages, {req.max_tokens} in the completion) but "
            f"the cache holds {r.kv_capacity_tokens} tokens. Please reduce the length of the "
            "messages or completion.",
            "BadRequestError",
            "max_tokens",
        )
    return req


def _generation_truth(
    request_id: str, req: ParsedRequest, state: SimState, kind: str, arrival_ns: int
) -> RequestTruth:
    """The request's truth as drawn at arrival: how long its answer will be and how it ends
    (EOS or max_tokens, after the reasoning, in a tool call)."""
    if state.strict:
        target, reason = natural_length(req.max_tokens, state.eos_rng)
    else:
        target, reason = output_target(req.max_tokens, req.ignore_eos, state.eos_rng)
    reasoning, tool = channels_of(req, state)
    if reasoning and reason == "stop":  # the answer's natural end comes after the thinking
        target = min(req.max_tokens, target + reasoning)
        reason = "stop" if target < req.max_tokens else "length"
    if tool is not None and target > reasoning:
        reason = "tool_calls"  # the call is complete where the answer would have ended
    return RequestTruth(
        request_id,
        kind,
        req.stream,
        arrival_ns,
        prompt_tokens=req.prompt_tokens,
        max_tokens=req.max_tokens,
        target_tokens=target,
        finish_reason=reason,
        reasoning_tokens=reasoning,
        tool_call=tool,
    )


def _refused(
    state: SimState, req: ParsedRequest, truth: RequestTruth, headers: dict[str, str]
) -> web.Response | None:
    """The 429 of the rate limiter or the 429 / 500 of a drawn fault (the truth is filed
    either way); None where the request goes to the engine."""
    if state.limiter.active:
        verdict = state.limiter.admit(
            req.prompt_tokens + req.max_tokens, req.model, time.monotonic()
        )
        headers.update(verdict.headers)
        if not verdict.ok:
            truth.status, truth.end_ns, truth.finish_reason = 429, time.perf_counter_ns(), None
            truth.fault = "rate_limit"
            state.truth.add(truth)
            body = openai_error_body(verdict.message, verdict.limit, None, "rate_limit_exceeded")
            return _json(429, body, headers)
    truth.fault = state.faults.pick()
    state.truth.add(truth)
    if truth.fault not in ("http429", "http500"):
        return None
    status = 429 if truth.fault == "http429" else 500
    truth.status, truth.end_ns, truth.finish_reason = status, time.perf_counter_ns(), None
    if status == 429:
        headers["Retry-After"] = str(F.RETRY_AFTER_S)
        body = error_body(429, "Too many requests (simulated fault).", "RateLimitError")
    else:
        body = error_body(500, "Internal server error (simulated fault).", "InternalServerError")
    return _json(status, body, headers)


def _submit(state: SimState, truth: RequestTruth, words: Sequence[str]) -> RequestHandle:
    """Hand the request to the engine, with its prompt's block hashes where the prefix cache
    is on."""
    s = state.resolved.settings
    hashes: tuple[int, ...] = ()
    if s.enable_prefix_caching:
        hashes = block_hashes(words, s.block_size)
    return state.engine.submit(truth, hashes)


def _settle(state: SimState, handle: RequestHandle) -> None:
    """After the answer: a request the engine did not finish (the client left, a fault cut it,
    the server is closing) is aborted; the truth gets its end."""
    truth = handle.truth
    if not handle.finished:
        state.engine.abort(handle)
        truth.finish_reason = "abort"
    if truth.end_ns is None:
        truth.end_ns = time.perf_counter_ns()


async def _generate(
    request: web.Request, state: SimState, chat: bool, responses: bool = False
) -> web.StreamResponse:
    """A generation request: completions, chat, or (`responses`) the Responses API, which is
    read as the chat request with the same prompt and answered in its own events."""
    arrival_ns = time.perf_counter_ns()
    data = await _read_json(
        request,
        state,
        unknown_responses_arguments if responses else lambda d: unknown_arguments(d, chat),
    )
    if isinstance(data, web.Response):
        return data
    try:
        req = _parse_generation(data, state, chat, responses)
    except RequestError as e:
        return _error(e, state)
    kind = "responses" if responses else "chat" if chat else "completions"
    request_id = request.headers.get("X-Request-Id") or (
        f"{'resp' if responses else 'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    )
    truth = _generation_truth(request_id, req, state, kind, arrival_ns)
    headers = {"X-Request-Id": request_id}
    refused = _refused(state, req, truth, headers)
    if refused is not None:
        return refused
    if truth.fault == "slow_headers":
        await asyncio.sleep(state.delay_s(F.SLOW_HEADERS_S))
    handle = _submit(state, truth, req.token_words)
    try:
        return await write_answer(request, state, req, handle, headers, responses)
    finally:
        _settle(state, handle)


async def _embed(request: web.Request, state: SimState) -> web.StreamResponse:
    """`/v1/embeddings`: the batch's tokens go through the engine as one prefill (one output
    token: the vector is ready when the prefill ends), then the answer is written whole."""
    arrival_ns = time.perf_counter_ns()
    r = state.resolved
    data = await _read_json(
        request, state, lambda d: sorted(k for k in d if k not in EMBEDDINGS_ARGUMENTS)
    )
    if isinstance(data, web.Response):
        return data
    try:
        req = parse_embeddings(data, state.model_name, r.max_model_len)
        _check_model(req.model, state)
        n = sum(req.input_tokens)
        if n + 1 > r.kv_capacity_tokens:
            raise RequestError(
                400,
                f"This batch has {n} tokens; the engine holds {r.kv_capacity_tokens}. Send "
                "fewer or shorter inputs.",
                "BadRequestError",
                "input",
            )
    except RequestError as e:
        return _error(e, state)
    request_id = request.headers.get("X-Request-Id") or f"embd-{uuid.uuid4().hex}"
    truth = RequestTruth(
        request_id,
        "embeddings",
        False,
        arrival_ns,
        prompt_tokens=n,
        max_tokens=1,
        target_tokens=1,
        finish_reason="stop",
    )
    headers = {"X-Request-Id": request_id}
    state.truth.add(truth)
    handle = _submit(state, truth, req.words)
    try:
        while handle.produced < 1 and not handle.finished:
            await handle.wait(handle.produced)
        resp = _json(200, embeddings_body(req), headers)
        await resp.prepare(request)
        await resp.write_eof()
        truth.first_token_ns = time.perf_counter_ns()
        return resp
    finally:
        _settle(state, handle)


async def _models(request: web.Request, state: SimState) -> web.StreamResponse:
    m = state.model_name
    if state.strict:  # OpenAI's model object: no vLLM fields
        card: dict[str, object] = {
            "id": m,
            "object": "model",
            "created": state.created,
            "owned_by": "harness-sim",
        }
        return _json(200, orjson.dumps({"object": "list", "data": [card]}))
    # Every name requests may carry, the served name first (a client that takes the first
    # one, as the probe and vllm bench serve do, gets it): as vLLM lists each name given to
    # --served-model-name, so a client configured with the Hugging Face id finds it listed.
    names = [m] + sorted(state.served_names - {m})
    cards: list[dict[str, object]] = [
        {
            "id": name,
            "object": "model",
            "created": state.created,
            "owned_by": "vllm",
            "root": state.resolved.model_preset.hf_id,
            "parent": None,
            "max_model_len": state.resolved.max_model_len,
            "permission": [],
        }
        for name in names
    ]
    return _json(200, orjson.dumps({"object": "list", "data": cards}))


async def _health(request: web.Request, state: SimState) -> web.StreamResponse:
    return web.Response(status=200)


async def _tokenize(request: web.Request, state: SimState) -> web.StreamResponse:
    """vLLM's /tokenize: the prompt's tokens as this simulator counts them (protocol.tokenize)."""
    try:
        return _json(
            200,
            orjson.dumps(
                tokenize(orjson.loads(await request.read()), state.resolved.max_model_len)
            ),
        )
    except orjson.JSONDecodeError:
        return _error(RequestError(400, "request body is not valid JSON", "BadRequestError"), state)
    except RequestError as e:
        return _error(e, state)


async def _metrics(request: web.Request, state: SimState) -> web.StreamResponse:
    return web.Response(
        body=render(state.metrics),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


async def _reset_prefix_cache(request: web.Request, state: SimState) -> web.StreamResponse:
    # vLLM's dev-mode route (VLLM_SERVER_DEV_MODE=1): {"success": false} while a running
    # request holds blocks
    return _json(200, orjson.dumps({"success": state.engine.scheduler.reset_prefix_cache()}))


async def _truth(request: web.Request, state: SimState) -> web.StreamResponse:
    e = state.engine
    doc = {
        **state.truth.to_dict(),
        "engine": {
            "steps": e.steps,
            "model_s": e.model_s,
            "lost_s": e.lost_s,
            "wake_late_p50_ms": e.wake_late_ms_at(0.5),
            "wake_late_p99_ms": e.wake_late_ms_at(0.99),
        },
    }
    return _json(200, orjson.dumps(doc))


async def _completions(request: web.Request, state: SimState) -> web.StreamResponse:
    return await _generate(request, state, chat=False)


async def _chat(request: web.Request, state: SimState) -> web.StreamResponse:
    return await _generate(request, state, chat=True)


async def _responses(request: web.Request, state: SimState) -> web.StreamResponse:
    return await _generate(request, state, chat=True, responses=True)


Route = Callable[[web.Request, SimState], Awaitable[web.StreamResponse]]
# (method, path under the root, handler): every server's; vLLM's own (not a gateway's);
# and those also served without the root (vLLM's own: /metrics)
_ROUTES: tuple[tuple[str, str, Route], ...] = (
    ("POST", "/v1/completions", _completions),
    ("POST", "/v1/chat/completions", _chat),
    ("POST", "/v1/responses", _responses),
    ("POST", "/v1/embeddings", _embed),
    ("GET", "/v1/models", _models),
    ("GET", "/sim/truth", _truth),
)
_VLLM_ROUTES: tuple[tuple[str, str, Route], ...] = (
    ("POST", "/tokenize", _tokenize),
    ("POST", "/reset_prefix_cache", _reset_prefix_cache),
)


def _bind(route: Route, state: SimState) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await route(request, state)

    return handler


def build_app(state: SimState) -> web.Application:
    root = state.resolved.settings.root_path
    app = web.Application(
        middlewares=[_auth_middleware(state, root + "/v1")], client_max_size=64 * 1024**2
    )
    routes = _ROUTES if state.strict else _ROUTES + _VLLM_ROUTES  # a gateway has none of vLLM's
    for method, path, route in routes:
        app.router.add_route(method, root + path, _bind(route, state))
    for base in {root, ""}:
        app.router.add_get(base + "/health", _bind(_health, state))
        if not state.strict:  # a gateway publishes no Prometheus metrics
            app.router.add_get(base + "/metrics", _bind(_metrics, state))
    return app


@dataclass(eq=False)
class SimServer:
    """A running simulator. `url` has no trailing slash and includes the root path's host part
    only (e.g. "http://127.0.0.1:PORT"); routes live under `url + settings.root_path`."""

    url: str
    host: str
    port: int
    state: SimState
    _runner: web.AppRunner

    @property
    def truth(self) -> TruthStore:
        return self.state.truth

    @property
    def engine(self) -> SimEngine:
        return self.state.engine

    @property
    def base_url(self) -> str:
        """Where the OpenAI routes live: url + root_path (+ "/v1" is the client's to add)."""
        return self.url + self.state.resolved.settings.root_path

    async def close(self) -> None:
        await self.state.engine.stop()
        with contextlib.suppress(Exception):
            await self._runner.cleanup()


async def start_sim_server(
    settings: SimSettings, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
) -> SimServer:
    """Start the simulator on `host:port` (0: an ephemeral port) in the running event loop.

    Raises ConfigError if the settings cannot be resolved (unknown GPU, model too large),
    OSError if the port cannot be bound.
    """
    resolved = settings.resolved()
    state = SimState(resolved, api_key)
    runner = web.AppRunner(build_app(state), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
    await site.start()
    bound = runner.addresses[0][1]
    state.engine.start()
    shown = f"[{host}]" if ":" in host else host
    return SimServer(
        url=f"http://{shown}:{bound}", host=host, port=bound, state=state, _runner=runner
    )
