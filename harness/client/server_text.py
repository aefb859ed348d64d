"""What a server said that ends a request: the stream error every decoder raises, and a
server's error text as the harness keeps it (its first line, at most SERVER_TEXT_LIMIT
characters).
"""

from __future__ import annotations

import orjson

from harness.record.records import ErrorKind


class StreamError(Exception):
    """A stream event that ends the request as failed."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def malformed(what: str, data: bytes) -> StreamError:
    return StreamError(ErrorKind.MALFORMED, f"{what}: {data[:80]!r}")


SERVER_TEXT_LIMIT = 200  # characters of a server's error text kept (its first line)


def server_text(text: object) -> str:
    """A server-supplied error text as the harness keeps it: its first non-blank line, at most
    SERVER_TEXT_LIMIT characters (a padded or multi-line message costs nothing downstream)."""
    s = str(text)[: 64 * 1024].strip()
    return s.split("\n", 1)[0].strip()[:SERVER_TEXT_LIMIT]


def error_message(body: bytes) -> str:
    """The `error.message` of an OpenAI-shaped error body, else the start of the body (either
    as `server_text` keeps it)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and "message" in err:
            return server_text(err["message"])
        if "message" in obj:
            return server_text(obj["message"])
        if "detail" in obj:
            return server_text(obj["detail"])
    return server_text(body[:4096].decode("utf-8", "replace"))
