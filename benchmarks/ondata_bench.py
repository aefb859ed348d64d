"""The lean client's per-read path alone: `fasthttp.Exchange.on_data` fed a recorded chunked SSE
answer (256 tokens, 16 events a write, vLLM-shaped chunks with cumulative usage), 3,000 answers,
best of three; CPU µs per token. No sockets, no event-loop work: what the transport and the
decoder cost per token, to compare trees side by side (each unpacked with `git archive`):

    taskset -c 0 .venv/bin/python benchmarks/ondata_bench.py /tmp/bench-base
    taskset -c 0 .venv/bin/python benchmarks/ondata_bench.py /tmp/bench-head
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from typing import Any

TOKENS, PER_WRITE, ANSWERS, REPEATS = 256, 16, 3000, 3


def answer(tokens: int = TOKENS, per: int = PER_WRITE) -> list[bytes]:
    """The socket reads of one streamed answer: the head, then one chunk per write."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    reads, k = [head], 0
    while k < tokens:
        events = b""
        for _ in range(per):
            k += 1
            chunk = {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": "tok"},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "usage": {"prompt_tokens": 8, "total_tokens": 8 + k, "completion_tokens": k},
            }
            events += b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
        reads.append(b"%x\r\n" % len(events) + events + b"\r\n")
    done = b"data: [DONE]\n\n"
    reads.append(b"%x\r\n" % len(done) + done + b"\r\n0\r\n\r\n")
    return reads


async def main(tree: str) -> None:
    sys.path.insert(0, tree)
    fasthttp: Any = importlib.import_module("harness.client.fasthttp")
    counters = importlib.import_module("harness.client.state").Counters()
    reads = answer()
    loop = asyncio.get_running_loop()
    best = float("inf")
    for _ in range(REPEATS):
        t = time.process_time()
        for _ in range(ANSWERS):
            ex = fasthttp.Exchange(time.perf_counter_ns(), counters, loop.create_future())
            if hasattr(ex, "max_token_events"):  # the bounds the engine sets (newer trees)
                ex.max_token_events = TOKENS + 16
            for data in reads:
                ex.on_data(data)
        best = min(best, (time.process_time() - t) / (ANSWERS * TOKENS) * 1e6)
    assert ex.error is None and len(ex.chunk_ns) == TOKENS, (ex.error, len(ex.chunk_ns))
    print(f"{tree}: {best:.3f} us/token (best of {REPEATS})")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "."))
