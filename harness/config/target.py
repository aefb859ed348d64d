"""The target: where requests go, with which model, key and timeouts.

Resolution order for each value (first found wins): the command line, the scenario's
`[target]`, `settings.json`, `config.toml`; with no URL anywhere the run starts the built-in
simulator. The API key is a `Secret`: its repr and every message show at most its first 6
characters, so it cannot leak into results, logs or errors by accident. A server that echoes
the key or a header value in its answers has it masked by `Target.redactor()` (harness.redact)
before the harness records or prints the answer. A URL with credentials (`user:pass@host`) is
refused (`refuse_userinfo`): a URL is stored and printed everywhere, so it cannot carry a secret.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from harness.errors import ConfigError
from harness.redact import Redactor, mask

DEFAULT_CONNECT_TIMEOUT_S = 10.0  # loopback and LAN servers connect in milliseconds
DEFAULT_FIRST_TOKEN_TIMEOUT_S = 600.0  # a long prompt behind a deep queue can wait minutes
DEFAULT_IDLE_TIMEOUT_S = 120.0  # a gap between reads this long means a stalled stream
DEFAULT_TOTAL_TIMEOUT_S = 3600.0  # long generations; a measured request never runs longer


def mask_key(key: str | None) -> str:
    """'sk-abcdef123456' -> 'sk-abc***'. Empty or None -> '(none)'. (harness.redact.mask: an
    echoed secret is masked the same way.)"""
    return mask(key or "")


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token


def header_value_problem(value: str) -> str | None:
    """Why `value` cannot go on the wire as an HTTP header value (None when it can): HTTP/1.1
    carries latin-1 bytes, and a CR, LF or other control character would end or split the header.
    Says the position and the kind of character, never the value (it may be a key)."""
    for i, c in enumerate(value):
        if c in "\r\n" or (ord(c) < 0x20 and c != "\t") or c == "\x7f":
            return f"a control character (U+{ord(c):04X}) at position {i + 1}"
        if ord(c) > 0xFF:
            return f"a character HTTP headers cannot carry (U+{ord(c):04X}) at position {i + 1}"
    return None


def header_name_problem(name: str) -> str | None:
    """Why `name` is not an HTTP header name (None when it is)."""
    return (
        None
        if _HEADER_NAME.match(name)
        else "not an HTTP header name (letters, digits and !#$%&'*+.^_`|~-)"
    )


class Secret:
    """A string that never prints itself. Use `.reveal()` only to build the request header."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def masked(self) -> str:
        return mask_key(self._value)

    def __repr__(self) -> str:
        return f"Secret({self.masked()})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = DEFAULT_CONNECT_TIMEOUT_S
    first_token_s: float = DEFAULT_FIRST_TOKEN_TIMEOUT_S
    idle_s: float = DEFAULT_IDLE_TIMEOUT_S
    total_s: float = DEFAULT_TOTAL_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # "simulator" or "http"
    base_url: str  # normalised: no trailing slash, no /v1
    model: str | None
    endpoint: str  # "chat", "completions", "responses" or "embeddings"
    api_key: Secret | None = None
    key_source: str = ""  # e.g. "env TAOTOKEN_API_KEY"
    headers: dict[str, str] = field(default_factory=dict)
    tls_verify: bool = True
    timeouts: Timeouts = Timeouts()

    def url(self, path: str) -> str:
        """base_url + path, where path starts with /v1/... or /health."""
        return self.base_url + path

    def request_headers(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The headers every request to the target carries: `base` (e.g. Content-Type), then
        settings.json's headers, then `Authorization: Bearer <key>` when there is a key. The one
        place the key is revealed for a request."""
        headers = dict(base or {})
        headers.update(self.headers)
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key.reveal()}"
        return headers

    def redactor(self) -> Redactor:
        """Masks this target's secrets (the key, every header value) in text a server sent."""
        return Redactor(
            ([self.api_key.reveal()] if self.api_key else []) + list(self.headers.values())
        )

    def describe(self) -> dict[str, Any]:
        """What the result records about the target: never the key itself."""
        return {
            "kind": self.kind,
            "base_url": self.base_url,
            "model": self.model,
            "endpoint": self.endpoint,
            "api_key": self.api_key.masked() if self.api_key else None,
            "api_key_source": self.key_source or None,
            "tls_verify": self.tls_verify,
            "timeouts_s": {
                "connect": self.timeouts.connect_s,
                "first_token": self.timeouts.first_token_s,
                "idle": self.timeouts.idle_s,
                "total": self.timeouts.total_s,
            },
        }


_V1_TAIL = re.compile(r"(/v1)+/*$")
_ENDPOINT_TAIL = re.compile(r"/v1/(chat/completions|completions|models)/*$")


def normalize_base_url(url: str, where: str = "--target", key: str = "url") -> str:
    """Accept a base URL with or without /v1 and a trailing slash; return it without either.

    'http://h:8000/v1/' -> 'http://h:8000'; 'https://taotoken.net/api' stays. A full endpoint
    URL (.../v1/chat/completions) is cut back to its base. Raises ConfigError for a URL without
    http(s) scheme or host, or with a port out of range.
    """
    refuse_userinfo(url, where, key)
    raw = url.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(
            where, key, f"expected a URL starting with http:// or https://, got {url!r}"
        )
    if not parts.hostname:
        raise ConfigError(where, key, f"expected a URL with a host, got {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(where, key, f"port out of range 1..65535 in {url!r}") from None
    if port == 0:
        raise ConfigError(where, key, f"port out of range 1..65535 in {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(
            where, key, f"expected a base URL without ?query or #fragment, got {url!r}"
        )
    path = _ENDPOINT_TAIL.sub("", parts.path)
    path = _V1_TAIL.sub("", path).rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}"


def target_arg(value: str) -> str:
    """The argparse type of `--target`: a URL with credentials is refused before the command
    does anything (a saved scenario's `# written by:` line would hold it)."""
    try:
        refuse_userinfo(value, "--target", "url")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.detail) from None
    return value


def refuse_userinfo(url: str, where: str, key: str) -> None:
    """A ConfigError for a URL with credentials in it (`http://user:secret@host/`): a URL is
    stored in results and journals and printed, so it cannot carry a secret. The message does not
    repeat the URL."""
    rest = url.strip().split("://", 1)[-1]
    if "@" in re.split(r"[/?#]", rest, maxsplit=1)[0]:
        raise ConfigError(
            where,
            key,
            "a URL with credentials (user:password@host) is not accepted: URLs are stored in "
            "results and journals; give the key through api_key_env or settings.json "
            "(api_key, headers) instead",
        )


KNOWN_HOSTS = {"taotoken.net": "/api"}  # gateways whose base URL needs a path


def url_warnings(url: str) -> list[str]:
    """Warnings for URLs that parse but look like a typo of a known shape."""
    out = []
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    segs = [s for s in path.split("/") if s]
    for s in segs:
        if s != "v1" and (
            s.lower() in ("v1", "vl", "v1l", "v11", "v") or re.fullmatch(r"[vV][0-9lI]", s)
        ):
            out.append(f"{url}: path segment {s!r} looks like a typo of 'v1'")
    if path.endswith(("/chat", "/chat/completion", "/completion")):
        out.append(
            f"{url}: looks like part of an endpoint path; give the base URL (…/v1 or without it)"
        )
    host = (parts.hostname or "").lower()
    for known, need in KNOWN_HOSTS.items():
        if host == known or host.endswith("." + known):
            if not (path == need or path.startswith(need + "/")):
                out.append(
                    f"{url}: {known}'s OpenAI API lives under {need}: use https://{known}{need}"
                )
            if parts.scheme != "https":
                out.append(f"{url}: {known} is served over https")
    if url.strip() != url:
        out.append(f"{url!r}: has leading or trailing whitespace (removed)")
    return out


def is_loopback(url: str) -> bool:
    """localhost, ::1 or 127.x: a server on this machine."""
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")
