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
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import orjson

from harness.client.adapt import RequestShape, negotiate
from harness.client.check_endpoints import check_body, embeddings_answer, responses_answer
from harness.client.diagnose import diagnose_exception, diagnose_status
from harness.client.embeddings import answer_bound_detail, embeddings_bytes_bound
from harness.client.endpoints import decoder_for
from harness.client.openai import ENDPOINT_PATHS, StreamError
from harness.client.probe import read_capped
from harness.client.sse import SSEError, SSESplitter
from harness.client.transport import (
    bound_detail,
    internal_detail,
)
from harness.config.target import Target
from harness.record.usage import count_problem, stream_bytes_bound, vet_counts
from harness.workload.prompts import synthesize

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
CHECK_PROMPT_TOKENS = 64  # long enough to compare usage.prompt_tokens, cheap on a gateway
CHECK_MAX_TOKENS = 16  # when nothing configures max_tokens
SLOW_SHARE = 0.5  # elapsed above this share of the read timeout: warn
CHAT_TEMPLATE_SLACK_TOKENS = 64  # chat templates add role markers and default system prompts


@dataclass
class Step:
    name: str
    status: str
    detail: str
    cause: str = ""
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def _completion(body: bytes, endpoint: str) -> tuple[str, dict[str, Any]] | str:
    """(content, usage) of a non-streaming answer, or what is wrong with its shape."""
    try:
        d = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "the body is not JSON"
    if not isinstance(d, dict):
        return "the body is not a JSON object"
    choices = d.get("choices")
    if choices is not None and not isinstance(choices, list):
        return "choices is not a list"
    c0 = choices[0] if choices else {}
    if not isinstance(c0, dict):
        return "choices[0] is not an object"
    if endpoint == "responses":
        return responses_answer(d)
    if endpoint == "completions":
        content = c0.get("text")
    else:
        message = c0.get("message")
        if message is not None and not isinstance(message, dict):
            return "choices[0].message is not an object"
        content = (message or {}).get("content")
    if content is not None and not isinstance(content, str):
        return "the answer's content is not a string"
    usage = d.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return "usage is not an object"
    return content or "", usage or {}


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
                self.add(_bad_stream(name, exc))
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
            self._embeddings(name, body, elapsed)
            return
        answer = _completion(body, self.t.endpoint)
        if isinstance(answer, str):
            self.add(
                Step(
                    name,
                    FAIL,
                    f"200 but {answer}",
                    "not an OpenAI-compatible server, or a gateway that rewrites answers",
                    "fix base_url",
                )
            )
            return
        content, usage = answer
        if not content:
            self.add(
                Step(
                    name,
                    FAIL,
                    "HTTP 200 but choices carry no content",
                    "the server answered with an empty completion",
                    "try another model or endpoint",
                )
            )
            return
        pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
        bad = [
            p
            for p in (count_problem("prompt_tokens", pt), count_problem("completion_tokens", ct))
            if p
        ]
        if pt is not None and ct is not None and bad:
            self.add(
                Step(
                    name,
                    FAIL,
                    f"HTTP 200, but usage is not counts: {'; '.join(bad)}",
                    "the server reports token counts that cannot be",
                    "a run leaves such counts out and counts tokens itself (usage_rejected)",
                )
            )
            return
        detail = f"HTTP 200 in {elapsed * 1e3:,.0f} ms, {len(content)} characters"
        problems = []
        if not isinstance(pt, int) or not isinstance(ct, int):
            problems.append(
                (
                    "usage is missing",
                    "the server reports no token usage; the harness will count one token per chunk",
                    "use a server that reports usage",
                )
            )
        else:
            detail += f", usage: {pt} prompt / {ct} completion tokens"
            lo, hi = self.prompt_tokens // 2, 2 * self.prompt_tokens + CHAT_TEMPLATE_SLACK_TOKENS
            if not lo <= pt <= hi:
                problems.append(
                    (
                        f"usage.prompt_tokens {pt} is far from the {self.prompt_tokens} sent",
                        "the server tokenizes or counts differently (or truncates prompts)",
                        "compare with the model's tokenizer; lengths in results will be off",
                    )
                )
            if ct > self.max_tokens:
                self.add(
                    Step(
                        name,
                        FAIL,
                        detail,
                        f"usage.completion_tokens {ct} > max_tokens "
                        f"{self.max_tokens}: the server ignores max_tokens",
                        "output lengths in a run will not follow the scenario",
                    )
                )
                return
        if elapsed > self.read_timeout_s * SLOW_SHARE:
            problems.append(
                (
                    f"took {elapsed:.1f}s, over half the read timeout ({self.read_timeout_s:g}s)",
                    "long prompts or a busy server will time out",
                    "raise [timeout] read in config.toml",
                )
            )
        if problems:
            what, cause, fix = problems[0]
            self.add(Step(name, WARN, f"{detail}; {what}", cause, fix))
        else:
            self.add(Step(name, PASS, detail))

    def _embeddings(self, name: str, body: bytes, elapsed: float) -> None:
        """The whole-request step of an embeddings target: one vector, and its usage."""
        bound = embeddings_bytes_bound(1)
        if len(body) > bound:
            why = "a run records such an answer as body_too_large"
            self.add(
                Step(name, FAIL, f"200 but {answer_bound_detail(bound)}", why, "fix the server")
            )
            return
        try:
            dec = embeddings_answer(body)
        except StreamError as exc:
            self.add(
                Step(
                    name,
                    FAIL,
                    f"200 but {exc.detail}",
                    "not an OpenAI-compatible embeddings answer",
                    "fix base_url, or serve an embedding model (vLLM: --runner pooling)",
                )
            )
            return
        detail = f"HTTP 200 in {elapsed * 1e3:,.0f} ms, {dec.n_embeddings} embedding(s)"
        if dec.n_embeddings != 1:
            self.add(Step(name, FAIL, detail, "one input was sent", "fix the server"))
        elif dec.prompt_tokens is None:
            self.add(
                Step(
                    name,
                    WARN,
                    detail + "; usage is missing",
                    "the server reports no prompt_tokens",
                    "a run's input tokens/s will read 0",
                )
            )
        else:
            self.add(Step(name, PASS, f"{detail}, usage: {dec.prompt_tokens} prompt tokens"))

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
                self.add(_bad_stream(name, exc))
                return
        claimed = dec.completion_tokens if dec.completion_tokens is not None else tokens_seen
        if ttft is None:
            self.add(
                Step(
                    name,
                    FAIL,
                    "the stream carried no token",
                    "the server sent no content",
                    "try the non-streaming endpoint or another model",
                )
            )
            return
        v = vet_counts(
            output_tokens=claimed,
            prompt_tokens=dec.prompt_tokens or 0,
            n_events=chunks,
            chunk_sum=tokens_seen,
            max_tokens=self.max_tokens,
            received_bytes=received,
            request_bytes=None,
            flags=dec.usage_flags,
        )
        detail = f"TTFT {ttft * 1e3:,.0f} ms, {v.output_tokens} tokens in {chunks} chunks"
        if v.flag:
            self.add(
                Step(
                    name,
                    FAIL,
                    f"{detail}; usage not believed: {v.flag}",
                    "the server reports token counts this request cannot have",
                    "a run leaves such counts out and counts one token per chunk "
                    "(tokens.usage_rejected in the result)",
                )
            )
            return
        if not dec.done:
            self.add(
                Step(
                    name,
                    FAIL,
                    detail
                    + (
                        ", no response.completed"
                        if self.t.endpoint == "responses"
                        else ", no data: [DONE]"
                    ),
                    "the stream ended early: the server or a proxy cut it",
                    "look at the server's log; proxies may buffer or cut SSE",
                )
            )
            return
        if v.output_tokens > self.max_tokens:
            self.add(
                Step(
                    name,
                    WARN,
                    detail,
                    f"{v.output_tokens} tokens > max_tokens {self.max_tokens}",
                    "a run counts such requests (tokens.past_max_tokens_requests)",
                )
            )
            return
        self.add(Step(name, PASS, detail))


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


def _bad_stream(name: str, exc: Exception) -> Step:
    """The FAIL step for a stream the decoder or the SSE splitter refused (both streaming steps)."""
    return Step(
        name,
        FAIL,
        "bad event in the stream",
        str(exc),
        "the server (or a proxy) sends events a run cannot read; look at its log",
    )
