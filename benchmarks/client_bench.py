"""Client benchmarks: the harness against the plain aiohttp client, in one run, against the
truth server. Each measurement prints a JSON line and the run ends with a markdown table.

    /tmp/venv/bin/python benchmarks/client_bench.py [--only ceiling,paced,rate,rate_open,timing,timing_open,workers,progress]
                                                    [--duration 8] [--json out.json]
                                                    [--clients fast,aiohttp]

Client and server are pinned to different cores with `taskset` where there are two or more
(client core 0, server core 1). Goals (issue 8) and how each is measured:

- ceiling: server coalesces 16 tokens per write, unpaced, 256 tokens per stream, 32 and 256
  closed-loop streams; output tok/s of each client; goal harness >= 1.3x plain.
- paced: one token per write every 20 ms, 256 streams (12.8k tok/s offered); client CPU
  seconds per token (getrusage of the client process); goal <= 15 us.
- rate: request starts per core: 64 closed-loop streams of 1-token responses from a server
  that answers at once, so the client's per-request work is the bottleneck and no timer is
  involved; requests sent / client CPU seconds; goal 10k/s.
- rate_open: open loop at 1,000 and 10,000 requests/s (1-token responses): send lag p50/p99
  and client CPU (at low rates it includes the scheduler's wait for each intended time).
- timing: 256 paced streams (20 ms ITL, 50 ms TTFT) with the server's truth log: per-gap ITL
  error (client gap - server gap) p99 <= 1 ms; TTFT error = (client first token - server first
  write) + (server received - client sent), mean <= 2 ms, p99 <= 5 ms.
- timing_open: the timing load as an open-loop Poisson arrival (~256 streams in flight):
  send lag (timer granularity) and TTFT error when sends come from the schedule.
- workers: the ceiling load with --workers 1, 2 and 4 all on core 0: the cost of sharding
  (the N-core scaling itself needs N + 1 cores).
- progress: the ceiling load (64 streams) --quiet vs the live progress bar on a pseudo-terminal
  vs the bar plus --prometheus-port, interleaved: the cost of the live feed (issue 15).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
CPUS = os.cpu_count() or 1


def pin(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if CPUS >= 2 and _has("taskset") else []


def _has(cmd: str) -> bool:
    return any((Path(d) / cmd).exists() for d in os.environ.get("PATH", "").split(":"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def truth_server(*args: str, truth_out: Path | None = None) -> Iterator[str]:
    port = free_port()
    cmd = [*pin(1), PY, str(REPO / "benchmarks" / "truth_server.py"), "--port", str(port), *args]
    if truth_out:
        cmd += ["--truth-out", str(truth_out)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        p.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
        if p.stdout is not None:
            p.stdout.close()


SCENARIO = """
name = "bench"
seed = 1
[workload]
prompt_tokens = {{ dist = "fixed", value = 8 }}
output_tokens = {{ dist = "fixed", value = {tokens} }}
[[phases]]
name = "main"
duration = "{duration}s"
arrival = {arrival}
"""


def run_harness(
    url: str,
    tmp: Path,
    tokens: int,
    duration: float,
    arrival: str,
    extra: list[str] = (),
    name: str = "h",
    quiet: bool = True,
) -> dict[str, Any]:
    """One harness run; quiet=False puts its stderr on a pseudo-terminal, so the live progress
    bar is drawn as on a person's terminal (and drained here)."""
    scn = tmp / f"{name}.toml"
    scn.write_text(SCENARIO.format(tokens=tokens, duration=duration, arrival=arrival))
    out = tmp / f"{name}.json"
    cmd = [
        *pin(0),
        PY,
        "-m",
        "harness",
        "run",
        str(scn),
        "--target",
        url,
        "--model",
        "m",
        "--no-probe",
        *(["--quiet"] if quiet else []),
        "--out",
        str(out),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if quiet:
        subprocess.run(cmd, cwd=tmp, check=False, stdout=subprocess.DEVNULL, env=env)
    else:
        import pty
        import threading

        master, slave = pty.openpty()
        drained: list[bytes] = []

        def drain() -> None:
            with contextlib.suppress(OSError):
                while chunk := os.read(master, 65536):
                    drained.append(chunk)

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        subprocess.run(
            cmd,
            cwd=tmp,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=slave,
            env={**env, "COLUMNS": "120"},
        )
        os.close(slave)
        t.join(timeout=2)
        os.close(master)
        assert b"\r\x1b[2K" in b"".join(drained), "the progress bar was not drawn"
    r = json.loads(out.read_text())
    s = r["summary"]
    toks = s["tokens"]["output_total"]
    cpu = r["client"]["cpu_s"]
    return {
        "client": "harness " + " ".join(extra),
        "tokens": toks,
        "tok_per_s": s["throughput"]["output_tokens_per_s"],
        "requests": s["requests"]["completed"],
        "cpu_s": cpu,
        "cpu_us_per_token": cpu / max(toks, 1) * 1e6,
        "result": str(out),
        "send_lag_p99_ms": s["latency_ms"]["send_lag"]["p99"],
        "sent": s["requests"]["sent"],
        "errors": s["errors"],
    }


def run_plain(url: str, streams: int, duration: float, tokens: int) -> dict[str, Any]:
    cmd = [
        *pin(0),
        PY,
        str(REPO / "benchmarks" / "plain_client.py"),
        url,
        "--streams",
        str(streams),
        "--duration",
        str(duration),
        "--max-tokens",
        str(tokens),
    ]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def closed(n: int) -> str:
    return f'{{ process = "closed", users = {n} }}'


def against_plain(
    url: str, tmp: Path, n: int, tokens: int, d: float, tag: str
) -> list[dict[str, Any]]:
    """The plain client, then each harness client, on the same server: n closed-loop streams of
    `tokens` tokens. Each harness row carries its tok/s and CPU-per-token ratios to plain."""
    plain = run_plain(url, n, d, tokens)
    rows = []
    for client in CLIENTS:
        h = run_harness(
            url, tmp, tokens, d, closed(n), ["--http-client", client], f"{tag}{n}{client}"
        )
        h.update(
            streams=n,
            ratio_vs_plain=h["tok_per_s"] / plain["tok_per_s"],
            cpu_ratio_vs_plain=h["cpu_us_per_token"] / plain["cpu_us_per_token"],
        )
        rows.append(h)
    return [*rows, {**plain, "streams": n}]


def bench_ceiling(tmp: Path, d: float) -> list[dict[str, Any]]:
    with truth_server("--coalesce", "16") as url:
        return [row for n in (32, 256) for row in against_plain(url, tmp, n, 256, d, "c")]


def bench_paced(tmp: Path, d: float) -> list[dict[str, Any]]:
    with truth_server("--coalesce", "1", "--itl-ms", "20") as url:
        return against_plain(url, tmp, 256, 64, d, "p")


def bench_rate(tmp: Path, d: float, users: int = 64) -> list[dict[str, Any]]:
    """Request starts per core: a closed loop of `users` streams against a server that answers
    at once with one token, so the client's own per-request work is the bottleneck (its core
    busy ~100 %, checked by `client_busy`) and no timer or schedule is involved. Starts per core
    = requests sent / client CPU seconds (getrusage of the client process over the run)."""
    rows = []
    with truth_server("--coalesce", "1") as url:
        for client in CLIENTS:
            h = run_harness(url, tmp, 1, d, closed(users), ["--http-client", client], f"r{client}")
            r = json.loads(Path(h["result"]).read_text())
            sent = r["summary"]["requests"]["sent"]
            window = r["summary"]["throughput"]["window_s"]
            h.update(
                users=users,
                cpu_us_per_request=h["cpu_s"] / max(sent, 1) * 1e6,
                started_per_cpu_s=sent / max(h["cpu_s"], 1e-9),
                started_per_wall_s=sent / max(window, 1e-9),
                client_busy=h["cpu_s"] / max(window, 1e-9),
            )
            rows.append(h)
    return rows


def bench_rate_open(
    tmp: Path, d: float, rates: tuple[float, ...] = (1000.0, 10000.0)
) -> list[dict[str, Any]]:
    """Open loop (one-token responses) at 1,000/s and at the goal's 10,000/s: does one core send
    every request on time (send lag p50/p99, requests sent vs offered), and how busy is it?
    At low rates the CPU includes the scheduler's wait: uvloop timers have 1 ms resolution and
    fire up to ~1 ms early, and the engine yields to the loop (`sleep(0)`, reads still served)
    until the clock reaches the intended time, so idle time between sends shows as CPU; it is
    not a per-request cost (see `rate` for that)."""
    rows = []
    with truth_server("--coalesce", "1") as url:
        for client in CLIENTS:
            for rate in rates:
                h = run_harness(
                    url,
                    tmp,
                    1,
                    d,
                    f'{{ process = "constant", rate = {rate} }}',
                    ["--http-client", client],
                    f"ro{client}{int(rate)}",
                )
                r = json.loads(Path(h["result"]).read_text())
                sent = r["summary"]["requests"]["sent"]
                window = r["summary"]["throughput"]["window_s"]
                h.update(
                    offered_per_s=rate,
                    cpu_us_per_request=h["cpu_s"] / max(sent, 1) * 1e6,
                    send_lag_p50_ms=r["summary"]["latency_ms"]["send_lag"]["p50"],
                    started_per_wall_s=sent / max(window, 1e-9),
                    client_busy=h["cpu_s"] / max(window, 1e-9),
                )
                rows.append(h)
    return rows


CLIENTS = ["fast", "aiohttp"]


def bench_timing(tmp: Path, d: float, n: int = 256) -> list[dict[str, Any]]:
    """Closed loop, n streams: every user sends its next request as the previous one ends."""
    rows = []
    for client in CLIENTS:
        truth_path = tmp / f"truth-{client}.json"
        with truth_server(
            "--coalesce", "1", "--itl-ms", "20", "--ttft-ms", "50", truth_out=truth_path
        ) as url:
            h = run_harness(url, tmp, 64, d, closed(n), ["--http-client", client], f"t{client}")
        rows.append({**h, **timing_errors(Path(h["result"]), truth_path), "streams": n})
    return rows


def bench_timing_open(tmp: Path, d: float, n: int = 256) -> list[dict[str, Any]]:
    """Open loop at the rate that keeps about n streams in flight (64 tokens at 20 ms plus a
    50 ms TTFT: 1.31 s per request), so intended send times come from timers: send lag
    (sent - intended) shows the timer granularity, TTFT error the send path."""
    rows = []
    rate = n / (0.05 + 64 * 0.02)
    for client in CLIENTS:
        truth_path = tmp / f"truth-open-{client}.json"
        with truth_server(
            "--coalesce", "1", "--itl-ms", "20", "--ttft-ms", "50", truth_out=truth_path
        ) as url:
            h = run_harness(
                url,
                tmp,
                64,
                d,
                f'{{ process = "poisson", rate = {rate:.1f} }}',
                ["--http-client", client],
                f"to{client}",
            )
        r = json.loads(Path(h["result"]).read_text())
        lag = r["summary"]["latency_ms"]["send_lag"]
        rows.append(
            {
                **h,
                **timing_errors(Path(h["result"]), truth_path),
                "rate": rate,
                "send_lag_p50_ms": lag["p50"],
                "send_lag_mean_ms": lag["mean"],
            }
        )
    return rows


def timing_errors(result: Path, truth_path: Path) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from harness.record.journal import read_journal

    truth = json.loads(truth_path.read_text())
    j = read_journal(result.with_name(result.stem + ".journal.jsonl"))
    t0, prefix = j.end["t0_ns"], j.end["request_id_prefix"]
    itl_err, ttft_err, detect, send = [], [], [], []
    for rec in j.records:
        t = truth.get(f"{prefix}-{rec.seq}-{rec.attempt}")
        if t is None or not rec.ok or rec.sent_ns is None:
            continue
        writes = (
            np.asarray(
                [w for w, k in zip(t["writes_ns"], t["tokens"], strict=True) if k], dtype=np.int64
            )
            - t0
        )
        got = np.asarray(rec.chunk_ns, dtype=np.int64)
        if len(writes) != len(got):
            continue
        d_first = got[0] - writes[0]
        d_send = (t["received_ns"] - t0) - rec.sent_ns
        detect.append(d_first)
        send.append(d_send)
        ttft_err.append(d_first + d_send)
        itl_err.extend((np.diff(got) - np.diff(writes)).tolist())
    itl = np.abs(np.asarray(itl_err, dtype=np.float64)) / 1e6
    tt = np.asarray(ttft_err, dtype=np.float64) / 1e6
    return {
        "matched_requests": len(ttft_err),
        "itl_abs_err_p50_ms": float(np.percentile(itl, 50)),
        "itl_abs_err_p99_ms": float(np.percentile(itl, 99)),
        "ttft_err_mean_ms": float(tt.mean()),
        "ttft_err_p99_ms": float(np.percentile(tt, 99)),
        "first_token_detect_mean_ms": float(np.mean(detect) / 1e6),
        "send_path_mean_ms": float(np.mean(send) / 1e6),
    }


def bench_workers(tmp: Path, d: float) -> list[dict[str, Any]]:
    """The cost of sharding: the ceiling load run by 1, 2 and 4 worker processes that all share
    core 0 (taskset is inherited by the spawned workers; the server keeps core 1). The client
    is CPU-bound in every case, so tok/s with N workers / tok/s with 1 is the share of the core
    left for requests once N loops, N pools and the parent's merge are paid for: with N free
    cores, N workers reach at most that ratio times N the one-process ceiling. (The scaling
    itself needs N + 1 cores; this machine has 2.)"""
    rows = []
    with truth_server("--coalesce", "16") as url:
        base = 0.0
        for w in (1, 2, 4):
            h = run_harness(url, tmp, 256, d, closed(64), ["--workers", str(w)], f"w{w}")
            base = base or h["tok_per_s"]
            h.update(workers=w, ratio_vs_1_worker_same_core=h["tok_per_s"] / base)
            rows.append(h)
    return rows


def bench_progress(tmp: Path, d: float, rounds: int = 3) -> list[dict[str, Any]]:
    """The cost of the live progress bar and of the live Prometheus metrics on the hot path:
    the ceiling load (64 closed-loop streams of 256 tokens, 16 per write, unpaced: the client's
    core is the bottleneck, so any extra work shows as fewer tok/s and more CPU per token) run
    --quiet, with the bar drawn on a pseudo-terminal, and with the bar plus --prometheus-port,
    interleaved for `rounds` rounds so drift in the machine's load hits all three alike."""
    modes = {
        "quiet": ([], True),
        "bar": ([], False),
        "bar+prometheus": (["--prometheus-port", "0"], False),
    }
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with truth_server("--coalesce", "16") as url:
        for i in range(rounds):
            for m, (extra, quiet) in modes.items():
                rows[m].append(
                    run_harness(
                        url,
                        tmp,
                        256,
                        d,
                        closed(64),
                        ["--http-client", CLIENTS[0], *extra],
                        f"pg{i}{m.replace('+', '')}",
                        quiet=quiet,
                    )
                )
    base_tps = float(np.median([r["tok_per_s"] for r in rows["quiet"]]))
    base_cpu = float(np.median([r["cpu_us_per_token"] for r in rows["quiet"]]))
    out = []
    for m, rs in rows.items():
        tps = float(np.median([r["tok_per_s"] for r in rs]))
        cpu = float(np.median([r["cpu_us_per_token"] for r in rs]))
        out.append(
            {
                "mode": m,
                "client": CLIENTS[0],
                "rounds": rounds,
                "tok_per_s_median": tps,
                "cpu_us_per_token_median": cpu,
                "tok_per_s_vs_quiet": tps / base_tps,
                "cpu_per_token_vs_quiet": cpu / base_cpu,
                "tok_per_s_each": [r["tok_per_s"] for r in rs],
                "cpu_us_per_token_each": [r["cpu_us_per_token"] for r in rs],
            }
        )
    return out


BENCHES = {
    "ceiling": bench_ceiling,
    "paced": bench_paced,
    "rate": bench_rate,
    "rate_open": bench_rate_open,
    "timing": bench_timing,
    "timing_open": bench_timing_open,
    "workers": bench_workers,
    "progress": bench_progress,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(BENCHES))
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--json")
    p.add_argument(
        "--clients",
        default="fast,aiohttp",
        help="harness HTTP clients measured by ceiling/paced/rate/timing (default both)",
    )
    a = p.parse_args()
    CLIENTS[:] = a.clients.split(",")
    out: dict[str, Any] = {
        "machine": {"cpus": CPUS, "loadavg_start": os.getloadavg()},
        "python": sys.version.split()[0],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    with tempfile.TemporaryDirectory() as td:
        for name in a.only.split(","):
            rows = BENCHES[name](Path(td), a.duration)
            for r in rows:
                r.pop("result", None)
            out[name] = rows
            print(json.dumps({name: rows}), flush=True)
    out["machine"]["loadavg_end"] = os.getloadavg()
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
