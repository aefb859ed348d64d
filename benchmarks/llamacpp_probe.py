"""Quick probe of llama.cpp's continuous batching on this machine, without the full harness.

For each --parallel value it starts llama-server (through harness.server.launcher), sends
`streams` concurrent streaming /v1/completions requests (default: as many as slots) of a fixed
output length (ignore_eos), and prints total tokens/s, per-request TTFT and inter-token
latency, and the server's own `llamacpp:` view. It answers one question fast: does adding
slots add throughput on this CPU, or only split it?

    /tmp/venv/bin/python benchmarks/llamacpp_probe.py --parallel 1 2 4 8 --max-tokens 128

Needs llama-server and the GGUF model (`bash scripts/install_llamacpp.sh`). Figures depend on
what else the machine is doing: the load average before and after each point is printed, and a
point measured under load from other processes should not be quoted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.server import launcher, llamacpp  # noqa: E402

WORDS = [
    "river",
    "stone",
    "cloud",
    "market",
    "lantern",
    "copper",
    "meadow",
    "signal",
    "harbor",
    "violet",
    "thunder",
    "garden",
    "engine",
    "paper",
    "orbit",
    "candle",
    "valley",
    "mirror",
    "falcon",
    "winter",
]


@dataclass
class Stream:
    sent: float = 0.0
    stamps: list[float] = field(default_factory=list)
    usage_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def ttft(self) -> float:
        return self.stamps[0] - self.sent

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]


def prompt_for(i: int, n_words: int) -> str:
    # Distinct from the first word on, so no request reuses another's cached prefix.
    return f"Request {i}: " + " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n_words))


async def one_stream(session: aiohttp.ClientSession, url: str, body: dict[str, object]) -> Stream:
    s = Stream()
    s.sent = time.perf_counter()
    async with session.post(url, json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            now = time.perf_counter()
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            obj = json.loads(line[6:])
            choices = obj.get("choices") or []
            if choices and choices[0].get("text"):
                s.stamps.append(now)
            usage = obj.get("usage")
            if usage:
                s.usage_tokens = usage["completion_tokens"]
                s.prompt_tokens = usage["prompt_tokens"]
    return s


async def run_round(
    base: str, n: int, max_tokens: int, prompt_words: int, seed: int
) -> dict[str, float]:
    url = base + "/v1/completions"
    bodies = [
        {
            "model": "probe",
            "prompt": prompt_for(seed * 1000 + i, prompt_words),
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
            "cache_prompt": False,
            "temperature": 0.8,
        }
        for i in range(n)
    ]
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        t0 = time.perf_counter()
        streams = await asyncio.gather(*(one_stream(session, url, b) for b in bodies))
        t1 = time.perf_counter()
    out_tokens = sum(s.usage_tokens for s in streams)
    chunks = sum(len(s.stamps) for s in streams)
    itls = [g for s in streams for g in s.itls]
    return {
        "streams": n,
        "wall_s": t1 - t0,
        "output_tokens": out_tokens,
        "content_chunks": chunks,
        "prompt_tokens_mean": statistics.fmean(s.prompt_tokens for s in streams),
        "total_tok_s": out_tokens / (t1 - t0),
        "ttft_mean_ms": 1e3 * statistics.fmean(s.ttft for s in streams),
        "ttft_max_ms": 1e3 * max(s.ttft for s in streams),
        "itl_mean_ms": 1e3 * statistics.fmean(itls),
        "itl_p50_ms": 1e3 * statistics.median(itls),
        "itl_p99_ms": 1e3 * sorted(itls)[int(0.99 * (len(itls) - 1))],
        "per_stream_tok_s": statistics.fmean(
            (len(s.stamps) - 1) / (s.stamps[-1] - s.stamps[0]) for s in streams
        ),
    }


def scrape(base: str) -> dict[str, float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:  # noqa: S310 - 127.0.0.1
        text = resp.read().decode()
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


def probe_point(
    parallel: int, streams: int, args: argparse.Namespace, logdir: Path
) -> dict[str, object]:
    server = llamacpp.resolve(
        parallel=parallel, port=args.port, ctx_per_slot=args.ctx_per_slot, threads=args.threads
    )
    load_before = os.getloadavg()
    with launcher.start_server(
        server.argv(),
        health_url=server.health_url,
        base_url=server.base_url,
        log_path=logdir / f"llama-server-p{parallel}.log",
        timeout_s=120,
        kind="llama.cpp",
    ):
        asyncio.run(run_round(server.origin, 1, 8, args.prompt_words, seed=999))  # warm-up
        scrape(server.origin)  # reset the server's per-scrape averages
        rounds = [
            asyncio.run(
                run_round(server.origin, streams, args.max_tokens, args.prompt_words, seed=r)
            )
            for r in range(args.rounds)
        ]
        metrics = scrape(server.origin)
    best = max(rounds, key=lambda r: r["total_tok_s"])
    return {
        "parallel": parallel,
        "streams": streams,
        "rounds": rounds,
        "best": best,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "server_metrics": {k: v for k, v in metrics.items() if not k.startswith("llamacpp:spec")},
    }


def machine() -> dict[str, object]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--streams", type=int, default=0, help="concurrent streams (0: = parallel)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ctx-per-slot", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--port", type=int, default=18181)
    ap.add_argument("--json", type=Path, default=None, help="also write all figures here")
    args = ap.parse_args()

    info = machine()
    print(f"# machine: {info['cpu']}, {info['cores']} cores; {info['platform']}")
    print(f"# command: {' '.join(sys.argv)}")
    points = []
    with tempfile.TemporaryDirectory(prefix="llamacpp-probe-") as tmp:
        for p in args.parallel:
            points.append(probe_point(p, args.streams or p, args, Path(tmp)))
            b = points[-1]["best"]
            print(
                f"parallel={p} streams={b['streams']}: {b['total_tok_s']:.1f} tok/s total, "
                f"ITL mean {b['itl_mean_ms']:.1f} ms, TTFT mean {b['ttft_mean_ms']:.0f} ms, "
                f"load {points[-1]['load_before'][0]:.2f}->{points[-1]['load_after'][0]:.2f}",
                flush=True,
            )
    print()
    print(
        "| --parallel | streams | total output tok/s | per-stream tok/s | ITL mean (ms) | "
        "ITL p99 (ms) | TTFT mean (ms) | busy slots/decode | load avg 1m |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pt in points:
        b = pt["best"]
        m = pt["server_metrics"]
        print(
            f"| {pt['parallel']} | {b['streams']} | {b['total_tok_s']:.1f} | "
            f"{b['per_stream_tok_s']:.1f} | {b['itl_mean_ms']:.1f} | {b['itl_p99_ms']:.1f} | "
            f"{b['ttft_mean_ms']:.0f} | {m.get('llamacpp:n_busy_slots_per_decode', 0):.2f} | "
            f"{pt['load_before'][0]:.2f} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"machine": info, "argv": sys.argv, "points": points}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
