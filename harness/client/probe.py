"""The pre-run probe: before a run (not measured), find the model if none was given and send
one tiny streaming request in the run's real shape, so a target that refuses part of the
request, or is not there, is known before any measured request is sent. What the server said
(its errors, its model id, its refusals' wording) comes back with the target's secrets masked
and control characters escaped (`Target.redactor()`): the run prints it and records it.

It follows no redirect (as the run's transports: `transport.status_detail`), reads at most
PROBE_BODY_LIMIT bytes of any answer, and takes whatever a server sends -- a model list or a
stream of another shape -- as an error to report, never a traceback."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import aiohttp
import orjson

from harness.client.adapt import Adaptation, Negotiated, RequestShape, negotiate
from harness.client.diagnose import diagnose_exception
from harness.client.endpoints import decoder_for
from harness.client.framing import read_answer
from harness.client.openai import ENDPOINT_PATHS, StreamError
from harness.client.sse import SSEError, SSESplitter
from harness.client.transport import classify_exception, status_detail
from harness.config.target import Target
from harness.record.records import ErrorKind
from harness.redact import Redactor
from harness.workload.scenario import Workload


@dataclass(frozen=True)
class ProbeResult:
    model: str | None
    continuous_usage: bool
    per_chunk_usage: bool
    error: str | None = None
    status: int | None = None
    shape: RequestShape | None = None  # the request shape the target accepted
    adaptations: tuple[Adaptation, ...] = ()  # what had to change for it to accept it
    fix: str | None = None  # with an error: what to do about it (as `check` says it)


PROBE_ATTEMPTS = 3  # a 429, 5xx, cut stream or refused connection is tried again ...
PROBE_BACKOFF_S = 1.0  # ... after this long (doubling), before the run is refused
_PROBE_TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)
PROBE_BODY_LIMIT = 1024 * 1024  # bytes of an answer read (a 2-token answer is well under 4 KiB)


async def read_capped(resp: aiohttp.ClientResponse, limit: int = PROBE_BODY_LIMIT) -> bytes:
    """The body of `resp`, at most `limit` bytes (an endless answer is cut there), read as a
    run reads it (`harness.client.framing.read_answer`: a stream ends at its terminal event)."""
    return await read_answer(resp, limit)


def model_ids(raw: bytes) -> list[str] | None:
    """The model ids of a /v1/models answer; None when it is not an OpenAI model list."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    models = data.get("data") if isinstance(data, dict) else None
    if models is None:
        return []
    if not isinstance(models, list):
        return None
    ids = [m.get("id") for m in models if isinstance(m, dict)]
    if any(not isinstance(i, str | int) for i in ids) or len(ids) != len(models):
        return None
    return [str(i) for i in ids]


async def probe_target(target: Target, workload: Workload, timeout_s: float = 60.0) -> ProbeResult:
    """`_probe_once`, tried again on transient failures (rate limits, 5xx, cut streams, a server
    still starting), so one unlucky answer does not refuse a whole run."""
    delay = PROBE_BACKOFF_S
    redact = target.redactor()
    for attempt in range(PROBE_ATTEMPTS):
        result = _redacted(await _probe_once(target, workload, timeout_s), redact)
        transient = result.status in _PROBE_TRANSIENT_STATUS or (
            result.error is not None and result.status is None
        )
        if result.error is None or not transient or attempt == PROBE_ATTEMPTS - 1:
            return result
        await asyncio.sleep(delay)
        delay *= 2
    return result


def _redacted(result: ProbeResult, redact: Redactor) -> ProbeResult:
    """The probe's result with what the server said in the form the harness keeps: the target's
    secrets masked, control characters escaped."""
    return replace(
        result,
        model=redact.optional(result.model),
        error=redact.optional(result.error),
        fix=redact.optional(result.fix),
        adaptations=tuple(replace(a, evidence=redact(a.evidence)) for a in result.adaptations),
    )


PROBE_PROMPT = "Say hello."
PROBE_MAX_TOKENS = 2


async def _probe_once(target: Target, workload: Workload, timeout_s: float) -> ProbeResult:
    """Before the run (not measured): find the model if none was given, and send one tiny
    streaming request in the run's real shape (`harness.client.adapt.RequestShape`: its
    `ignore_eos`, per-chunk usage, sampling and extra_body). Arguments the target refuses are
    left out one by one (`negotiate`); the result says which, and the shape that was accepted."""
    headers = target.request_headers({"Content-Type": "application/json"})
    timeout = aiohttp.ClientTimeout(total=timeout_s, connect=target.timeouts.connect_s)
    connector = aiohttp.TCPConnector(ssl=target.tls_verify)
    model = target.model
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        try:
            if model is None:
                found = await _first_model(session, target, headers)
                if isinstance(found, ProbeResult):
                    return found
                model = found
            url = target.url(ENDPOINT_PATHS[target.endpoint])
            location: list[str | None] = [None]  # the last answer's Location (a redirect)

            async def post(shape: RequestShape) -> tuple[int, bytes]:
                body = shape.body(
                    endpoint=target.endpoint,
                    model=model or "",
                    prompt=PROBE_PROMPT,
                    max_tokens=PROBE_MAX_TOKENS,
                    temperature=workload.temperature,
                    top_p=workload.top_p,
                )
                async with session.post(
                    url, data=body, headers=headers, allow_redirects=False
                ) as resp:
                    location[0] = resp.headers.get("Location")
                    return resp.status, await read_capped(resp)

            chunks = target.endpoint in ("chat", "completions")  # stream_options: theirs only
            shape = RequestShape(
                workload.ignore_eos and target.endpoint != "embeddings",
                chunks,
                dict(workload.extra_body),
            )
            n = await negotiate(post, shape, target.endpoint)
            if n.status == 200 and n.error is None:
                return _accepted(target, model, n)
            return ProbeResult(
                model,
                False,
                False,
                n.error or status_detail(n.status, n.body, location[0]),
                n.status,
                n.shape,
                n.adaptations,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # The cause and the fix in `check`'s words.
            what, cause, fix = diagnose_exception(exc, target, timeout_s, "read")
            if isinstance(exc, TimeoutError):
                kind, detail = ErrorKind.TIMEOUT_TOTAL, f"no answer within {timeout_s:g}s"
                return ProbeResult(model, False, False, f"{kind.value}: {detail}", fix=fix)
            return ProbeResult(model, False, False, f"{what}: {cause}", fix=fix)


async def _first_model(
    session: aiohttp.ClientSession, target: Target, headers: dict[str, str]
) -> str | ProbeResult:
    """The first model the target's /v1/models lists, or the ProbeResult that says why none."""
    async with session.get(
        target.url("/v1/models"), headers=headers, allow_redirects=False
    ) as resp:
        raw = await read_capped(resp)
        if resp.status != 200:
            detail = status_detail(resp.status, raw, resp.headers.get("Location"))
            return ProbeResult(None, False, False, f"GET /v1/models: {detail}", resp.status)
    ids = model_ids(raw)
    if ids is None:
        return ProbeResult(
            None,
            False,
            False,
            "GET /v1/models: the answer is not an OpenAI model list; give --model",
            200,
        )
    if not ids:
        return ProbeResult(None, False, False, "GET /v1/models lists no model; give --model", 200)
    return ids[0]


def _accepted(target: Target, model: str, n: Negotiated) -> ProbeResult:
    """The target accepted a shape (200): its answer read as the run would read it (a stream
    the run could not read is the probe's error)."""
    dec = decoder_for(target.endpoint)()
    try:
        if dec.whole_body:  # embeddings: one JSON answer
            dec.feed_body(n.body)
            dec.end_body()
        else:
            for ev in SSESplitter().feed(n.body):
                dec.on_event(ev.data)
    except (StreamError, SSEError) as exc:  # a stream the run could not read
        kind, detail = classify_exception(exc)
        return ProbeResult(model, False, False, f"{kind.value}: {detail}")
    return ProbeResult(
        model,
        n.shape.continuous_usage,
        dec.usage_per_chunk,
        shape=n.shape,
        adaptations=n.adaptations,
    )


__all__ = ["ProbeResult", "probe_target"]
