"""The network half of `check`: walk a target the way a careful user would, step by step.

Each step returns a `Step` (PASS, WARN, FAIL or SKIP) with the likely cause and the fix when
it did not pass: `GET /health` (local engines), `GET /v1/models` with the configured model in
the list, one streaming request in the run's request shape (vLLM's `ignore_eos` and
`continuous_usage_stats`, the scenario's extra_body: each argument the target refuses is named,
with what a run does without it, as `run` finds it), one non-streaming request (status, content, usage against what was sent and asked,
time against the read timeout) and one streaming request (TTFT, tokens, `[DONE]`). A failure to
connect stops the walk: every later step would fail the same way. Status codes and exceptions
map to causes in one place, `diagnose_status` and `diagnose_exception`. Every step is recorded
through `Checker.add`, which masks the target's secrets in what the server said and escapes
control characters (`Target.redactor()`): a server that echoes the key shows `sk-abc***`.

Whatever a server answers is a step's outcome, never a traceback: no redirect is followed (a
3xx is a FAIL saying where it pointed), no body is read past PROBE_BODY_LIMIT nor a stream past
its bound, every JSON field is checked for its type, and the usage counts are vetted as a run
vets them (`harness.record.usage`).
"""

from __future__ import annotations

import time
from dataclasses import replace

import aiohttp
import orjson

from harness.client.adapt import RequestShape, negotiate
from harness.client.check_endpoints import check_body
from harness.client.check_verdicts import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    Step,
    bad_stream,
    embeddings_verdict,
    stream_verdict,
    whole_verdict,
)
from harness.client.diagnose import diagnose_exception, diagnose_status
from harness.client.embeddings import embeddings_bytes_bound
from harness.client.endpoints import decoder_for
from harness.client.openai import ENDPOINT_PATHS, StreamError
from harness.client.probe import read_capped
from harness.client.sse import SSEError, SSESplitter
from harness.client.transport import (
    bound_detail,
    internal_detail,
)
from harness.config.target import Target
from harness.record.usage import stream_bytes_bound
from harness.workload.prompts import synthesize

CHECK_PROMPT_TOKENS = 64  # long enough to compare usage.prompt_tokens, cheap on a gateway
CHECK_MAX_TOKENS = 16  # when nothing configures max_tokens


class Checker:
    """Runs the network steps against one target; `steps` collects the outcome."""

    def __init__(
        self,
        target: Target,
        *,
        health_path: str | None,
        max_tokens: int | None,
        read_timeout_s: float,
        prompt_tokens: int = CHECK_PROMPT_TOKENS,
        shape: RequestShape | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
    ) -> None:
        self.t = target
        shape = shape if shape is not None else RequestShape(ignore_eos=True)
        if target.endpoint not in ("chat", "completions"):  # stream_options is theirs only
            shape = replace(
                shape,
                continuous_usage=False,
                ignore_eos=shape.ignore_eos and target.endpoint != "embeddings",
            )
        self.shape = shape
        self.sampling = (temperature, top_p)
        self.health_path = health_path
        self.max_tokens = max_tokens or CHECK_MAX_TOKENS
        self.read_timeout_s = read_timeout_s
        self.prompt_tokens = prompt_tokens
        self.model = target.model
        self.steps: list[Step] = []
        self.current = ""  # the step under way, for exceptions
        self.headers = target.request_headers({"Content-Type": "application/json"})
        self.redact = target.redactor()

    def add(self, step: Step) -> Step:
        """Record a step, its texts (which quote the server) as the harness keeps server text:
        the target's secrets masked, control characters escaped."""
        r = self.redact
        step = replace(
            step, name=r(step.name), detail=r(step.detail), cause=r(step.cause), fix=r(step.fix)
        )
        self.steps.append(step)
        return step

    def _exc_step(self, name: str, exc: BaseException, phase: str = "read") -> Step:
        detail, cause, fix = diagnose_exception(exc, self.t, self.read_timeout_s, phase)
        return self.add(Step(name, FAIL, detail, cause, fix))

    async def run(self) -> list[Step]:
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.t.timeouts.connect_s, sock_read=self.read_timeout_s
        )
        connector = aiohttp.TCPConnector(ssl=self.t.tls_verify)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as s:
            for step in (self.health, self.models, self.request_shape, self.whole, self.streamed):
                try:
                    await step(s)
                except (aiohttp.ClientConnectorError, aiohttp.ClientSSLError) as exc:
                    self._exc_step(self.current, exc, "connect")
                    self.add(Step("remaining steps", SKIP, "skipped: cannot connect"))
                    break
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    self._exc_step(self.current, exc)
                except Exception as exc:  # noqa: BLE001 - our bug: a FAIL line, not a traceback
                    self.add(Step(self.current, FAIL, internal_detail(exc), "a bug in the harness"))
        return self.steps

    async def health(self, s: aiohttp.ClientSession) -> None:
        """GET /health"""
        if not self.health_path:
            return
        name = self.current = f"GET {self.health_path}"
        t0 = time.perf_counter()
        async with s.get(self.t.base_url + self.health_path, allow_redirects=False) as r:
            body = await read_capped(r)
            ms = (time.perf_counter() - t0) * 1e3
            if r.status == 200:
                self.add(Step(name, PASS, f"200 in {ms:.0f} ms"))
            elif r.status == 503:
                self.add(
                    Step(
                        name,
                        FAIL,
                        "503",
                        "the server is up but not ready (still loading the model?)",
                        "wait for it to finish loading; its log says when",
                    )
                )
            else:
                cause, fix = diagnose_status(r.status, body, r.headers, self.t, self.health_path)
                self.add(Step(name, FAIL, f"HTTP {r.status}", cause, fix))

    async def models(self, s: aiohttp.ClientSession) -> None:
        """GET /v1/models"""
        name = self.current = "GET /v1/models"
        async with s.get(
            self.t.url("/v1/models"), headers=self.headers, allow_redirects=False
        ) as r:
            body = await read_capped(r)
            if r.status != 200:
                cause, fix = diagnose_status(r.status, body, r.headers, self.t, "/v1/models")
                self.add(Step(name, FAIL, f"HTTP {r.status}", cause, fix))
                return
        try:
            ids = [str(m["id"]) for m in orjson.loads(body).get("data") or []]
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
            self.add(
                Step(
                    name,
                    FAIL,
                    "200 but not an OpenAI model list",
                    "the base URL points at something that is not an OpenAI-compatible API",
                    "fix base_url",
                )
            )
            return
        shown = ", ".join(ids[:8]) + (f" (+{len(ids) - 8} more)" if len(ids) > 8 else "")
        if self.model is None:
            if not ids:
                self.add(
                    Step(
                        name, FAIL, "the server lists no model", "nothing is loaded", "give --model"
                    )
                )
                return
            self.model = ids[0]
            self.add(Step(name, PASS, f"no model configured; using the first listed: {ids[0]}"))
        elif self.model in ids:
            self.add(Step(name, PASS, f"model {self.model} is served"))
        else:
            self.add(
                Step(
                    name,
                    FAIL,
                    f"model {self.model!r} is not in the list: {shown or '(empty)'}",
                    "a typo in the model name, or the server serves it under another name",
                    "set the model to one listed (--model, defaults.model, [inference] model)",
                )
            )

    def _body(self, stream: bool) -> bytes:
        prompt = synthesize(self.prompt_tokens, seed=1)
        return check_body(self.t.endpoint, self.model or "", prompt, self.max_tokens, stream)

    async def request_shape(self, s: aiohttp.ClientSession) -> None:
        """one streaming request in the run's shape"""
        name = self.current = "run's request shape"
        path = ENDPOINT_PATHS[self.t.endpoint]
        temperature, top_p = self.sampling

        async def post(shape: RequestShape) -> tuple[int, bytes]:
            body = shape.body(
                endpoint=self.t.endpoint,
                model=self.model or "",
                prompt=synthesize(self.prompt_tokens, seed=1),
                max_tokens=self.max_tokens,
                temperature=temperature,
                top_p=top_p,
            )
            async with s.post(
                self.t.url(path), data=body, headers=self.headers, allow_redirects=False
            ) as r:
                location[0] = r.headers.get("Location")
                return r.status, await read_capped(r)

        sent = ", ".join(self.shape.droppable()) or "no extension"
        location: list[str | None] = [None]  # the last answer's Location (a redirect)
        n = await negotiate(post, self.shape, self.t.endpoint)
        for a in n.adaptations:
            does = (
                "leaves it out"
                if a.action == "dropped"
                else f"sends it {a.action.removeprefix('renamed ')}"
            )
            self.add(
                Step(
                    name,
                    WARN,
                    a.line(),
                    f"the target refuses {a.parameter}: {a.evidence}",
                    f"a run {does} and records that in its result (request_adaptations); "
                    "--strict-request stops instead; or change [workload] (ignore_eos, extra_body)",
                )
            )
        if n.error is not None:
            self.add(
                Step(
                    name,
                    FAIL,
                    n.error,
                    "the target refuses the run's request and its answer names "
                    "no argument that could be left out",
                    "compare the request with what the target "
                    "documents; the server says: " + n.error,
                )
            )
        elif n.status != 200:
            cause, fix = diagnose_status(n.status, n.body, {"Location": location[0]}, self.t, path)
            self.add(Step(name, FAIL, f"HTTP {n.status}", cause, fix))
        elif not n.adaptations:
            dec = decoder_for(self.t.endpoint)()
            try:
                if dec.whole_body:
                    dec.feed_body(n.body)
                    dec.end_body()
                else:
                    for ev in SSESplitter().feed(n.body):
                        dec.on_event(ev.data)
            except (StreamError, SSEError) as exc:
                self.add(bad_stream(name, exc))
                return
            usage = "per-chunk usage reported" if dec.usage_per_chunk else "no per-chunk usage"
            if self.t.endpoint not in ("chat", "completions"):
                usage = "usage at the end" if dec.prompt_tokens is not None else "no usage"
            self.add(Step(name, PASS, f"accepted ({sent}); {usage}"))

    async def whole(self, s: aiohttp.ClientSession) -> None:
        """one non-streaming request"""
        name = self.current = "non-streaming request"
        path = ENDPOINT_PATHS[self.t.endpoint]
        t0 = time.perf_counter()
        # an embeddings answer is read to the bound a run keeps for it (one input)
        limit = embeddings_bytes_bound(1) + 1 if self.t.endpoint == "embeddings" else None
        async with s.post(
            self.t.url(path), data=self._body(False), headers=self.headers, allow_redirects=False
        ) as r:
            body = await (read_capped(r) if limit is None else read_capped(r, limit))
            elapsed = time.perf_counter() - t0
            if r.status != 200:
                cause, fix = diagnose_status(r.status, body, r.headers, self.t, path)
                self.add(Step(name, FAIL, f"HTTP {r.status}", cause, fix))
                return
        if self.t.endpoint == "embeddings":
            self.add(embeddings_verdict(name, body, elapsed))
            return
        self.add(
            whole_verdict(
                name,
                body,
                self.t.endpoint,
                elapsed,
                self.prompt_tokens,
                self.max_tokens,
                self.read_timeout_s,
            )
        )

    async def streamed(self, s: aiohttp.ClientSession) -> None:
        """one streaming request"""
        name = self.current = "streaming request"
        if self.t.endpoint == "embeddings":
            self.add(Step(name, SKIP, "embeddings are not streamed"))
            return
        path = ENDPOINT_PATHS[self.t.endpoint]
        t0 = time.perf_counter()
        ttft: float | None = None
        chunks = tokens_seen = 0
        dec = decoder_for(self.t.endpoint)()
        splitter = SSESplitter()
        bound = stream_bytes_bound(self.max_tokens)
        received = 0
        async with s.post(
            self.t.url(path),
            data=self._body(True),
            headers={**self.headers, "Accept": "text/event-stream"},
            allow_redirects=False,
        ) as r:
            if r.status != 200:
                body = await read_capped(r)
                cause, fix = diagnose_status(r.status, body, r.headers, self.t, path)
                self.add(Step(name, FAIL, f"HTTP {r.status}", cause, fix))
                return
            try:
                while not dec.done:
                    data = await r.content.readany()
                    now = time.perf_counter()
                    if not data:
                        break
                    received += len(data)
                    for ev in splitter.feed(data):
                        n = dec.on_event(ev.data)
                        if n:
                            chunks += 1
                            tokens_seen += n
                            if ttft is None:
                                ttft = now - t0
                    if received > bound and not dec.done:
                        raise SSEError(bound_detail(bound))
            except (StreamError, SSEError) as exc:
                self.add(bad_stream(name, exc))
                return
        self.add(
            stream_verdict(
                name, dec, ttft, chunks, tokens_seen, received, self.max_tokens, self.t.endpoint
            )
        )


async def run_checks(
    target: Target,
    *,
    health_path: str | None,
    max_tokens: int | None,
    read_timeout_s: float,
    shape: RequestShape | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
) -> list[Step]:
    """All network steps against `target` (see module docstring); `shape`: the run's request
    shape (default: ignore_eos and per-chunk usage, as the shipped scenarios send)."""
    return await Checker(
        target,
        health_path=health_path,
        max_tokens=max_tokens,
        read_timeout_s=read_timeout_s,
        shape=shape,
        temperature=temperature,
        top_p=top_p,
    ).run()


__all__ = [
    "FAIL",
    "PASS",
    "SKIP",
    "WARN",
    "Checker",
    "Step",
    "diagnose_exception",
    "diagnose_status",
    "run_checks",
]
