"""Hostile answers whose framing or shape the run and the pre-run check must read alike.

`FramingServer(behaviour)` is tests/hostile/server.py's server with every generation or
embeddings request answered by one behaviour (streamed requests as a stream, `stream: false`
ones as one JSON answer):

- `switching`: `101 Switching Protocols`, then silence on the connection;
- `long_length`: a streamed answer whose `Content-Length` is 100 bytes more than its body, then
  silence (the stream itself ends with `[DONE]`);
- `te_and_cl`: a chunked answer that also says `Content-Length`;
- `done_after_completed`: a Responses API stream with `data: [DONE]` after `response.completed`;
- `padded_error`: HTTP 500 whose message is 2,700 characters of padding around one line;
- `emb_dup_index`, `emb_out_of_range`, `emb_empty`, `emb_ragged`: embeddings answers with a
  duplicate index, an index past the inputs, an empty vector, vectors of two lengths.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from keepalive_server import hs  # noqa: E402

from harness.client.embeddings import embeddings_bytes_bound  # noqa: E402

BEHAVIOURS = (
    "switching",
    "long_length",
    "te_and_cl",
    "done_after_completed",
    "padded_error",
    "emb_dup_index",
    "emb_out_of_range",
    "emb_empty",
    "emb_ragged",
    "emb_oversized",
)
PADDED_MESSAGE = "overloaded, try again later"
SILENCE_S = 20.0  # how long a silent connection stays open (the client must not wait on it)


def sse(events: list[bytes]) -> bytes:
    return b"".join(b"data: " + e + b"\n\n" for e in events)


def responses_stream(n: int) -> bytes:
    """A Responses API stream of n answer deltas and `response.completed` (usage n)."""
    out = []
    for _ in range(n):
        d = hs.orjson.dumps({"type": "response.output_text.delta", "delta": "tok"})
        out.append(b"event: response.output_text.delta\ndata: " + d + b"\n\n")
        usage = {"input_tokens": 8, "output_tokens": n, "total_tokens": 8 + n}
    done = hs.orjson.dumps({"type": "response.completed", "response": {"usage": usage}})
    return b"".join(out) + b"event: response.completed\ndata: " + done + b"\n\n"


def embeddings(behaviour: str, n: int) -> bytes:
    items: list[dict[str, Any]] = [{"index": i, "embedding": [0.5, 0.25]} for i in range(n)]
    if behaviour == "emb_dup_index":  # one input answered twice
        items.append({"index": 0, "embedding": [0.5, 0.25]})
    elif behaviour == "emb_out_of_range":
        items[-1]["index"] = n
    elif behaviour == "emb_empty":
        items[0]["embedding"] = []
    elif behaviour == "emb_oversized":  # past the answer's bound for n inputs ("0.5," is 4 bytes)
        items[0]["embedding"] = [0.5] * (embeddings_bytes_bound(n) // 4 + 16384)
    else:  # emb_ragged: two vectors of two lengths (no index: in order)
        items = [{"embedding": [0.5, 0.25]}, {"embedding": [0.5]}]
    return hs.orjson.dumps({"data": items, "usage": {"prompt_tokens": 8, "total_tokens": 8}})


class FramingServer(hs.HostileServer):  # type: ignore[misc]
    def __init__(self, behaviour: str) -> None:
        super().__init__()
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"behaviour: expected one of {BEHAVIOURS}, got {behaviour!r}")
        self.behaviour = behaviour

    def _handler(self, mode_name: str, path: str) -> Any:
        if path.startswith(("/v1/chat/completions", "/v1/responses", "/v1/embeddings")):
            return self._answer
        return super()._handler(mode_name, path)

    async def _answer(self, req: Any, out: Any) -> None:
        b = self.behaviour
        streamed = req.json.get("stream") is True
        if b.startswith("emb_"):
            inputs = req.json.get("input")
            n = len(inputs) if isinstance(inputs, list) else 1
            await out.body(200, embeddings(b, n), "application/json")
        elif b == "switching":
            await out.raw(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n")
            await out.raw(b"Connection: Upgrade\r\n\r\n")
            await _silence(out)
        elif b == "padded_error":
            msg = " " * 1300 + PADDED_MESSAGE + "\n" + "." * 1400
            await out.body(500, hs.orjson.dumps({"error": {"message": msg}}), "application/json")
        elif not streamed:
            await _whole(req, out, b == "done_after_completed")
        elif b == "done_after_completed":
            body = responses_stream(req.max_tokens) + b"data: [DONE]\n\n"
            await out.body(200, body, "text/event-stream")
        elif b == "long_length":
            body = sse([*hs.good_events(req), b"[DONE]"])
            await out.head(length=len(body) + 100)
            await out.raw(body)
            await _silence(out)
        else:  # te_and_cl
            await out.head(headers=[("Content-Length", "10")])
            for e in [*hs.good_events(req), b"[DONE]"]:
                await out.event(e)
            await out.end()


async def _silence(out: Any) -> None:
    """Keep the connection open and say nothing (until SILENCE_S, or the server stops)."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(SILENCE_S)
    out.close()


async def _whole(req: Any, out: Any, responses: bool) -> None:
    """A well-formed non-streamed chat (or Responses) answer (the check's whole-request step)."""
    if responses:
        text = {"type": "output_text", "text": "tok tok"}
        whole = {
            "output": [{"type": "message", "content": [text]}],
            "usage": {"input_tokens": 64, "output_tokens": 2},
        }
        await out.body(200, hs.orjson.dumps(whole), "application/json")
        return
    answer = {
        "id": "x",
        "object": "chat.completion",
        "model": req.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok tok"}}],
        "usage": {"prompt_tokens": 64, "completion_tokens": 2, "total_tokens": 66},
    }
    await out.body(200, hs.orjson.dumps(answer), "application/json")


__all__ = ["BEHAVIOURS", "PADDED_MESSAGE", "FramingServer"]
