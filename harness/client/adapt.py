"""Which request arguments a target refuses, and what a run does without them.

The harness's requests carry vLLM's extensions where they make the measurement exact:
`ignore_eos` (every answer has exactly the planned length) and
`stream_options.continuous_usage_stats` (every chunk says how many tokens it carries), plus
whatever a scenario's `[workload] extra_body` adds (`min_tokens`, `top_k`, llama.cpp's
`cache_prompt`, ...). OpenAI's API, and gateways that validate as it does, refuse any argument
they do not know with a 400: `Unrecognized request argument supplied: ignore_eos`.

Before a run, the probe sends the run's real request shape (`RequestShape`). When the target
refuses part of it, `negotiate` finds which argument (`refused_arguments`: OpenAI's message,
`Unsupported parameter: 'x'`, a pydantic `extra_forbidden` detail, or failing those the name
anywhere in the answer; when the answer names nothing, by leaving out one argument at a time)
and drops it, or renames `max_tokens` to `max_completion_tokens` for models that refuse the
older name. Each change is an `Adaptation`: the run prints its line, records it in the result
(`request_adaptations`), and `--strict-request` refuses to run instead. The accuracy each
fallback costs is in docs/targets.md.

Sans-I/O apart from the `post` callable `negotiate` is given.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from harness.client.embeddings import build_embeddings_body
from harness.client.endpoints import build_generation_body
from harness.client.openai import error_message

IGNORE_EOS = "ignore_eos"
CONTINUOUS_USAGE = "stream_options.continuous_usage_stats"
MAX_TOKENS = "max_tokens"
MAX_COMPLETION_TOKENS = "max_completion_tokens"
# What the run measures differently without each argument: the one line printed and recorded.
CONSEQUENCES = {
    IGNORE_EOS: "output lengths now follow the model's EOS; planned vs actual lengths are reported",
    CONTINUOUS_USAGE: "chunks no longer say how many tokens they carry; where a chunk carries "
    "several, ITL is per chunk, and throughput and TPOT count the final usage",
    "min_tokens": "answers may end before min_tokens; planned vs actual lengths are reported",
    "top_k": "the target samples with its own top_k",
    "repetition_penalty": "the target samples without a repetition penalty",
    "cache_prompt": "the target may reuse cached prompts, so prefill times may be shorter",
}
OTHER_CONSEQUENCE = "the target runs without this [workload] extra_body argument"
MAX_TOKENS_CONSEQUENCE = (
    "sent as max_completion_tokens, the name newer OpenAI models take; lengths are unchanged"
)
MAX_NEGOTIATION_ROUNDS = 8  # each round removes at least one argument
EVIDENCE_CHARS = 200  # the server's message kept as evidence
REFUSAL_STATUSES = (400, 422)  # what an unknown argument gets (422: FastAPI/pydantic servers)

_UNRECOGNIZED = re.compile(r"Unrecognized request arguments? supplied:\s*([^\n\"]+)", re.I)
_UNSUPPORTED = re.compile(r"Unsupported parameter:\s*'([^']+)'", re.I)


@dataclass(frozen=True)
class RequestShape:
    """What a run's requests carry besides the prompt and its length."""

    ignore_eos: bool
    continuous_usage: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)
    max_tokens_key: str = MAX_TOKENS

    def droppable(self) -> list[str]:
        """The arguments a run can do without, cheapest to lose first."""
        out = [CONTINUOUS_USAGE] if self.continuous_usage else []
        out += [str(k) for k in self.extra]
        return out + ([IGNORE_EOS] if self.ignore_eos else [])

    def without(self, name: str) -> RequestShape:
        if name == CONTINUOUS_USAGE:
            return replace(self, continuous_usage=False)
        if name == IGNORE_EOS:
            return replace(self, ignore_eos=False)
        if name == MAX_TOKENS:
            return replace(self, max_tokens_key=MAX_COMPLETION_TOKENS)
        return replace(self, extra={k: v for k, v in self.extra.items() if k != name})

    def body(
        self,
        *,
        endpoint: str,
        model: str,
        prompt: str,
        max_tokens: int,
        temperature: float | None,
        top_p: float | None,
    ) -> bytes:
        if endpoint == "embeddings":
            return build_embeddings_body(model=model, inputs=[prompt], extra=dict(self.extra))
        return build_generation_body(
            endpoint=endpoint,
            model=model,
            prompt=prompt,
            system_prompt="",
            max_tokens=max_tokens,
            ignore_eos=self.ignore_eos,
            continuous_usage=self.continuous_usage,
            temperature=temperature,
            top_p=top_p,
            extra=dict(self.extra),
            max_tokens_key=self.max_tokens_key,
        )


@dataclass(frozen=True)
class Adaptation:
    """One argument the target refused, and what the run does instead."""

    parameter: str
    action: str  # "dropped" or "renamed to max_completion_tokens"
    consequence: str
    evidence: str  # the server's words (capped), or how the refusal was found

    def line(self) -> str:
        """The one line printed before the run."""
        return f"{self.parameter} refused by the target: {self.consequence}"

    def to_dict(self) -> dict[str, str]:
        return {
            "parameter": self.parameter,
            "action": self.action,
            "consequence": self.consequence,
            "evidence": self.evidence,
        }


def _pydantic_extras(obj: Any) -> list[str]:
    """Names in a FastAPI/pydantic 422 `detail`: [{"type": "extra_forbidden", "loc": [...]}]."""
    detail = obj.get("detail") if isinstance(obj, dict) else None
    out = []
    for d in detail if isinstance(detail, list) else []:
        if (
            isinstance(d, dict)
            and d.get("type") == "extra_forbidden"
            and isinstance(d.get("loc"), list)
        ):
            loc = [str(x) for x in d["loc"] if x != "body"]
            if loc:
                out.append(".".join(loc))
    return out


def refused_arguments(raw: bytes, shape: RequestShape) -> list[str]:
    """The arguments of `shape` a refusal body names: droppable ones, or `max_tokens`.

    Read in order: OpenAI's `Unrecognized request argument(s) supplied: a, b`, `Unsupported
    parameter: 'a'`, the error's `param`, pydantic's `extra_forbidden` locations; failing all,
    any droppable name (or the last part of a dotted one) standing as a word in the body."""
    text = raw[: 64 * 1024].decode("utf-8", "replace")
    named: list[str] = []
    m = _UNRECOGNIZED.search(text)
    if m:
        named += [n.strip().strip("'`.") for n in m.group(1).split(",")]
    named += _UNSUPPORTED.findall(text)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and isinstance(err.get("param"), str):
        named.append(err["param"])
    named += _pydantic_extras(obj)
    cands = shape.droppable() + ([MAX_TOKENS] if shape.max_tokens_key == MAX_TOKENS else [])
    short = {c.rpartition(".")[2]: c for c in cands}
    found = [c for n in named for c in (short.get(n.rpartition(".")[2]),) if c is not None]
    if not found:
        found = [
            c
            for c in shape.droppable()
            if re.search(rf"(?<![\w.]){re.escape(c.rpartition('.')[2])}(?!\w)", text)
        ]
    return list(dict.fromkeys(found))


def adaptation(name: str, evidence: str) -> Adaptation:
    if name == MAX_TOKENS:
        return Adaptation(
            name,
            f"renamed to {MAX_COMPLETION_TOKENS}",
            MAX_TOKENS_CONSEQUENCE,
            evidence[:EVIDENCE_CHARS],
        )
    return Adaptation(
        name, "dropped", CONSEQUENCES.get(name, OTHER_CONSEQUENCE), evidence[:EVIDENCE_CHARS]
    )


Post = Callable[[RequestShape], Awaitable[tuple[int, bytes]]]


@dataclass(frozen=True)
class Negotiated:
    """The shape a target accepted (status 200 and its body), or why none was found."""

    shape: RequestShape
    adaptations: tuple[Adaptation, ...]
    status: int
    body: bytes
    error: str | None = None


async def negotiate(post: Post, shape: RequestShape, endpoint: str) -> Negotiated:
    """Send `shape`; while the target refuses arguments of it, leave them out and send again.

    `post(shape)` sends one request and returns (status, body). Stops at the first answer that
    is not a refusal (200 or another status, returned as is) or when a refusal cannot be
    pinned on an argument (`error` says so, with the server's message)."""
    adaptations: list[Adaptation] = []
    status, raw = await post(shape)
    for _ in range(MAX_NEGOTIATION_ROUNDS):
        if status not in REFUSAL_STATUSES:
            break
        message = error_message(raw)
        if endpoint != "chat":  # max_completion_tokens is a chat argument only
            named = [n for n in refused_arguments(raw, shape) if n != MAX_TOKENS]
        else:
            named = refused_arguments(raw, shape)
        if named:
            for n in named:
                shape = shape.without(n)
                adaptations.append(adaptation(n, f"HTTP {status}: {message}"))
            status, raw = await post(shape)
            continue
        # The refusal names nothing we sent: leave out one argument at a time.
        for c in shape.droppable():
            st, body = await post(shape.without(c))
            if st not in REFUSAL_STATUSES:
                adaptations.append(
                    adaptation(
                        c,
                        f"HTTP {status}: {message} (the answer "
                        f"names no argument; the request passed without {c})",
                    )
                )
                return Negotiated(shape.without(c), tuple(adaptations), st, body)
        return Negotiated(shape, tuple(adaptations), status, raw, f"HTTP {status}: {message}")
    return Negotiated(shape, tuple(adaptations), status, raw)
