"""Per-event CPU of the hot loop, without sockets: the harness's `Exchange.on_data` (HTTP chunk
framing, SSE splitting, decoding, stamping) against the plain client's loop (split on blank
lines, orjson per event), over the truth server's byte stream.

    /tmp/venv/bin/python benchmarks/decode_bench.py [--coalesce 16] [--tokens 256] [--repeat 300]

Prints one JSON line: microseconds per event for each path (best of 5 rounds). The fast byte
decoder (`harness.client.openai.REGION_BLOCKS`) handles the vLLM chunk shape the truth server and
the simulator send; `--shape odd` sends the same chunks with a space after every colon, which
the fast decoder refuses, to show the orjson fallback's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.client.fasthttp import Exchange  # noqa: E402

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def stream(tokens: int, coalesce: int, odd: bool) -> list[bytes]:
    """The socket reads of one response: the head, then one HTTP chunk per server write."""
    events = []
    for i in range(tokens):
        doc = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [
                {"index": 0, "delta": {"content": " tok"}, "logprobs": None, "finish_reason": None}
            ],
            "usage": {"prompt_tokens": 8, "total_tokens": 9 + i, "completion_tokens": i + 1},
        }
        raw = orjson.dumps(doc)
        if odd:
            raw = raw.replace(b'":', b'": ')
        events.append(b"data: " + raw + b"\n\n")
    tail = (
        b"data: "
        + orjson.dumps(
            {
                "id": "chatcmpl-1",
                "choices": [],
                "usage": {
                    "prompt_tokens": 8,
                    "completion_tokens": tokens,
                    "total_tokens": 8 + tokens,
                },
            }
        )
        + b"\n\ndata: [DONE]\n\n"
    )
    reads = [HEAD]
    for j in range(0, tokens, coalesce):
        body = b"".join(events[j : j + coalesce])
        if j + coalesce >= tokens:
            body += tail
        reads.append(b"%x\r\n%s\r\n" % (len(body), body))
    reads[-1] += b"0\r\n\r\n"
    return reads


class _Counters:
    output_tokens = 0


def harness_path(reads: list[bytes], repeat: int) -> float:
    loop = asyncio.new_event_loop()
    t = time.perf_counter()
    for _ in range(repeat):
        ex = Exchange(0, _Counters(), loop.create_future())
        for r in reads:
            ex.on_data(r)
        assert ex.dec.done and ex.error is None
    dt = time.perf_counter() - t
    loop.close()
    return dt


def plain_path(reads: list[bytes], repeat: int) -> float:
    """benchmarks/plain_client.py's loop without its HTTP stack (aiohttp removes the chunk
    framing in C; here it is removed before timing): split, orjson per event."""
    bodies = [r.split(b"\r\n", 1)[1].rsplit(b"\r\n", 1)[0] for r in reads[1:]]
    bodies[-1] = bodies[-1].split(b"\r\n0\r\n")[0]
    t = time.perf_counter()
    for _ in range(repeat):
        buf = b""
        n = 0
        for r in bodies:
            buf += r
            *events, buf = buf.split(b"\n\n")
            for e in events:
                if e.startswith(b"data: ") and e[6:] != b"[DONE]":
                    obj = orjson.loads(e[6:])
                    if obj.get("choices"):
                        n += 1
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--coalesce", type=int, default=16)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--repeat", type=int, default=300)
    p.add_argument("--shape", choices=("vllm", "odd"), default="vllm")
    p.add_argument("--check", action="store_true", help="assert both paths see every token")
    a = p.parse_args()
    reads = stream(a.tokens, a.coalesce, a.shape == "odd")
    events = a.tokens + 2
    out = {"coalesce": a.coalesce, "tokens": a.tokens, "shape": a.shape}
    for name, fn in (("harness_on_data", harness_path), ("plain_split_orjson", plain_path)):
        best = min(fn(reads, a.repeat) for _ in range(5))
        out[f"{name}_us_per_event"] = best / a.repeat / events * 1e6
    out["harness_vs_plain"] = (
        out["harness_on_data_us_per_event"] / out["plain_split_orjson_us_per_event"]
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
