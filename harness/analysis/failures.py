"""Failures you can act on: the servers' own words per error class, and rate limits as data.

Pure functions over a journal's failed attempts (`Journal.failed_attempts`) and `Columns`:

- `error_messages`: per error class, the most frequent messages of the requests that failed
  (final attempts), deduplicated (digits do not make two messages different: "try again in
  120ms" and "in 80ms" are one), each capped at MESSAGE_CHARS, with its count. Views print
  them as `http_400 x20: Unrecognized request argument supplied: ignore_eos`; the HTML report
  shows them as text, never as markup.
- `retry_counts`: retried attempts whose wait honoured the server's Retry-After, apart from
  those that backed off without one.
- `status_series`: answers of one class (`http_429`) per second, retried attempts included.
- `headline`: the one sentence a run where every request failed ends with.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from harness.record.journal import FailedAttempt
from harness.record.metrics import Columns

MAX_MESSAGES_PER_CLASS = 3  # the most frequent few; the rest are counted, not listed
MESSAGE_CHARS = 200  # a message longer than this is cut (an HTML error page, a trace)
_HTTP_PREFIX = re.compile(r"^HTTP \d{3}: ")
_DIGITS = re.compile(r"\d+")
# Messages are told apart on their first KEY_CHARS characters once digits are folded: the client
# cuts a server's text at 200 characters (harness.client.openai.server_text), so the same message
# with longer numbers loses more of its tail, and the tail alone must not split it.
KEY_CHARS = 150
_SPACE = re.compile(r"\s+")


def _words(detail: str) -> str:
    """The server's words from a record's error detail: without the `HTTP 400: ` prefix (the
    class already says it), whitespace collapsed."""
    return _SPACE.sub(" ", _HTTP_PREFIX.sub("", detail)).strip() or "(no message)"


def server_message(detail: str) -> str:
    """`_words`, at most MESSAGE_CHARS characters."""
    text = _words(detail)
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def error_messages(fails: Iterable[FailedAttempt]) -> dict[str, list[dict[str, Any]]]:
    """{class: [{"message", "count"}, ...]} for final failed attempts, most frequent first
    (ties: first seen), at most MAX_MESSAGES_PER_CLASS per class."""
    counts: dict[str, Counter[str]] = {}
    example: dict[tuple[str, str], str] = {}
    for f in fails:
        if f.retried:
            continue
        msg = server_message(f.detail)
        key = _DIGITS.sub("#", _words(f.detail))[:KEY_CHARS]
        counts.setdefault(f.error_class, Counter())[key] += 1
        example.setdefault((f.error_class, key), msg)
    return {
        cls: [
            {"message": example[(cls, k)], "count": n}
            for k, n in c.most_common(MAX_MESSAGES_PER_CLASS)
        ]
        for cls, c in sorted(counts.items())
    }


def retry_counts(fails: Iterable[FailedAttempt]) -> dict[str, int]:
    """Retried attempts by what decided their wait: the server's Retry-After, or the backoff."""
    retried = [f for f in fails if f.retried]
    after = sum(1 for f in retried if f.retry_after_s is not None)
    return {"retried_with_retry_after": after, "retried_with_backoff": len(retried) - after}


def in_phases(fails: Sequence[FailedAttempt], phases: Iterable[int]) -> list[FailedAttempt]:
    keep = set(phases)
    return [f for f in fails if f.phase in keep]


def status_series(
    c: Columns, error_class: str, end_ns: int, step_ns: int = 1_000_000_000
) -> list[int]:
    """Attempts of `error_class` per step (by when they ended), retried attempts included."""
    bins = max(int(np.ceil(end_ns / step_ns)), 1)
    mask = np.fromiter((e == error_class for e in c.error_class), dtype=bool, count=c.n)
    t = c.end[mask]
    t = t[(t >= 0) & (t < bins * step_ns)]
    counts: list[int] = (
        np.bincount((t // step_ns).astype(np.int64), minlength=bins)[:bins]
        .astype(np.int64)
        .tolist()
    )
    return counts


def message_lines(messages: dict[str, list[dict[str, Any]]]) -> list[str]:
    """`http_400 ×20: Unrecognized request argument supplied: ignore_eos`, one per message."""
    return [f"{cls} ×{m['count']}: {m['message']}" for cls, ms in messages.items() for m in ms]


def headline(blocks: Sequence[dict[str, Any]], failed: int) -> str:
    """The sentence for a run where every request failed, with the top messages of all blocks."""
    merged: dict[str, Counter[str]] = {}
    for b in blocks:
        for cls, ms in (b.get("error_messages") or {}).items():
            for m in ms:
                merged.setdefault(cls, Counter())[m["message"]] += m["count"]
    parts = [
        f"{cls} ×{n}: {msg}" for cls, c in sorted(merged.items()) for msg, n in c.most_common(1)
    ]
    return f"every request failed ({failed} of {failed}); nothing was measured" + (
        f": {'; '.join(parts)}" if parts else ""
    )
