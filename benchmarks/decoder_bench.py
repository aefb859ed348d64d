"""The OpenAI stream decoder alone, in one tree: client CPU (process_time) per event, best of 7.

- `odd_on_event_us`: chunks with a space after every colon (not the fast byte shape), one
  `StreamDecoder.on_event` each: the orjson path (`_decode` -> `_on_json`) that every server
  whose chunks are not vLLM's exact shape takes per token.
- `vllm_on_region_c1_us`: vLLM-shaped chunks, one event per region (a paced stream's read),
  through `StreamDecoder.on_region`: the fast byte path.
- `vllm_on_data_c1_us`: the same answer as socket reads (HTTP chunk framing included) through
  the lean client's `Exchange.on_data`: framing, SSE splitting, decoding and stamping per read.

The streams are benchmarks/decode_bench.py's (256 tokens with cumulative usage). Compare trees
by alternating them in one sitting, pinned to one core:

    taskset -c 0 .venv/bin/python benchmarks/decoder_bench.py /tmp/tree-before
    taskset -c 0 .venv/bin/python benchmarks/decoder_bench.py /tmp/tree-after
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

REPEAT, ROUNDS = 100, 7


def bodies(db: Any, odd: bool) -> list[bytes]:
    """The SSE bytes of each read of one answer (its HTTP chunk framing removed)."""
    out = []
    for r in db.stream(256, 1, odd)[1:]:
        body = r.split(b"\r\n", 1)[1].rsplit(b"\r\n", 1)[0]
        out.append(body.split(b"\r\n0\r\n")[0])
    return out


def main(tree: str) -> None:
    sys.path.insert(0, tree)
    sys.path.insert(0, tree + "/benchmarks")
    import decode_bench as db  # the tree's own copy: its streams, its harness

    from harness.client.fasthttp import Exchange
    from harness.client.openai import StreamDecoder
    from harness.client.sse import SSESplitter

    odd = [ev.data for b in bodies(db, True) for ev in SSESplitter().feed(b)]
    vllm = bodies(db, False)

    def on_event() -> float:
        t = time.process_time()
        for _ in range(REPEAT):
            d = StreamDecoder()
            for e in odd:
                d.on_event(e)
        return (time.process_time() - t) / REPEAT / len(odd) * 1e6

    def on_region() -> float:
        t = time.process_time()
        for _ in range(REPEAT):
            d = StreamDecoder()
            toks: list[int] = []
            for b in vllm:
                d.on_region(b, toks)
        return (time.process_time() - t) / REPEAT / len(vllm) * 1e6

    reads = db.stream(256, 1, False)

    class Counters:
        output_tokens = 0

    def on_data() -> float:
        loop = asyncio.new_event_loop()
        t = time.process_time()
        for _ in range(REPEAT):
            ex = Exchange(0, Counters(), loop.create_future())
            for r in reads:
                ex.on_data(r)
        dt = time.process_time() - t
        assert ex.dec.done and ex.error is None
        loop.close()
        return dt / REPEAT / len(reads) * 1e6

    out = {
        "tree": tree,
        "odd_on_event_us": round(min(on_event() for _ in range(ROUNDS)), 4),
        "vllm_on_region_c1_us": round(min(on_region() for _ in range(ROUNDS)), 4),
        "vllm_on_data_c1_us": round(min(on_data() for _ in range(ROUNDS)), 4),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
