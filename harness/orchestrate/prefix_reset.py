"""`--reset-prefix-cache`: empty the server's prefix cache before each sweep point or capacity
probe, so that a point does not find the prompts of the points before it cached.

The reset is vLLM's `POST /reset_prefix_cache` at the server's root (not under /v1; no API key):
vLLM 0.32 registers it only when the server runs with `VLLM_SERVER_DEV_MODE=1`
(vllm/entrypoints/launchers/api_server/routers.py) and answers `{"success": false}` while
running requests still hold KV blocks (vllm/entrypoints/serve/dev/cache/api_router.py). The
built-in simulator serves the same route (harness.sim.app); a gateway has none.

`PrefixCacheReset.reset()` returns the outcome that the run records (its result's
`options.prefix_cache_reset`):

- "reset": the server emptied its cache;
- "refused": it answered `success: false` RESET_TRIES times (requests still held blocks);
- "unsupported": no such route (404/405, or vLLM without dev mode); said once, in one line, and
  not asked again: the scenario's warm-up phase is then what evens the points out;
- "failed": anything else (connection refused, 5xx, an answer that is not the JSON above); the
  point still runs.

Whatever the server answers is data: the body is read up to MAX_BODY_BYTES and only its
`success` boolean is used.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

RESET_PATH = "/reset_prefix_cache"
RESET_TRIES = 5  # `success: false` while the last point's requests still hold blocks: try again
RESET_RETRY_S = 0.5  # ... after this long
RESET_TIMEOUT_S = 10.0
MAX_BODY_BYTES = 4096
OUTCOMES = ("reset", "refused", "unsupported", "failed")


def reset_url(base_url: str) -> str:
    """The reset route for a target's base URL: its path without a trailing /v1, plus
    RESET_PATH ("http://h:8000/v1" -> "http://h:8000/reset_prefix_cache")."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path + RESET_PATH, "", ""))


def _post(url: str) -> tuple[int, bytes]:
    """POST an empty body; (status, body). Raises OSError (URLError) when no answer came."""
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=RESET_TIMEOUT_S) as resp:  # noqa: S310 - the target the user named
            return int(resp.status), resp.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""


@dataclass
class PrefixCacheReset:
    """Resets one server's prefix cache, point after point. `say` gets the one-line notices."""

    base_url: str
    say: Callable[[str], None]
    post: Callable[[str], tuple[int, bytes]] = _post
    sleep: Callable[[float], None] = time.sleep
    unsupported: bool = False

    def reset(self) -> str:
        """Empty the cache now; the outcome (module docstring)."""
        if self.unsupported:
            return "unsupported"
        url = reset_url(self.base_url)
        for attempt in range(RESET_TRIES):
            try:
                status, body = self.post(url)
            except OSError as exc:
                self.say(
                    f"--reset-prefix-cache: POST {url} failed ({exc}); the point runs as it is"
                )
                return "failed"
            if status in (404, 405):
                self.unsupported = True
                self.say(
                    f"--reset-prefix-cache: {url} answered {status}: the target has no reset "
                    "endpoint (vLLM serves it with VLLM_SERVER_DEV_MODE=1); the warm-up phase "
                    "decides what each point finds cached"
                )
                return "unsupported"
            success = _success(body) if status == 200 else None
            if success is None:
                self.say(
                    f"--reset-prefix-cache: {url} answered {status} without "
                    '{"success": true|false}; the point runs as it is'
                )
                return "failed"
            if success:
                return "reset"
            if attempt + 1 < RESET_TRIES:
                self.sleep(RESET_RETRY_S)
        self.say(
            f"--reset-prefix-cache: the server refused {RESET_TRIES} times (requests still hold "
            "cache blocks); the point runs with what is cached"
        )
        return "refused"


def _success(body: bytes) -> bool | None:
    """The `success` boolean of vLLM's answer (None: not that shape)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    v = doc.get("success") if isinstance(doc, dict) else None
    return v if isinstance(v, bool) else None
