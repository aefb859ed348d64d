"""The reference: a plain aiohttp + uvloop + orjson streaming client, the best one can do in a
few dozen lines with aiohttp. Benchmarks measure the harness against it in the same run.

    python benchmarks/plain_client.py URL --streams 32 --duration 10 --max-tokens 256

N streams in a closed loop for D seconds; each reads with `readany()`, splits on blank lines,
parses every event with orjson and counts content tokens. Prints one JSON line: tokens, tok/s,
requests, process CPU seconds and CPU per token. With `--records FILE` it also sends an
X-Request-Id, stamps every read (`perf_counter_ns`, once per read, as a timing client must) and
writes one JSON line per request: {"rid", "sent_ns", "stamps_ns": [one per content event]}.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time

import aiohttp
import orjson
import uvloop


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def main(a: argparse.Namespace) -> dict[str, float]:
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": a.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    url = a.url.rstrip("/") + "/v1/chat/completions"
    totals = {"tokens": 0, "requests": 0}
    records: list[dict[str, object]] = []
    stamp = time.perf_counter_ns
    timed = a.records is not None  # without --records: no stamps, as in the ceiling runs
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, read_bufsize=1 << 18) as session:
        stop_at = time.perf_counter() + a.duration

        async def stream() -> None:
            while time.perf_counter() < stop_at:
                headers = {"Content-Type": "application/json"}
                stamps: list[int] = []
                if timed:
                    rid = f"plain-{len(records)}"
                    headers["X-Request-Id"] = rid
                    records.append({"rid": rid, "sent_ns": stamp(), "stamps_ns": stamps})
                async with session.post(url, data=body, headers=headers) as r:
                    buf = b""
                    while True:
                        data = await r.content.readany()
                        now = stamp() if timed else 0
                        if not data:
                            break
                        buf += data
                        *events, buf = buf.split(b"\n\n")
                        for ev in events:
                            payload = ev[6:]
                            if payload == b"[DONE]":
                                continue
                            obj = orjson.loads(payload)
                            ch = obj.get("choices")
                            if ch and (ch[0].get("delta", {}).get("content") or ch[0].get("text")):
                                totals["tokens"] += 1
                                if timed:
                                    stamps.append(now)
                totals["requests"] += 1

        c0, t0 = cpu_s(), time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(a.streams)))
        c1, t1 = cpu_s(), time.perf_counter()
    wall = t1 - t0
    if a.records:
        with open(a.records, "wb") as f:
            f.writelines(orjson.dumps(r) + b"\n" for r in records)
    return {
        "client": "plain-aiohttp",
        "streams": a.streams,
        "tokens": totals["tokens"],
        "requests": totals["requests"],
        "wall_s": wall,
        "tok_per_s": totals["tokens"] / wall,
        "cpu_s": c1 - c0,
        "cpu_us_per_token": (c1 - c0) / max(totals["tokens"], 1) * 1e6,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--records", help="write per-request stamps here (JSON lines)")
    out = uvloop.run(main(p.parse_args()))
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
