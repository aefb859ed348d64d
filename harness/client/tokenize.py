"""Exact prompt lengths without shipping a tokenizer: ask the target's own /tokenize, once per run.

Theory of operation
-------------------
Synthetic prompts are words (`harness.workload.prompts.WORDS`) chosen to be one token each
after a space in common vocabularies; a server's tokenizer may still split some, and it adds its
chat template (or a BOS) around the text. Where the target offers vLLM's `POST /tokenize`
(`{"prompt": ...}` or `{"messages": [...]}` -> `{"count": n, ...}`), before the run:

1. Which words are one token after a space: "the w1 w2 ..." counted, less "the" alone, equals
   the number of words when every one is a single token; groups that do not are halved until
   the odd words are found (a handful of requests where almost every word is one token).
2. Which of the first FIRST_WORD_CANDIDATES of those are one token at the start of a text (the
   first word of a prompt has no space before it).
3. The template: a request shaped as the run sends it (its system prompt, one user message of
   TEMPLATE_PROBE_WORDS words; completions: the text with the server's special tokens) counted,
   less the words.
4. A check: requests of VERIFY_WORDS words each must count exactly words + template; otherwise
   the tokenizer merges across words and the run keeps the estimate, saying why.

The plan then makes every synthetic prompt from those words, its own text shorter by the
template, so the server counts exactly the planned prompt tokens (`workload.plan.with_vocabulary`).
Datasets keep their text (their lengths stay word counts or a tokenizer file's), and a
multi-turn session's later turns add the template's tokens per earlier message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from harness.client.openai import error_message
from harness.config.target import Target
from harness.workload.plan import Plan
from harness.workload.prompts import WORDS, PromptMaker, ServerVocabulary, prefix_seed

TOKENIZE_PATH = "/tokenize"  # vLLM serves it beside /v1, not under it
ANCHOR = "the"  # the text the grouped words follow ("the w1 w2 ...")
FIRST_WORD_CANDIDATES = 32  # words tried as a prompt's first word (enough to draw from)
TEMPLATE_PROBE_WORDS = 64
VERIFY_WORDS = (1, 17, 300)  # prompt lengths checked before the run trusts the counts
CONCURRENCY = 16  # /tokenize requests in flight at once
TIMEOUT_S = 30.0
NOT_OFFERED = (404, 405, 501)  # statuses that mean: no /tokenize here


class TokenizeUnavailable(Exception):
    """The target has no usable /tokenize; the message says why (one line)."""


@dataclass
class _Counter:
    session: aiohttp.ClientSession
    url: str
    headers: dict[str, str]
    model: str
    sem: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(CONCURRENCY))
    requests: int = 0

    async def count(self, **body: Any) -> int:
        """Tokens the server counts for this /tokenize body. Raises TokenizeUnavailable."""
        async with self.sem:
            self.requests += 1
            try:
                body = {"model": self.model, **body} if self.model else body
                async with self.session.post(
                    self.url, data=orjson.dumps(body), headers=self.headers
                ) as resp:
                    raw = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise TokenizeUnavailable(
                    f"POST {TOKENIZE_PATH} failed: {type(exc).__name__}: {exc}"[:300]
                ) from None
        if status in NOT_OFFERED:
            raise TokenizeUnavailable(
                f"the target has no {TOKENIZE_PATH} (HTTP {status}: {error_message(raw)})"
            )
        if status != 200:
            raise TokenizeUnavailable(f"POST {TOKENIZE_PATH}: HTTP {status}: {error_message(raw)}")
        try:
            n = orjson.loads(raw)["count"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise TokenizeUnavailable(
                f"POST {TOKENIZE_PATH}: no `count` in the answer: {raw[:120]!r}"
            ) from None
        if not isinstance(n, int) or isinstance(n, bool):
            raise TokenizeUnavailable(f"POST {TOKENIZE_PATH}: `count` is not an integer: {n!r}")
        return n


def _request_body(endpoint: str, system: str, text: str) -> dict[str, Any]:
    """A /tokenize body shaped as the run's requests: chat messages with the generation prompt,
    or the completion text with the server's special tokens (as the server counts a request)."""
    if endpoint in ("chat", "responses"):  # a Responses request is templated as a chat
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": text}
        ]
        return {"messages": messages, "add_generation_prompt": True}
    return {"prompt": f"{system} {text}" if system else text, "add_special_tokens": True}


async def _single_words(c: _Counter, words: list[str], anchor: int) -> list[str]:
    """The words that are one token each after a space, found by halving the groups that are not."""
    n = await c.count(prompt=" ".join([ANCHOR, *words]), add_special_tokens=False) - anchor
    if n == len(words):
        return words
    if len(words) == 1:
        return []
    half = len(words) // 2
    a, b = await asyncio.gather(
        _single_words(c, words[:half], anchor), _single_words(c, words[half:], anchor)
    )
    return a + b


async def _measure(
    c: _Counter, plan: Plan, endpoint: str
) -> tuple[ServerVocabulary, dict[str, Any]]:
    anchor = await c.count(prompt=ANCHOR, add_special_tokens=False)
    words = await _single_words(c, list(WORDS), anchor)
    if not words:
        raise TokenizeUnavailable("no synthetic word is one token for this tokenizer")
    starts = await asyncio.gather(
        *(c.count(prompt=w, add_special_tokens=False) for w in words[:FIRST_WORD_CANDIDATES])
    )
    first = tuple(w for w, n in zip(words, starts, strict=False) if n == 1)
    if not first:
        raise TokenizeUnavailable(
            "no synthetic word is one token at the start of a text for this tokenizer"
        )
    plain = PromptMaker(vocabulary=ServerVocabulary(tuple(words), first, 0))
    n_system = plan.system_prompt_tokens
    system = plain.text(n_system, prefix_seed(plan.seed)) if n_system > 0 else ""
    probe = plain.text(TEMPLATE_PROBE_WORDS, 1)
    template = (
        await c.count(**_request_body(endpoint, system, probe)) - n_system - TEMPLATE_PROBE_WORDS
    )
    if template < 0:
        raise TokenizeUnavailable(
            f"the server counted fewer tokens than words ({template} around "
            f"{n_system + TEMPLATE_PROBE_WORDS} words)"
        )
    counted = await asyncio.gather(
        *(c.count(**_request_body(endpoint, system, plain.text(n, 7 + n))) for n in VERIFY_WORDS)
    )
    for n, got in zip(VERIFY_WORDS, counted, strict=True):
        if got != n_system + n + template:
            raise TokenizeUnavailable(
                f"a {n}-word prompt counted {got - n_system - template} tokens: the "
                "tokenizer merges across words, so word counts cannot be made exact"
            )
    vocab = ServerVocabulary(tuple(words), first, template)
    info = {
        "method": "server_tokenize",
        "vocabulary_words": len(words),
        "of_words": len(WORDS),
        "first_words": len(first),
        "template_tokens": template,
        "verified_words": list(VERIFY_WORDS),
        "tokenize_requests": c.requests,
    }
    return vocab, info


async def measure_vocabulary(
    target: Target, plan: Plan, endpoint: str
) -> tuple[ServerVocabulary, dict[str, Any]]:
    """Ask the target's /tokenize which synthetic words are one token and what its template adds.
    Returns the vocabulary and what the result keeps (`plan.workload.prompt_lengths`). Raises
    TokenizeUnavailable (one line: why) where the target has none or its counts cannot be made
    exact; its message quotes the server with the target's secrets masked (`Target.redactor()`)."""
    headers = target.request_headers({"Content-Type": "application/json"})
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S, connect=target.timeouts.connect_s)
    connector = aiohttp.TCPConnector(ssl=target.tls_verify, limit=CONCURRENCY)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        c = _Counter(session, target.url(TOKENIZE_PATH), headers, target.model or "")
        try:
            return await _measure(c, plan, endpoint)
        except TokenizeUnavailable as exc:
            raise TokenizeUnavailable(target.redactor()(str(exc))) from None
