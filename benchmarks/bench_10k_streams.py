"""Hold N (default 10,000) concurrent open SSE streams in one run against the simulator, and
measure the client's memory per open stream.

The simulator runs in its own process, slowed down (`--speedup 0.02`: the model clock runs 50x
slower than real time) so that every stream stays open, waiting for its tokens, while the rest
arrive. The client is the real `run` path (`harness.orchestrate.run.run_command`) in this process; a
sampler thread reads this process's RSS and the engine's live in-flight count every 100 ms.

    memory per open stream = (RSS at peak in flight - RSS just before the first send) / peak in flight

Usage:
    python benchmarks/bench_10k_streams.py                 # 10,000 streams
    python benchmarks/bench_10k_streams.py --streams 2000  # a quicker check
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.client import engine as engine_mod  # noqa: E402
from harness.orchestrate import run as runner  # noqa: E402
from harness.orchestrate import run_engine  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--streams", type=int, default=10_000)
    ap.add_argument(
        "--send-s", type=float, default=10.0, help="send all streams over this many seconds"
    )
    ap.add_argument("--hold-s", type=float, default=5.0, help="then keep them open this long")
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.streams + 1000  # sockets per process (the simulator inherits the limit)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(need, soft), hard), hard))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit < need:
        print(f"open-file limit {limit} < {need}: raise it (ulimit -n {need})", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="bench10k-"))
    port = free_port()
    # Tokens every ~0.5 s of wall time or slower: streams stay open until the run is stopped.
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "sim",
            "--port",
            str(port),
            "--speedup",
            "0.02",
            "--max-num-seqs",
            str(args.streams + 16),
            "--max-num-batched-tokens",
            "65536",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "sim.log", "wb"),  # noqa: SIM115
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        rate = args.streams / args.send_s
        scn = tmp / "s.toml"
        scn.write_text(f"""
name = "bench10k"
seed = 1
[workload]
prompt_tokens = {{ dist = "fixed", value = 32 }}
output_tokens = {{ dist = "fixed", value = 4000 }}
[[phases]]
name = "open"
requests = {args.streams}
arrival = {{ process = "constant", rate = {rate} }}
max_concurrency = {args.streams}
""")
        counters: list[engine_mod.Counters] = []

        class Tracked(engine_mod.Counters):
            def __init__(self, *a: object, **kw: object) -> None:
                super().__init__(*a, **kw)  # type: ignore[arg-type]
                counters.append(self)

        run_engine.Counters = Tracked  # type: ignore[misc]  # the one-process engine's counters
        samples: list[tuple[float, int, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                c = counters[0] if counters else None
                samples.append((time.monotonic(), c.in_flight if c else -1, rss_bytes()))
                if c and c.sent >= args.streams and not hasattr(sample, "full"):
                    sample.full = time.monotonic()  # type: ignore[attr-defined]
                if hasattr(sample, "full") and time.monotonic() - sample.full > args.hold_s:  # type: ignore[attr-defined]
                    os.kill(os.getpid(), signal.SIGINT)  # stop: in-flight streams are cancelled
                    return
                time.sleep(0.1)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        t0 = time.monotonic()
        rc = runner.run_command(
            runner.RunArgs(
                scenario=str(scn),
                target=url,
                out=str(tmp / "r.json"),
                quiet=True,
                probe=False,
                grace_s=0.0,
            )
        )
        stop.set()
        th.join()
        wall = time.monotonic() - t0
    finally:
        sim.send_signal(signal.SIGTERM)
        try:
            sim.wait(20)
        except subprocess.TimeoutExpired:
            sim.kill()
    before = [s for s in samples if s[1] <= 0]
    base_rss = before[-1][2] if before else samples[0][2]
    peak = max(samples, key=lambda s: (s[1], s[2]))
    peak_rss = max(s[2] for s in samples if s[1] >= peak[1] * 0.99)
    per_stream = (peak_rss - base_rss) / max(peak[1], 1)
    import orjson

    r = orjson.loads((tmp / "r.json").read_bytes())
    errors = r["summary"]["errors"]
    print(f"streams requested      {args.streams}")
    print(f"peak open streams      {peak[1]}")
    print(f"RSS before first send  {base_rss / 2**20:.1f} MiB")
    print(f"RSS at peak            {peak_rss / 2**20:.1f} MiB")
    print(f"memory per open stream {per_stream / 1024:.1f} KiB")
    print(f"errors                 {errors}  (cancelled = open at the stop, as intended)")
    print(f"send lag p99           {r['summary']['latency_ms']['send_lag']['p99']:.1f} ms")
    print(f"run exit {rc}, wall {wall:.1f} s, open-file limit {limit}, results in {tmp}")
    return 0 if peak[1] >= args.streams * 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())
