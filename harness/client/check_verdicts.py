"""`check`'s verdicts on the answers it read: each a pure function from what a step saw (a body,
the stream's decoder and counts, the time it took) to its `Step` (PASS, WARN, FAIL or SKIP, with
the likely cause and the fix). The network half, which reads the answers and records each step
(its secrets masked), is harness.client.check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from harness.client.check_endpoints import embeddings_answer, responses_answer
from harness.client.embeddings import answer_bound_detail, embeddings_bytes_bound
from harness.client.openai import StreamDecoder, StreamError
from harness.record.usage import count_problem, vet_counts

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
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


def completion(body: bytes, endpoint: str) -> tuple[str, dict[str, Any]] | str:
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


def whole_verdict(
    name: str,
    body: bytes,
    endpoint: str,
    elapsed: float,
    prompt_tokens: int,
    max_tokens: int,
    read_timeout_s: float,
) -> Step:
    """The non-streaming step (a generation endpoint): the answer's shape, content and usage."""
    answer = completion(body, endpoint)
    if isinstance(answer, str):
        return Step(
            name,
            FAIL,
            f"200 but {answer}",
            "not an OpenAI-compatible server, or a gateway that rewrites answers",
            "fix base_url",
        )
    content, usage = answer
    if not content:
        return Step(
            name,
            FAIL,
            "HTTP 200 but choices carry no content",
            "the server answered with an empty completion",
            "try another model or endpoint",
        )
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    bad = [
        p for p in (count_problem("prompt_tokens", pt), count_problem("completion_tokens", ct)) if p
    ]
    if pt is not None and ct is not None and bad:
        return Step(
            name,
            FAIL,
            f"HTTP 200, but usage is not counts: {'; '.join(bad)}",
            "the server reports token counts that cannot be",
            "a run leaves such counts out and counts tokens itself (usage_rejected)",
        )
    detail = f"HTTP 200 in {elapsed * 1e3:,.0f} ms, {len(content)} characters"
    return _usage_verdict(name, detail, pt, ct, elapsed, prompt_tokens, max_tokens, read_timeout_s)


def _usage_verdict(
    name: str,
    detail: str,
    pt: object,
    ct: object,
    elapsed: float,
    prompt_tokens: int,
    max_tokens: int,
    read_timeout_s: float,
) -> Step:
    """`whole_verdict` once the answer has content: its usage against what was sent and asked,
    and its time against the read timeout."""
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
        lo, hi = prompt_tokens // 2, 2 * prompt_tokens + CHAT_TEMPLATE_SLACK_TOKENS
        if not lo <= pt <= hi:
            problems.append(
                (
                    f"usage.prompt_tokens {pt} is far from the {prompt_tokens} sent",
                    "the server tokenizes or counts differently (or truncates prompts)",
                    "compare with the model's tokenizer; lengths in results will be off",
                )
            )
        if ct > max_tokens:
            return Step(
                name,
                FAIL,
                detail,
                f"usage.completion_tokens {ct} > max_tokens "
                f"{max_tokens}: the server ignores max_tokens",
                "output lengths in a run will not follow the scenario",
            )
    if elapsed > read_timeout_s * SLOW_SHARE:
        problems.append(
            (
                f"took {elapsed:.1f}s, over half the read timeout ({read_timeout_s:g}s)",
                "long prompts or a busy server will time out",
                "raise [timeout] read in config.toml",
            )
        )
    if problems:
        what, cause, fix = problems[0]
        return Step(name, WARN, f"{detail}; {what}", cause, fix)
    return Step(name, PASS, detail)


def embeddings_verdict(name: str, body: bytes, elapsed: float) -> Step:
    """The whole-request step of an embeddings target: one vector, and its usage."""
    bound = embeddings_bytes_bound(1)
    if len(body) > bound:
        why = "a run records such an answer as body_too_large"
        return Step(name, FAIL, f"200 but {answer_bound_detail(bound)}", why, "fix the server")
    try:
        dec = embeddings_answer(body)
    except StreamError as exc:
        return Step(
            name,
            FAIL,
            f"200 but {exc.detail}",
            "not an OpenAI-compatible embeddings answer",
            "fix base_url, or serve an embedding model (vLLM: --runner pooling)",
        )
    detail = f"HTTP 200 in {elapsed * 1e3:,.0f} ms, {dec.n_embeddings} embedding(s)"
    if dec.n_embeddings != 1:
        return Step(name, FAIL, detail, "one input was sent", "fix the server")
    if dec.prompt_tokens is None:
        return Step(
            name,
            WARN,
            detail + "; usage is missing",
            "the server reports no prompt_tokens",
            "a run's input tokens/s will read 0",
        )
    return Step(name, PASS, f"{detail}, usage: {dec.prompt_tokens} prompt tokens")


def stream_verdict(
    name: str,
    dec: StreamDecoder,
    ttft: float | None,
    chunks: int,
    tokens_seen: int,
    received: int,
    max_tokens: int,
    endpoint: str,
) -> Step:
    """The streaming step, once its stream was read: a token came, the counts are believed (as
    a run vets them), the stream ended at its terminal event, within max_tokens."""
    claimed = dec.completion_tokens if dec.completion_tokens is not None else tokens_seen
    if ttft is None:
        return Step(
            name,
            FAIL,
            "the stream carried no token",
            "the server sent no content",
            "try the non-streaming endpoint or another model",
        )
    v = vet_counts(
        output_tokens=claimed,
        prompt_tokens=dec.prompt_tokens or 0,
        n_events=chunks,
        chunk_sum=tokens_seen,
        max_tokens=max_tokens,
        received_bytes=received,
        request_bytes=None,
        flags=dec.usage_flags,
    )
    detail = f"TTFT {ttft * 1e3:,.0f} ms, {v.output_tokens} tokens in {chunks} chunks"
    if v.flag:
        return Step(
            name,
            FAIL,
            f"{detail}; usage not believed: {v.flag}",
            "the server reports token counts this request cannot have",
            "a run leaves such counts out and counts one token per chunk "
            "(tokens.usage_rejected in the result)",
        )
    if not dec.done:
        end = ", no response.completed" if endpoint == "responses" else ", no data: [DONE]"
        return Step(
            name,
            FAIL,
            detail + end,
            "the stream ended early: the server or a proxy cut it",
            "look at the server's log; proxies may buffer or cut SSE",
        )
    if v.output_tokens > max_tokens:
        return Step(
            name,
            WARN,
            detail,
            f"{v.output_tokens} tokens > max_tokens {max_tokens}",
            "a run counts such requests (tokens.past_max_tokens_requests)",
        )
    return Step(name, PASS, detail)


def bad_stream(name: str, exc: Exception) -> Step:
    """The FAIL step for a stream the decoder or the SSE splitter refused (both streaming steps)."""
    return Step(
        name,
        FAIL,
        "bad event in the stream",
        str(exc),
        "the server (or a proxy) sends events a run cannot read; look at its log",
    )
