"""Server text as the harness keeps it: the run's secrets masked, control characters escaped.

A server may echo what it was sent (`401 bad key: Bearer sk-...`, a gateway that repeats the
request's headers, a debug page) and may put terminal controls in anything it says. The harness
knows the values it sent as secrets: the API key and every settings.json header value (a URL
cannot carry one: `harness.config.target.refuse_userinfo` refuses `user:password@`). So where
server text enters the harness, before anything records or prints it, a `Redactor` built from
the Target (`Target.redactor()`) turns it into text the harness can keep:

- `Engine._record`: a request's error detail (HTTP error bodies, in-stream errors, malformed
  events, exception texts, on both transports, in every worker process or Ray actor);
- `probe_target`: the probe's error, the model id from /v1/models, refused arguments' evidence;
- `Checker.add`: every `check` step; `measure_vocabulary`: /tokenize's errors;
- the /metrics scraper's journal lines (it sends no secret, so it only escapes).

Everything downstream (journal, result, HTML, exports, terminal) holds the kept form only.

Secrets: wherever the first 7 characters of a secret appear, the run of characters that goes on
as the secret does (all of it, or the part before a cut, such as a message truncated to 300
characters) becomes the secret's masked form, its first 6 characters and `***`, as `mask_key`
shows a key. The secret's JSON-escaped and percent-encoded spellings are masked the same way. A
value of 6 characters or fewer is not searched for: its mask would show all of it, and it would
match ordinary words. A secret echoed from its middle only, or transformed otherwise (base64,
reversed), is not recognised.

Controls: then every control character is escaped as `harness.termtext.terminal_safe` does,
newlines and tabs included (server text is kept as one line).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from harness.termtext import terminal_safe

VISIBLE_CHARS = 6  # a key, or an echo of any secret, shows this many characters
ANCHOR_CHARS = VISIBLE_CHARS + 1  # a secret's first characters that mark an echo of it


def mask(value: str) -> str:
    """'sk-abcdef123456' -> 'sk-abc***'; empty -> '(none)'."""
    return value[:VISIBLE_CHARS] + "***" if value else "(none)"


def _spellings(secret: str) -> set[str]:
    """The secret as a server may echo it: as sent, JSON-escaped, percent-encoded."""
    return {secret, json.dumps(secret, ensure_ascii=False)[1:-1], quote(secret, safe="")}


class Redactor:
    """Turns server text into the form the harness keeps (see the module docstring). Callable:
    `redactor(text) -> text`. With no secret (`Redactor()`, a target without key or headers) it
    only escapes control characters."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        spellings: set[str] = set()
        for s in secrets:
            if s and len(s) >= ANCHOR_CHARS:
                spellings |= {v for v in _spellings(s) if len(v) >= ANCHOR_CHARS}
        # longest first, so a secret that contains another is masked whole
        self._secrets = tuple(sorted(spellings, key=lambda v: (-len(v), v)))

    @property
    def has_secrets(self) -> bool:
        return bool(self._secrets)

    def __repr__(self) -> str:  # never the secrets
        return f"Redactor({len(self._secrets)} spellings)"

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for secret in self._secrets:
            text = _mask_echoes(text, secret)
        return terminal_safe(text, keep_newlines=False)

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self(text)

    def value(self, obj: Any) -> Any:
        """A JSON-like value with every string in it (keys too) passed through `self`."""
        if isinstance(obj, str):
            return self(obj)
        if isinstance(obj, dict):
            return {self.value(k): self.value(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.value(v) for v in obj)
        return obj


def _mask_echoes(text: str, secret: str) -> str:
    """Every run of `text` that starts with the secret's first ANCHOR_CHARS characters and goes
    on as the secret does (to its end, or as far as it agrees) becomes the secret's mask. Runs
    that overlap or touch are masked as one, so a secret whose first characters repeat
    ('aaaaaaaQ...') cannot hide behind an earlier, shorter match."""
    anchor = secret[:ANCHOR_CHARS]
    i = text.find(anchor)
    if i == -1:
        return text
    spans: list[tuple[int, int]] = []
    while i != -1:
        n = ANCHOR_CHARS
        while n < len(secret) and i + n < len(text) and text[i + n] == secret[n]:
            n += 1
        if spans and i <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], i + n))
        else:
            spans.append((i, i + n))
        i = text.find(anchor, i + 1)
    masked, out, pos = mask(secret), [], 0
    for start, end in spans:
        out += [text[pos:start], masked]
        pos = end
    out.append(text[pos:])
    return "".join(out)


NO_SECRETS = Redactor()  # escapes control characters only

__all__ = ["ANCHOR_CHARS", "NO_SECRETS", "VISIBLE_CHARS", "Redactor", "mask"]
