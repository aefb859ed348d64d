"""Token counts a server claims, vetted: a count is data about a request, never a size.

A server's `usage` says how many tokens it read and wrote. The harness believes a count only
when it is possible for the request it describes; otherwise the count is *flagged* and the
request's figures fall back to what the client itself saw (one token per token event, as for a
server that reports no usage). Nothing is ever allocated by a claimed count.

A count is flagged, with its reason, when it is

- `not_integer`: not a JSON integer (a float, a string, a boolean, ...);
- `negative`;
- `over_max_tokens`: a completion count above the request's `max_tokens` by more than its
  margin, `usage_margin`: half of `max_tokens`, at least 1, at most USAGE_MARGIN_TOKENS (a
  server may count a stop token or two past the limit; more is not a count of this request);
  also a stream that sends more token events than that (each event is at least one token):
  the client ends it there, keeps its first `completion_limit` events and records it as
  finished, flagged;
- `over_bytes`: more tokens than bytes carried them: a completion count above the response
  body's bytes, a prompt count above the request body's bytes plus PROMPT_TEMPLATE_TOKENS (the
  chat template's own tokens), or any count above MAX_COUNT;
- `over_prompt_tokens`: a cached count (`usage.prompt_tokens_details.cached_tokens`) above the
  prompt count believed (a prompt not believed, or not reported, is 0 tokens: any cached count
  above 0 is flagged). A cached count not believed is dropped (None: not reported); the other
  counts stand.

A completion count within the margin but above `max_tokens` is believed and counted apart
(`past_max_tokens`). A stream that goes on past `stream_bytes_bound` is ended by the client
as `body_too_large`.

`vet_counts` is the one rule; the engine applies it to every record (`Record.usage_flag`), and
the journal reader applies it again (harmless for records already vetted) so that a journal
written before this rule, or by hand, cannot make the analysis allocate by a claimed count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

USAGE_MARGIN_TOKENS = 16  # completion tokens a server may count past max_tokens
PROMPT_TEMPLATE_TOKENS = 4096  # tokens a chat template may add to the prompt it was sent
MAX_COUNT = 2**53 - 1  # above this no JSON reader keeps an integer exact
STREAM_BYTES_PER_TOKEN = 16 * 1024  # body bytes a stream may carry per token asked (a chunk
# with top-20 logprobs is about 3 KiB) ...
STREAM_BYTES_BASE = 5 * 1024 * 1024  # ... plus this: the largest event the SSE splitter takes
# (4 MiB, harness.client.sse.MAX_PENDING_BYTES) and 1 MiB of role, usage and keep-alive events

NOT_INTEGER = "not_integer"
NEGATIVE = "negative"
OVER_MAX_TOKENS = "over_max_tokens"
OVER_BYTES = "over_bytes"
OVER_PROMPT = "over_prompt_tokens"
REASONS = (NOT_INTEGER, NEGATIVE, OVER_MAX_TOKENS, OVER_BYTES, OVER_PROMPT)


def count_problem(name: str, value: object) -> str | None:
    """Why `value`, read from a server's usage as `name`, is not a count; None when it is one."""
    if type(value) is not int:
        return f"{NOT_INTEGER}: {name} {repr(value)[:40]}"
    if value < 0:
        return f"{NEGATIVE}: {name} {value}"
    if value > MAX_COUNT:
        return f"{OVER_BYTES}: {name} {value} > {MAX_COUNT}"
    return None


def usage_margin(max_tokens: int) -> int:
    """Completion tokens a server may count past `max_tokens`: half of it, at least 1 and at
    most USAGE_MARGIN_TOKENS (a stop token or two; for a short answer, never double it)."""
    return min(USAGE_MARGIN_TOKENS, max(1, max_tokens // 2))


def completion_limit(max_tokens: int) -> int:
    """The most completion tokens believed for a request that asked for `max_tokens`; also the
    most token events its stream may carry before the client ends it."""
    return max_tokens + usage_margin(max_tokens)


def events_cut_flag(max_tokens: int) -> str:
    """The flag of a stream the client ended at `completion_limit(max_tokens)` token events."""
    return (
        f"{OVER_MAX_TOKENS}: completion_tokens > {completion_limit(max_tokens)} "
        f"(token events past max_tokens {max_tokens} + {usage_margin(max_tokens)}, "
        "so the client ended the stream there)"
    )


def stream_bytes_bound(max_tokens: int) -> int:
    """The body bytes a stream for `max_tokens` may carry before the client ends it as
    `body_too_large`: a stream that never ends is cut at the speed the server sends."""
    return STREAM_BYTES_BASE + STREAM_BYTES_PER_TOKEN * completion_limit(max(max_tokens, 0))


class Vetted(NamedTuple):
    """One request's counts after vetting (a tuple: one is built per request)."""

    output_tokens: int
    prompt_tokens: int
    own_chunks: bool  # the completion count was not believed: one token per token event
    flag: str  # "" when every count was believed
    cached_tokens: int | None = None  # prompt tokens the server served from its prefix cache


def vet_counts(
    *,
    output_tokens: int,
    prompt_tokens: int,
    n_events: int,
    chunk_sum: int,
    max_tokens: int,
    received_bytes: int | None,
    request_bytes: int | None,
    flags: Sequence[str] = (),
    cached_tokens: int | None = None,
) -> Vetted:
    """The counts of one request as the result uses them.

    `output_tokens`/`prompt_tokens`: the server's (or the client's own where it reported none);
    `n_events`, `chunk_sum`: its token events and the tokens they carried (each at least one); `max_tokens`: what the request asked (0: unknown); `received_bytes`,
    `request_bytes`: the bodies' sizes (None: unknown, that check is skipped); `flags`: problems
    the decoder found (`count_problem`); a flagged count was not read. A completion count not
    believed becomes the number of token events (`own_chunks`: each carried one token); a prompt
    count not believed becomes 0 (not reported). `cached_tokens`: the server's
    prompt_tokens_details.cached_tokens (None: not sent); believed when 0 <= it <= the prompt
    count believed, else flagged and None."""
    found = list(flags)
    completion_bad = prompt_bad = False
    for f in flags:
        completion_bad |= _field(f) == "completion_tokens"
        prompt_bad |= _field(f) == "prompt_tokens"
    # The client's own count (one token per event) needs no vetting: only a count that differs
    # from it is the server's claim.
    own = output_tokens == n_events == chunk_sum
    if not completion_bad and not own:
        limit = completion_limit(max_tokens) if max_tokens > 0 else MAX_COUNT
        claimed = max(output_tokens, chunk_sum)  # its final usage, or its events' sum
        if output_tokens < 0:
            found.append(f"{NEGATIVE}: completion_tokens {output_tokens}")
        elif claimed > limit:
            found.append(
                f"{OVER_MAX_TOKENS}: completion_tokens {claimed} > max_tokens {max_tokens} "
                f"+ {usage_margin(max_tokens)}"
            )
        elif received_bytes is not None and claimed > max(received_bytes, n_events):
            found.append(
                f"{OVER_BYTES}: completion_tokens {claimed} > {received_bytes} bytes received"
            )
        completion_bad = len(found) > len(flags)
    if not prompt_bad:
        before = len(found)
        if prompt_tokens < 0:
            found.append(f"{NEGATIVE}: prompt_tokens {prompt_tokens}")
        elif prompt_tokens > (
            MAX_COUNT if request_bytes is None else request_bytes + PROMPT_TEMPLATE_TOKENS
        ):
            found.append(
                f"{OVER_BYTES}: prompt_tokens {prompt_tokens} > {request_bytes} bytes sent "
                f"+ {PROMPT_TEMPLATE_TOKENS}"
            )
        prompt_bad = len(found) > before
    prompt = 0 if prompt_bad else prompt_tokens
    cached = cached_tokens
    if cached is not None and not any(_field(f) == "cached_tokens" for f in flags):
        problem = cached_problem(cached, prompt)
        if problem is not None:
            found.append(problem)
            cached = None
    if not found:
        return Vetted(output_tokens, prompt_tokens, False, "", cached)
    return Vetted(
        n_events if completion_bad else output_tokens,
        prompt,
        completion_bad,
        "; ".join(found),
        cached,
    )


def cached_problem(cached: int, prompt_tokens: int) -> str | None:
    """Why a cached count is not believed for a prompt of `prompt_tokens` (None: it is)."""
    if cached < 0:
        return f"{NEGATIVE}: cached_tokens {cached}"
    if cached > prompt_tokens:
        return f"{OVER_PROMPT}: cached_tokens {cached} > prompt_tokens {prompt_tokens}"
    return None


def _field(item: str) -> str:
    """The usage field a flag item names ("not_integer: prompt_tokens 1.5" -> "prompt_tokens")."""
    return item.partition(": ")[2].partition(" ")[0]


def flag_reasons(flag: str) -> list[str]:
    """The reasons in a `usage_flag` ("over_bytes: ...; negative: ...")."""
    return [item.partition(":")[0].strip() for item in flag.split("; ") if item] if flag else []
