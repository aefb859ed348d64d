"""Peers: the harness, the plain aiohttp client, AIPerf, GuideLLM and vLLM's `bench serve`
client on the same loads, in one invocation, judged by the same outside measures.

    /tmp/venv/bin/python benchmarks/peer_bench.py [--loads ceiling32,ceiling256,paced256]
        [--clients harness,plain,aiperf,aiperf8,guidellm,vllm] [--duration 10]
        [--venvs /tmp] [--json out.json]

Every client runs pinned to core 0 (`taskset`, inherited by its child processes), the truth
server (`truth_server.py`, logging when it wrote each token) on core 1. No client's own report
is trusted for speed or cost; each is judged from outside, in the steady middle of its run
(from 1.5 s after the server received its first request to 0.5 s before its last write):

- tok/s: tokens the server wrote in that window / the window;
- client CPU per token: the CPU time of the client's whole process tree in the window
  (sampled every 100 ms; every process of a multi-process tool counts, its start-up does not)
  / tokens written in the window. Core busy fractions from /proc/stat are kept to show which
  side was saturated, not as a cost: they are tick-sampled, and a load paced by 1 ms timers
  aliases with the tick (core-0 jiffies per token ranged 6.7-15 us for the same client);
- timing (paced load): each client's own per-request TTFT and per-chunk gaps, matched to the
  server's log by request id (X-Request-Id: harness, plain, AIPerf, vLLM) or by prompt text
  (GuideLLM sends no id). TTFT error = client TTFT - (server first write - server received);
  per-gap ITL error = client gap - server gap between the same two tokens. GuideLLM records
  no per-token times, so it has no per-gap figure.

Loads: ceilingN = N closed-loop streams, 256 tokens per request, 16 tokens per server write,
unpaced; paced256 = 256 closed-loop streams, 64 tokens, one token per write every 20 ms,
first write 50 ms after the request (12.8k tok/s offered).

Peers run from their own virtual environments under --venvs (`venv-aiperf`, `venv-guidellm`,
`venv-vllm`; install commands in BENCHMARKS.md). They need a tokenizer: a tiny WordLevel one is
built offline into the work directory with the `tokenizers` library. A peer whose venv is
missing, or whose run fails, is reported as such, never left out silently.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_bench import PY, REPO, closed, pin, truth_server  # noqa: E402

MODEL = "truth-model"
LOADS: dict[str, dict[str, Any]] = {
    "ceiling32": {"streams": 32, "tokens": 256, "server": ["--coalesce", "16"]},
    "ceiling256": {"streams": 256, "tokens": 256, "server": ["--coalesce", "16"]},
    "paced256": {
        "streams": 256,
        "tokens": 64,
        "server": ["--coalesce", "1", "--itl-ms", "20", "--ttft-ms", "50"],
    },
    "paced1000": {
        "streams": 1000,
        "tokens": 64,  # the "1,000 streams at 50 tok/s"
        "server": ["--coalesce", "1", "--itl-ms", "20", "--ttft-ms", "50"],
    },
}
WARM_S, COOL_S = 1.5, 0.5


# ---------------------------------------------------------------------------------------------
# Outside measures: core busy time and the server's log


class Sampler:
    """Every 100 ms, in a thread of this (otherwise idle) process, stamped with perf_counter_ns
    (the server's clock): the CPU time of the client's whole process tree (utime + stime of
    every descendant of the client's first process, the last value seen kept for a process
    that has exited; the kernel scales these to its exact per-task run time) and the busy
    jiffies of cores 0 and 1 (/proc/stat: user + nice + system + irq + softirq; tick-sampled,
    and including kernel work done on the core for nobody in particular, such as loopback ACK
    processing)."""

    def __init__(self) -> None:
        self.t: list[int] = []
        self.rows: list[tuple[float, float, float]] = []
        self.root = 0
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.hz = os.sysconf("SC_CLK_TCK")

    def _cores(self) -> tuple[float, float]:
        out = []
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith(("cpu0 ", "cpu1 ")):
                    v = [int(x) for x in line.split()[1:8]]
                    out.append((v[0] + v[1] + v[2] + v[5] + v[6]) / self.hz)
        return out[0], out[1] if len(out) > 1 else 0.0

    def _tree(self) -> float:
        if not self.root:
            return 0.0
        parent, cpu = {}, {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    f_ = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(d)
            parent[pid] = int(f_[1])
            cpu[pid] = (int(f_[11]) + int(f_[12])) / self.hz
        for pid, c in cpu.items():
            q = pid
            while q > 1 and q != self.root:
                q = parent.get(q, 0)
            if q == self.root:
                self.seen[pid] = c
        return sum(self.seen.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            c0, c1 = self._cores()
            self.rows.append((self._tree(), c0, c1))
            self.t.append(time.perf_counter_ns())
            time.sleep(0.1)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def seconds(self, column: int, a_ns: int, b_ns: int) -> float:
        t = np.asarray(self.t, dtype=np.float64)
        v = np.asarray([r[column] for r in self.rows], dtype=np.float64)
        return float(np.interp(b_ns, t, v) - np.interp(a_ns, t, v))


def steady(truth: dict[str, Any], cpu: Sampler) -> dict[str, Any]:
    """tok/s and client CPU per token over the steady window of the server's log."""
    recv = [r["received_ns"] for r in truth.values()]
    writes = np.concatenate([np.asarray(r["writes_ns"], dtype=np.int64) for r in truth.values()])
    toks = np.concatenate([np.asarray(r["tokens"], dtype=np.int64) for r in truth.values()])
    a, b = min(recv) + int(WARM_S * 1e9), int(writes.max()) - int(COOL_S * 1e9)
    if b <= a:
        return {"window_s": 0.0}
    inside = (writes >= a) & (writes < b)
    n = int(toks[inside].sum())
    span = (b - a) / 1e9
    tree, core0, core1 = (cpu.seconds(i, a, b) for i in range(3))
    return {
        "window_s": span,
        "tokens_in_window": n,
        "tok_per_s": n / span,
        "client_cpu_busy": tree / span,
        "cpu_us_per_token": tree / max(n, 1) * 1e6,
        "core0_busy": core0 / span,
        "server_core_busy": core1 / span,
    }


def timing(
    truth: dict[str, Any], per_request: dict[str, tuple[float, list[float] | None]]
) -> dict[str, Any]:
    """Per-request TTFT error and per-gap ITL error (ms) against the server's log."""
    ttft_err, gap_err, n_gaps = [], [], 0
    for rid, (ttft_ms, gaps_ms) in per_request.items():
        t = truth.get(rid)
        if t is None:
            continue
        w = np.asarray(
            [x for x, k in zip(t["writes_ns"], t["tokens"], strict=True) if k], dtype=np.int64
        )
        if len(w) == 0:
            continue
        ttft_err.append(ttft_ms - (w[0] - t["received_ns"]) / 1e6)
        if gaps_ms is not None and len(gaps_ms) == len(w) - 1:
            gap_err.append(np.asarray(gaps_ms) - np.diff(w) / 1e6)
            n_gaps += 1
    out: dict[str, Any] = {"matched_requests": len(ttft_err), "requests_with_gaps": n_gaps}
    if ttft_err:
        tt = np.asarray(ttft_err)
        out.update(ttft_err_mean_ms=float(tt.mean()), ttft_err_p99_ms=float(np.percentile(tt, 99)))
    if gap_err:
        g = np.abs(np.concatenate(gap_err))
        out.update(
            itl_abs_err_p50_ms=float(np.percentile(g, 50)),
            itl_abs_err_p99_ms=float(np.percentile(g, 99)),
        )
    return out


# ---------------------------------------------------------------------------------------------
# The clients: each returns (command, parse), parse() giving {request id: (TTFT ms, gaps ms)}

Parse = Callable[[], dict[str, tuple[float, list[float] | None]]]


def harness_client(
    url: str, load: dict[str, Any], d: float, work: Path, tok: Path
) -> tuple[list[str], Parse]:
    from client_bench import SCENARIO

    scn = work / "h.toml"
    scn.write_text(
        SCENARIO.format(tokens=load["tokens"], duration=d, arrival=closed(load["streams"]))
    )
    out = work / "h.json"
    cmd = [
        PY,
        "-m",
        "harness",
        "run",
        str(scn),
        "--target",
        url,
        "--model",
        MODEL,
        "--no-probe",
        "--quiet",
        "--out",
        str(out),
    ]

    def parse() -> dict[str, tuple[float, list[float] | None]]:
        sys.path.insert(0, str(REPO))
        from harness.record.journal import read_journal

        j = read_journal(out.with_name(out.stem + ".journal.jsonl"))
        prefix, res = j.end["request_id_prefix"], {}
        for r in j.records:
            if r.ok and r.sent_ns is not None and r.chunk_ns:
                c = np.asarray(r.chunk_ns, dtype=np.int64)
                res[f"{prefix}-{r.seq}-{r.attempt}"] = (
                    (c[0] - r.sent_ns) / 1e6,
                    (np.diff(c) / 1e6).tolist(),
                )
        return res

    return cmd, parse


def plain_client(
    url: str, load: dict[str, Any], d: float, work: Path, tok: Path
) -> tuple[list[str], Parse]:
    rec = work / "plain.jsonl"
    cmd = [
        PY,
        str(REPO / "benchmarks" / "plain_client.py"),
        url,
        "--streams",
        str(load["streams"]),
        "--duration",
        str(d),
        "--max-tokens",
        str(load["tokens"]),
        "--records",
        str(rec),
    ]

    def parse() -> dict[str, tuple[float, list[float] | None]]:
        res = {}
        for line in rec.read_text().splitlines():
            r = json.loads(line)
            s = np.asarray(r["stamps_ns"], dtype=np.int64)
            if len(s):
                res[r["rid"]] = ((s[0] - r["sent_ns"]) / 1e6, (np.diff(s) / 1e6).tolist())
        return res

    return cmd, parse


def aiperf_client(workers: int | None) -> Callable[..., tuple[list[str], Parse]]:
    def make(
        url: str, load: dict[str, Any], d: float, work: Path, tok: Path
    ) -> tuple[list[str], Parse]:
        art = work / "aiperf"
        cmd = [
            VENVS["aiperf"] + "/bin/aiperf",
            "profile",
            "--model",
            MODEL,
            "--url",
            url,
            "--endpoint-type",
            "chat",
            "--streaming",
            "--tokenizer",
            str(tok),
            "--concurrency",
            str(load["streams"]),
            "--benchmark-duration",
            str(d),
            "--isl",
            "8",
            "--osl",
            str(load["tokens"]),
            "--use-legacy-max-tokens",
            "--extra-inputs",
            "ignore_eos:true",
            "--use-server-token-count",
            "--ui",
            "none",
            "--artifact-dir",
            str(art),
        ]
        if workers:
            cmd += ["--workers-max", str(workers)]

        def parse() -> dict[str, tuple[float, list[float] | None]]:
            res = {}
            for f in art.rglob("profile_export.jsonl"):
                for line in f.read_text().splitlines():
                    r = json.loads(line)
                    m = r.get("metrics", {})
                    if "time_to_first_token" in m:
                        gaps = m.get("inter_chunk_latency", {}).get("value")
                        res[r["metadata"]["x_request_id"]] = (
                            m["time_to_first_token"]["value"],
                            gaps,
                        )
            return res

        return cmd, parse

    return make


def guidellm_client(
    url: str, load: dict[str, Any], d: float, work: Path, tok: Path
) -> tuple[list[str], Parse]:
    out = work / "guidellm.json"
    cmd = [
        VENVS["guidellm"] + "/bin/guidellm",
        "run",
        "--backend",
        f"kind=openai_http,target={url},model={MODEL}",
        "--profile",
        f"kind=concurrent,streams={load['streams']}",
        "--constraint",
        f"kind=max_duration,seconds={d:g}",
        "--tokenizer",
        f"kind=huggingface_auto,model={tok}",
        "--data",
        f"kind=synthetic_text,prompt_tokens=8,output_tokens={load['tokens']}",
        "--output",
        f"kind=json,path={out}",
    ]

    def parse() -> dict[str, tuple[float, list[float] | None]]:
        res = {}
        for b in json.loads(out.read_text())["benchmarks"]:
            for r in b["requests"]["successful"]:
                body = json.loads(r["request_args"])["body"]
                content = body["messages"][-1]["content"]
                if isinstance(content, list):
                    content = "".join(p.get("text", "") for p in content)
                t = r["info"]["timings"]
                if t.get("first_token_iteration") and t.get("request_start"):
                    res["c:" + content] = (
                        (t["first_token_iteration"] - t["request_start"]) * 1e3,
                        None,
                    )
        return res

    return cmd, parse


def vllm_client(
    url: str, load: dict[str, Any], d: float, work: Path, tok: Path
) -> tuple[list[str], Parse]:
    # `bench serve` takes a request count, not a duration: aim at ~d seconds from a rough rate
    # (paced: streams / 1.33 s per request; unpaced: vLLM's own client at ~200k tok/s).
    per_s = load["streams"] / 1.33 if "--itl-ms" in load["server"] else 200_000 / load["tokens"]
    n = max(load["streams"] * 2, int(per_s * d))
    cmd = [
        VENVS["vllm"] + "/bin/vllm",
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--base-url",
        url,
        "--model",
        MODEL,
        "--tokenizer",
        str(tok),
        "--dataset-name",
        "random",
        "--random-input-len",
        "8",
        "--random-output-len",
        str(load["tokens"]),
        "--ignore-eos",
        "--max-concurrency",
        str(load["streams"]),
        "--num-prompts",
        str(n),
        "--request-id-prefix",
        "vb-",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(work),
        "--result-filename",
        "vllm.json",
        "--disable-tqdm",
    ]

    def parse() -> dict[str, tuple[float, list[float] | None]]:
        r = json.loads((work / "vllm.json").read_text())
        res = {}
        for i, (ttft, itl, err) in enumerate(zip(r["ttfts"], r["itls"], r["errors"], strict=True)):
            if not err and ttft:
                res[f"vb-{i}"] = (ttft * 1e3, [x * 1e3 for x in itl])
        return res

    return cmd, parse


VENVS: dict[str, str] = {}
CLIENTS: dict[str, Callable[..., tuple[list[str], Parse]]] = {
    "harness": harness_client,
    "plain": plain_client,
    "aiperf": aiperf_client(None),
    "aiperf8": aiperf_client(8),
    "guidellm": guidellm_client,
    "vllm": vllm_client,
}
NEEDS = {"aiperf": "aiperf", "aiperf8": "aiperf", "guidellm": "guidellm", "vllm": "vllm"}


# ---------------------------------------------------------------------------------------------

_WORDS = (
    "the of and to in is was he for it with as his on be at by this had not are but from or "
    "have an they which one you were her all she there would their we him been has when who "
    "will more no if out so said what up its about into than them can only other new some "
    "could time these two may then do first any my now such like our over man me even most "
    "made after also did many before must through back years where much your way well down "
    "should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take "
    "three"
)
WORDS = _WORDS.split()


def build_tokenizer(path: Path) -> Path:
    """A tiny offline WordLevel tokenizer (Hugging Face format) the peers can load."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = [
        "[UNK]",
        "[PAD]",
        "<s>",
        "</s>",
        "tok",
        *"abcdefghijklmnopqrstuvwxyz",
        *WORDS,
        *"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        *"0123456789",
        *"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    ]
    t = Tokenizer(
        models.WordLevel({w: i for i, w in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]")
    )
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.decoder = decoders.WordPiece()
    path.mkdir(parents=True, exist_ok=True)
    t.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": 1000000,
                "unk_token": "[UNK]",
                "pad_token": "[PAD]",
                "bos_token": "<s>",
                "eos_token": "</s>",
            }
        )
    )
    (path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    return path


def run_one(name: str, load_name: str, d: float, work: Path, tok: Path) -> dict[str, Any]:
    load = LOADS[load_name]
    row: dict[str, Any] = {"client": name, "load": load_name, "streams": load["streams"]}
    venv = NEEDS.get(name)
    if venv and not Path(VENVS[venv]).exists():
        return {**row, "skipped": f"no venv at {VENVS[venv]}"}
    work.mkdir(parents=True, exist_ok=True)
    truth_path = work / "truth.json"
    with truth_server(*load["server"], truth_out=truth_path) as url:
        cmd, parse = CLIENTS[name](url, load, d, work, tok)
        env = {**os.environ, "NO_COLOR": "1"}
        if name in ("harness", "plain"):
            env["PYTHONPATH"] = str(REPO)
        if name in ("guidellm", "vllm"):  # no hub here; AIPerf then refuses a local tokenizer dir
            env["HF_HUB_OFFLINE"] = "1"
        t0 = time.perf_counter()
        with Sampler() as cpu, open(work / "client.log", "wb") as log:
            proc = subprocess.Popen(
                [*pin(0), *cmd], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT
            )
            cpu.root = proc.pid
            try:
                rc = proc.wait(timeout=d * 6 + 240)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
        row["wall_s"] = time.perf_counter() - t0
    row["rc"] = rc
    if rc != 0:
        row["error"] = (work / "client.log").read_text(errors="replace")[-600:]
    truth = json.loads(truth_path.read_text())
    if not truth:
        return {**row, "error": row.get("error", "no request reached the server")}
    row.update(steady(truth, cpu))
    if load_name.startswith("paced"):
        try:
            row.update(timing(truth, parse()))
        except (OSError, KeyError, ValueError) as e:
            row["timing_error"] = f"{type(e).__name__}: {e}"
    return row


def versions() -> dict[str, str]:
    out = {}
    for name, pkg in (("aiperf", "aiperf"), ("guidellm", "guidellm"), ("vllm", "vllm")):
        py = Path(VENVS[name]) / "bin" / "python"
        if py.exists():
            r = subprocess.run(
                [str(py), "-c", f"import importlib.metadata as m; print(m.version('{pkg}'))"],
                capture_output=True,
                text=True,
                check=False,
            )
            out[name] = r.stdout.strip() or "?"
    return out


def table(paths: list[str]) -> str:
    """One markdown row per client: medians over the given runs (JSON files of this script),
    with the range when there is more than one run, and the ratio to the harness in each run."""
    runs = [json.loads(Path(x).read_text()) for x in paths]
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        rows = {(r["client"], r["load"]): r for r in run["rows"]}
        for (client, load), r in rows.items():
            h = rows.get(("harness", load), {})
            r = {
                **r,
                "vs_harness_tok": r.get("tok_per_s", 0) / h["tok_per_s"]
                if h.get("tok_per_s")
                else None,
            }
            by.setdefault((client, load), []).append(r)

    def cell(client: str, load: str, key: str, fmt: str) -> str:
        vals = [r[key] for r in by.get((client, load), []) if r.get(key) is not None]
        if not vals:
            rs = by.get((client, load), [])
            return "failed" if any(r.get("rc") for r in rs) else ("not run" if not rs else "–")
        med = fmt.format(float(np.median(vals)))
        return med if len(vals) == 1 else f"{med} [{fmt.format(min(vals))}–{fmt.format(max(vals))}]"

    clients = list(dict.fromkeys(r["client"] for run in runs for r in run["rows"]))
    out = [
        "| client | tok/s, 32 / 256 streams (16 tokens per write) | client CPU per token, paced (µs) "
        "| ITL error p99, paced (ms) | TTFT error mean / p99, paced (ms) |",
        "|---|---|---|---|---|",
    ]
    for c in clients:
        out.append(
            f"| {c} | {cell(c, 'ceiling32', 'tok_per_s', '{:,.0f}')} / "
            f"{cell(c, 'ceiling256', 'tok_per_s', '{:,.0f}')} "
            f"| {cell(c, 'paced256', 'cpu_us_per_token', '{:.1f}')} "
            f"| {cell(c, 'paced256', 'itl_abs_err_p99_ms', '{:.2f}')} "
            f"| {cell(c, 'paced256', 'ttft_err_mean_ms', '{:+.2f}')} / "
            f"{cell(c, 'paced256', 'ttft_err_p99_ms', '{:+.2f}')} |"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--table",
        nargs="+",
        metavar="RUN.json",
        help="print the markdown table of earlier runs and exit",
    )
    p.add_argument("--loads", default="ceiling32,ceiling256,paced256")
    p.add_argument("--clients", default="harness,plain,aiperf,guidellm,vllm")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument(
        "--venvs", default="/tmp", help="folder holding venv-aiperf, venv-guidellm, venv-vllm"
    )
    p.add_argument("--json")
    a = p.parse_args()
    if a.table:
        print(table(a.table))
        return
    for k in ("aiperf", "guidellm", "vllm"):
        VENVS[k] = str(Path(a.venvs) / f"venv-{k}")
    if len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(0, {1})  # this driver (and its sampler) stays off the client's core
    out: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "versions": versions(),
        "duration_s": a.duration,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as td:
        tok = build_tokenizer(Path(td) / "tok")
        for load in a.loads.split(","):
            for client in a.clients.split(","):
                row = run_one(client, load, a.duration, Path(td) / f"{load}-{client}", tok)
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
                if a.json:
                    Path(a.json).write_text(json.dumps(out, indent=2))
    out["machine"]["loadavg_end"] = os.getloadavg()
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
