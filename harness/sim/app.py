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
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import orjson
from aiohttp import web

from harness.sim import faults as F
from harness.sim.embeddings import EMBEDDINGS_ARGUMENTS, embeddings_body, parse_embeddings
from harness.sim.engine import RequestHandle, SimEngine, output_target
from harness.sim.metrics import SimMetrics, render
from harness.sim.protocol import (
    ChunkWriter,
    Layout,
    ParsedRequest,
    RequestError,
    block_hashes,
    error_body,
    full_response,
    parse_request,
    tokenize,
)
from harness.sim.ratelimit import RateLimiter
from harness.sim.responses import (
    ResponsesWriter,
    as_chat,
    full_responses_body,
    unknown_responses_arguments,
)
from harness.sim.settings import ResolvedSim, SimSettings
from harness.sim.strict import (
    StrictChunkWriter,
    as_strict,
    natural_length,
    openai_error_body,
    refusal,
    strict_full_response,
    unknown_arguments,
)
from harness.sim.truth import RequestTruth, TruthStore

JSON = "application/json"
SHUTDOWN_TIMEOUT_S = 1.0  # open streams are cut after this on close
PING = b": ping\n\n"  # an SSE comment: gateways send these to keep idle connections open
TOOL_DRAW_WORDS = 64  # the prompt's last words that, with its length, fix a tool-call draw
CHUNK_DRAWS = 4096  # chunk sizes are drawn this many at a time


class ChunkSizes:
    """Tokens per chunk, drawn (seeded) from the `chunk_tokens` distribution; 1 without one."""

    def __init__(
        self, dist: tuple[tuple[int, float], ...], seed: int, stream: int = 0xC40C
    ) -> None:
        self.values = np.array([k for k, _ in dist], dtype=np.int64)
        self.weights = np.array([w for _, w in dist], dtype=np.float64)
        self._rng = np.random.default_rng([seed, stream])
        self._drawn: list[int] = []

    def next(self) -> int:
        if not len(self.values):
            return 1
        if not self._drawn:
            self._drawn = self._rng.choice(self.values, CHUNK_DRAWS, p=self.weights).tolist()
            self._drawn.reverse()
        return self._drawn.pop()


class SimState:
    """Everything the handlers share: engine, truth, metrics, fault and EOS draws."""

    def __init__(self, resolved: ResolvedSim, api_key: str | None) -> None:
        s = resolved.settings
        self.resolved = resolved
        self.api_key = api_key
        self.model_name = s.served_model_name or resolved.model_preset.name
        # vLLM with --served-model-name answers to those names only, not to the model's
        self.served_names = (
            {s.served_model_name}
            if s.served_model_name
            else {self.model_name, resolved.model_preset.hf_id}
        )
        self.metrics = SimMetrics(
            self.model_name,
            {
                "block_size": str(s.block_size),
                "cache_dtype": "auto",
                "enable_prefix_caching": str(s.enable_prefix_caching),
                "gpu_memory_utilization": str(s.gpu_memory_utilization),
                "num_gpu_blocks": str(resolved.num_gpu_blocks),
                "num_cpu_blocks": "0",
            },
        )
        self.engine = SimEngine(resolved, self.metrics)
        self.truth = TruthStore()
        self.faults = F.FaultPicker(s.faults, s.seed)
        self.eos_rng = np.random.default_rng([s.seed, 0xE05])
        self.created = int(time.time())
        self.strict = s.api_style == "openai-strict"
        self.chunk_sizes = ChunkSizes(s.chunk_tokens, s.seed)
        # a reasoning model's thinking length per request (ChunkSizes draws any distribution;
        # without one, 0), and whether an "auto" tool choice calls
        self.reasoning = (
            ChunkSizes(s.reasoning_tokens, s.seed, 0x7EA5) if s.reasoning_tokens else None
        )
        self.keepalive_wall_s = None if s.keepalive_s is None else s.keepalive_s / s.speedup
        self.limiter = RateLimiter(s.rpm_limit, s.tpm_limit, s.rate_limit_burst_s, time.monotonic())

    def delay_s(self, model_s: float) -> float:
        return model_s / self.resolved.settings.speedup


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type=JSON, headers=headers)


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


async def _generate(
    request: web.Request, state: SimState, chat: bool, responses: bool = False
) -> web.StreamResponse:
    """A generation request: completions, chat, or (`responses`) the Responses API, which is
    read as the chat request with the same prompt and answered in its own events."""
    arrival_ns = time.perf_counter_ns()
    r = state.resolved
    try:
        data = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(RequestError(400, "request body is not valid JSON", "BadRequestError"), state)
    if state.strict and isinstance(data, dict):
        unknown = unknown_responses_arguments(data) if responses else unknown_arguments(data, chat)
        if unknown:
            return _error(refusal(unknown), state)
    try:
        if responses:
            data = as_chat(data)
        req = parse_request(data, chat, state.model_name, r.max_model_len)
        if req.model not in state.served_names:
            raise RequestError(
                404, f"The model `{req.model}` does not exist.", "NotFoundError", "model"
            )
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
    except RequestError as e:
        return _error(e, state)
    request_id = request.headers.get("X-Request-Id") or (
        f"{'resp' if responses else 'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    )
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
    truth = RequestTruth(
        request_id,
        "responses" if responses else "chat" if chat else "completions",
        req.stream,
        arrival_ns,
        prompt_tokens=req.prompt_tokens,
        max_tokens=req.max_tokens,
        target_tokens=target,
        finish_reason=reason,
        reasoning_tokens=reasoning,
        tool_call=tool,
    )
    headers = {"X-Request-Id": request_id}
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
    if truth.fault in ("http429", "http500"):
        status = 429 if truth.fault == "http429" else 500
        truth.status, truth.end_ns, truth.finish_reason = status, time.perf_counter_ns(), None
        if status == 429:
            headers["Retry-After"] = str(F.RETRY_AFTER_S)
            body = error_body(429, "Too many requests (simulated fault).", "RateLimitError")
        else:
            body = error_body(
                500, "Internal server error (simulated fault).", "InternalServerError"
            )
        return _json(status, body, headers)
    if truth.fault == "slow_headers":
        await asyncio.sleep(state.delay_s(F.SLOW_HEADERS_S))
    hashes: tuple[int, ...] = ()
    if r.settings.enable_prefix_caching:
        hashes = block_hashes(req.token_words, r.settings.block_size)
    handle = state.engine.submit(truth, hashes)
    try:
        if req.stream:
            return await _stream(request, state, req, handle, headers, responses)
        return await _whole(request, state, req, handle, headers, responses)
    finally:
        if not handle.finished:  # the client left, a fault cut it, or the server is closing
            state.engine.abort(handle)
            truth.finish_reason = "abort"
        if truth.end_ns is None:
            truth.end_ns = time.perf_counter_ns()


async def _embed(request: web.Request, state: SimState) -> web.StreamResponse:
    """`/v1/embeddings`: the batch's tokens go through the engine as one prefill (one output
    token: the vector is ready when the prefill ends), then the answer is written whole."""
    arrival_ns = time.perf_counter_ns()
    r = state.resolved
    try:
        data = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(RequestError(400, "request body is not valid JSON", "BadRequestError"), state)
    if state.strict and isinstance(data, dict):
        unknown = sorted(k for k in data if k not in EMBEDDINGS_ARGUMENTS)
        if unknown:
            return _error(refusal(unknown), state)
    try:
        req = parse_embeddings(data, state.model_name, r.max_model_len)
        if req.model not in state.served_names:
            raise RequestError(
                404, f"The model `{req.model}` does not exist.", "NotFoundError", "model"
            )
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
    hashes: tuple[int, ...] = ()
    if r.settings.enable_prefix_caching:
        hashes = block_hashes(req.words, r.settings.block_size)
    handle = state.engine.submit(truth, hashes)
    try:
        while handle.produced < 1 and not handle.finished:
            await handle.wait(handle.produced)
        resp = _json(200, embeddings_body(req), headers)
        await resp.prepare(request)
        await resp.write_eof()
        truth.first_token_ns = time.perf_counter_ns()
        return resp
    finally:
        if not handle.finished:
            state.engine.abort(handle)
            truth.finish_reason = "abort"
        if truth.end_ns is None:
            truth.end_ns = time.perf_counter_ns()


def channels_of(req: ParsedRequest, state: SimState) -> tuple[int, str | None]:
    """A chat request's reasoning length (drawn in reasoning mode) and the function its answer
    calls (None: it answers): with `tools`, tool_choice "required" calls the first, a named
    function that one, "auto" the first at `tool_call_share`, "none" never."""
    if not req.chat:
        return 0, None
    reasoning = state.reasoning.next() if state.reasoning is not None else 0
    tool: str | None = None
    if req.tools and req.tool_choice != "none":
        if req.tool_choice == "required":
            tool = req.tools[0]
        elif req.tool_choice != "auto":
            tool = req.tool_choice
        elif tool_draw(req, state.resolved.settings.seed) < state.resolved.settings.tool_call_share:
            tool = req.tools[0]
    return reasoning, tool


def tool_draw(req: ParsedRequest, seed: int) -> float:
    """A uniform draw in [0, 1) fixed by the request's prompt and the seed, not by arrival order:
    the same agent step gets the same decision in every run, so a seeded agent run takes the
    same path however its requests interleave."""
    tail = " ".join(req.token_words[-TOOL_DRAW_WORDS:]).encode()
    h = zlib.crc32(tail, zlib.crc32(f"{seed}|{req.prompt_tokens}".encode()))
    return h / 2**32


def reported_cached(state: SimState, truth: RequestTruth) -> int | None:
    """The usage's prompt_tokens_details.cached_tokens: the prompt tokens the engine found
    cached (vLLM's num_cached_tokens), where the settings report it (None: left out)."""
    if not state.resolved.settings.enable_prompt_tokens_details:
        return None
    return truth.cached_tokens or 0


def layout_of(truth: RequestTruth) -> Layout:
    return Layout(truth.reasoning_tokens, truth.tool_call, truth.target_tokens)


def _cut(request: web.Request, state: SimState, handle: RequestHandle) -> None:
    """The `disconnect` fault: abort the TCP connection mid-answer."""
    state.engine.abort(handle)
    handle.truth.end_ns = time.perf_counter_ns()
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _stream(
    request: web.Request,
    state: SimState,
    req: ParsedRequest,
    handle: RequestHandle,
    headers: dict[str, str],
    responses: bool = False,
) -> web.StreamResponse:
    truth = handle.truth
    resp = web.StreamResponse(
        status=200,
        headers={
            **headers,
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
        },
    )
    await resp.prepare(request)
    w: ChunkWriter | StrictChunkWriter | ResponsesWriter
    w = (ResponsesWriter if responses else StrictChunkWriter if state.strict else ChunkWriter)(
        req, truth.request_id, state.created, layout_of(truth)
    )
    target, fault = truth.target_tokens, truth.fault
    mid = F.midpoint(target)
    keepalive = state.keepalive_wall_s
    next_size = state.chunk_sizes.next
    k = next_size()
    sent = 0
    role_sent = not req.chat
    try:
        if keepalive is not None:
            await resp.write(PING)
        while sent < target:
            # Wait for the next whole chunk (k tokens; less at the end or at a fault's midpoint).
            need = min(sent + k, target, mid if (fault is not None and sent < mid) else target)
            while handle.produced < need and not handle.finished:
                if keepalive is None:
                    await handle.wait(handle.produced)
                else:
                    try:
                        await asyncio.wait_for(handle.wait(handle.produced), keepalive)
                    except TimeoutError:
                        await resp.write(PING)
            avail = min(handle.produced, target)
            if avail <= sent:
                break  # engine stopped (server closing)
            if fault is not None and sent < mid <= avail:
                avail = mid  # write up to the midpoint, then misbehave
            whole = avail == target or handle.finished or (fault is not None and avail == mid)
            parts = []
            if not role_sent:
                parts.append(w.role())
                role_sent = True
            before = sent
            while sent < avail:
                stop = min(sent + k, avail)
                if stop - sent < k and not whole:
                    break  # a partial chunk waits for its remaining tokens
                parts.append(w.chunk(sent, stop, truth.finish_reason if stop == target else None))
                sent = stop
                k = next_size()
            await resp.write(b"".join(parts))
            now = time.perf_counter_ns()
            if before == 0:
                truth.first_token_ns = now
            truth.token_ns.extend([now] * (sent - before))
            truth.completion_tokens = sent
            if fault is not None and sent == mid:
                if fault == "disconnect":
                    _cut(request, state, handle)
                    return resp
                if fault == "stall":
                    await asyncio.sleep(state.delay_s(F.STALL_S))
                elif fault == "malformed":
                    await resp.write(F.MALFORMED_EVENT)
        if req.include_usage:
            await resp.write(w.final_usage(sent, reported_cached(state, truth)))
        await resp.write(w.done())
        await resp.write_eof()
    except (ConnectionResetError, ConnectionError):
        truth.finish_reason = "abort"
    return resp


async def _whole(
    request: web.Request,
    state: SimState,
    req: ParsedRequest,
    handle: RequestHandle,
    headers: dict[str, str],
    responses: bool = False,
) -> web.StreamResponse:
    truth = handle.truth
    target, fault = truth.target_tokens, truth.fault
    wait_for = F.midpoint(target) if fault == "disconnect" else target
    while handle.produced < wait_for and not handle.finished:
        await handle.wait(handle.produced)
    if fault == "disconnect":
        _cut(request, state, handle)
        return web.Response(status=200)
    if fault == "stall":
        await asyncio.sleep(state.delay_s(F.STALL_S))
    done = min(handle.produced, target)
    truth.completion_tokens = done
    if fault == "malformed":
        body = b'{"id": "broken", "choices": ['
    else:
        body = (
            full_responses_body
            if responses
            else strict_full_response
            if state.strict
            else full_response
        )(
            req,
            truth.request_id,
            state.created,
            done,
            truth.finish_reason or "length",
            layout_of(truth),
            reported_cached(state, truth),
        )
    resp = _json(200, body, headers)
    await resp.prepare(request)
    await resp.write_eof()
    now = time.perf_counter_ns()
    truth.first_token_ns = now if done else None
    truth.token_ns.extend([now] * done)
    return resp


def build_app(state: SimState) -> web.Application:
    root = state.resolved.settings.root_path
    app = web.Application(
        middlewares=[_auth_middleware(state, root + "/v1")], client_max_size=64 * 1024**2
    )

    async def completions(request: web.Request) -> web.StreamResponse:
        return await _generate(request, state, chat=False)

    async def chat(request: web.Request) -> web.StreamResponse:
        return await _generate(request, state, chat=True)

    async def responses_route(request: web.Request) -> web.StreamResponse:
        return await _generate(request, state, chat=True, responses=True)

    async def embeddings_route(request: web.Request) -> web.StreamResponse:
        return await _embed(request, state)

    async def models(request: web.Request) -> web.StreamResponse:
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

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def tokenize_route(request: web.Request) -> web.StreamResponse:
        """vLLM's /tokenize: the prompt's tokens as this simulator counts them (protocol.tokenize)."""
        try:
            return _json(
                200,
                orjson.dumps(
                    tokenize(orjson.loads(await request.read()), state.resolved.max_model_len)
                ),
            )
        except orjson.JSONDecodeError:
            return _error(
                RequestError(400, "request body is not valid JSON", "BadRequestError"), state
            )
        except RequestError as e:
            return _error(e, state)

    async def metrics(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=render(state.metrics),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def reset_prefix_cache(request: web.Request) -> web.StreamResponse:
        # vLLM's dev-mode route (VLLM_SERVER_DEV_MODE=1): {"success": false} while a running
        # request holds blocks
        return _json(200, orjson.dumps({"success": state.engine.scheduler.reset_prefix_cache()}))

    async def truth(request: web.Request) -> web.StreamResponse:
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

    app.router.add_post(root + "/v1/completions", completions)
    app.router.add_post(root + "/v1/chat/completions", chat)
    app.router.add_post(root + "/v1/responses", responses_route)
    app.router.add_post(root + "/v1/embeddings", embeddings_route)
    app.router.add_get(root + "/v1/models", models)
    app.router.add_get(root + "/sim/truth", truth)
    if not state.strict:  # vLLM's own routes; a gateway has none
        app.router.add_post(root + "/tokenize", tokenize_route)
        app.router.add_post(root + "/reset_prefix_cache", reset_prefix_cache)
    for base in {root, ""}:
        app.router.add_get(base + "/health", health)
        if not state.strict:  # a gateway publishes no Prometheus metrics
            app.router.add_get(base + "/metrics", metrics)
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
