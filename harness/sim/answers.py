"""Writing one generation's answer: an SSE stream chunk by chunk as the engine produces tokens,
or one whole JSON body when the last token is out; the faults (`disconnect`, `stall`,
`malformed`) strike at the answer's midpoint. Each write stamps the request's truth.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web

from harness.sim import faults as F
from harness.sim.answer_format import ChunkWriter
from harness.sim.engine import RequestHandle
from harness.sim.protocol import ParsedRequest
from harness.sim.responses import ResponsesWriter
from harness.sim.state import SimState, layout_of, reported_cached
from harness.sim.strict import StrictChunkWriter
from harness.sim.truth import RequestTruth

JSON = "application/json"
PING = b": ping\n\n"  # an SSE comment: gateways send these to keep idle connections open
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}

Writer = ChunkWriter | StrictChunkWriter | ResponsesWriter


def json_response(status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type=JSON, headers=headers)


def _cut(request: web.Request, state: SimState, handle: RequestHandle) -> None:
    """The `disconnect` fault: abort the TCP connection mid-answer."""
    state.engine.abort(handle)
    handle.truth.end_ns = time.perf_counter_ns()
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _await_tokens(
    handle: RequestHandle, need: int, resp: web.StreamResponse, keepalive: float | None
) -> None:
    """Until the engine has produced `need` tokens (or finished); a `: ping` every `keepalive`
    wall seconds of waiting where the settings ask for one."""
    while handle.produced < need and not handle.finished:
        if keepalive is None:
            await handle.wait(handle.produced)
        else:
            try:
                await asyncio.wait_for(handle.wait(handle.produced), keepalive)
            except TimeoutError:
                await resp.write(PING)


def _chunks(
    parts: list[bytes],
    w: Writer,
    truth: RequestTruth,
    span: tuple[int, int, bool],
    k: int,
    next_size: Callable[[], int],
) -> tuple[int, int]:
    """Append the chunks of tokens [sent, avail) to `parts`, k tokens each (k drawn anew after
    each); a partial last chunk only when `whole`. Returns (tokens now sent, the next k)."""
    sent, avail, whole = span
    target = truth.target_tokens
    while sent < avail:
        stop = min(sent + k, avail)
        if stop - sent < k and not whole:
            break  # a partial chunk waits for its remaining tokens
        parts.append(w.chunk(sent, stop, truth.finish_reason if stop == target else None))
        sent = stop
        k = next_size()
    return sent, k


async def _misbehave(
    request: web.Request,
    state: SimState,
    handle: RequestHandle,
    resp: web.StreamResponse,
    fault: str,
) -> bool:
    """The stream's fault at its midpoint; True where it cut the connection (the answer ends)."""
    if fault == "disconnect":
        _cut(request, state, handle)
        return True
    if fault == "stall":
        await asyncio.sleep(state.delay_s(F.STALL_S))
    elif fault == "malformed":
        await resp.write(F.MALFORMED_EVENT)
    return False


async def write_answer(
    request: web.Request,
    state: SimState,
    req: ParsedRequest,
    handle: RequestHandle,
    headers: dict[str, str],
    responses: bool = False,
) -> web.StreamResponse:
    """The answer to a generation request, streamed (SSE) or whole, in its route's shape:
    vLLM's, the strict gateway's (OpenAI's), or the Responses API's (`responses`)."""
    truth = handle.truth
    writer = ResponsesWriter if responses else StrictChunkWriter if state.strict else ChunkWriter
    w = writer(req, truth.request_id, state.created, layout_of(truth))
    if req.stream:
        return await _stream(request, state, req, handle, headers, w)
    return await _whole(request, state, handle, headers, w)


# _stream and _whole are alike in their signature by design: the two ways one answer is written,
# picked once by write_answer (issue 46: a shape pair left as it is).
async def _stream(
    request: web.Request,
    state: SimState,
    req: ParsedRequest,
    handle: RequestHandle,
    headers: dict[str, str],
    w: Writer,
) -> web.StreamResponse:
    truth = handle.truth
    resp = web.StreamResponse(status=200, headers={**headers, **SSE_HEADERS})
    await resp.prepare(request)
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
            await _await_tokens(handle, need, resp, keepalive)
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
            sent, k = _chunks(parts, w, truth, (sent, avail, whole), k, next_size)
            await resp.write(b"".join(parts))
            now = time.perf_counter_ns()
            if before == 0:
                truth.first_token_ns = now
            truth.token_ns.extend([now] * (sent - before))
            truth.completion_tokens = sent
            if (
                fault is not None
                and sent == mid
                and await _misbehave(request, state, handle, resp, fault)
            ):
                return resp
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
    handle: RequestHandle,
    headers: dict[str, str],
    w: Writer,
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
        body = w.whole(done, truth.finish_reason or "length", reported_cached(state, truth))
    resp = json_response(200, body, headers)
    await resp.prepare(request)
    await resp.write_eof()
    now = time.perf_counter_ns()
    truth.first_token_ns = now if done else None
    truth.token_ns.extend([now] * done)
    return resp
