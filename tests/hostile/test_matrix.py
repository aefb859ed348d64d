"""The hostile-server matrix: every misbehaviour of tests/hostile/server.py, on both HTTP
clients, through the real `run` command. Per mode and client it asserts:

- records: exactly one final record per planned request in the journal, a result that counts
  them all and says `complete` (or, where the mode's contract says so, a one-line refusal
  before the run);
- kinds: each record ends as the mode's contract says (server.MODES, docs/hostile.md);
- memory: the run's peak resident set stays under MAX_RSS_BYTES;
- traceback: no Python traceback, nor asyncio's "Task exception was never retrieved" & co.;
- terminal: no ESC byte nor any other C0/C1 control character in stdout and stderr;
- secrets: no piece of any secret beyond its visible prefix in anything written or printed,
  nor in any request that reached the other origin of a redirect;
- numbers: the result's figures are finite, throughput and token totals not negative, no
  more tokens than the bytes that crossed the wire could carry, and throughput counts no
  more than ASKED_MARGIN times the tokens asked for;
- hang: the run ends by itself within RUN_LIMIT_S.

The two clients run at once. Every assertion is checked on every run, and a failure lists all
that failed per client (its first line names them), so one pass gives the whole mode x client
table. `test_hostile_mode_probe_and_check` sends some modes through the requests made before a
run: `run` with its probe (which may also refuse the run in one line, exit 1), and `check`
(exit 0 or 1; no PASS for a stream whose counts are flagged), with the same hygiene checks.

Runs go through a fork server (forkrun.py: harness imported once, each run a forked
`python -m harness run ...`), so a crash, a hang or a memory blow-up is observed from outside
without paying an interpreter start-up per run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.record.records import ErrorKind

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _load(name: str) -> ModuleType:
    """tests/hostile/<name>.py as module hostile_<name> (a plain `import server` could meet
    another directory's module of that name)."""
    spec = importlib.util.spec_from_file_location(f"hostile_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hs = _load("server")

TRANSPORTS = ("fast", "aiohttp")  # --http-client: the lean client, and aiohttp
N = 6  # requests planned per run
MAX_TOKENS = 4  # output tokens asked per request
ASKED_MARGIN = 2.0  # throughput may count at most this times the tokens asked for (the harness
# states its own margin for counts above max_tokens; any margin up to 100 % passes)
KEY_ENV = "HOSTILE_API_KEY"
API_KEY = "sk-hz7Q4vK9mW2pX8rT5nL3jB6c"  # from the environment, as a user's key
HEADER_SECRET = "hdr-Qx9Lm2Vb7Nc4Rt8Wz5Kp"  # a settings.json header (api-key)
USERINFO_PASSWORD = "pw-Jd3Fs8Gh2Yk6Tq1Zx4"  # in the target URL of url_userinfo
SECRETS = (API_KEY, HEADER_SECRET, USERINFO_PASSWORD)
VISIBLE = 6  # a secret may show its first 6 characters (harness.config.target.mask_key)
MAX_RSS_BYTES = 500 * 1024**2  # a 6-request run peaks near 55 MiB; a claimed count, far more
RUN_LIMIT_S = 30.0  # a run that has not ended by then is killed: "hang" (a 6-request run
# takes about a second; the margin is for a busy machine, and for the harness's own bounds)
INPUTS = ("s.toml", "config.toml", "settings.json")  # written by the test, not scanned
TRACEBACK_MARKERS = (
    "Traceback (most recent call last)",
    "Task exception was never retrieved",
    "Fatal error on transport",
    "Exception in callback",
    "Exception ignored in",
    "Unhandled exception",
)
KINDS = {k.value for k in ErrorKind}
# Modes also sent through `run`'s pre-run probe and `check` (one stream each: the modes whose
# answer the probe and check read; slow, endless and retried modes would only wait there).
PREFLIGHT = (
    "delta_string",
    "choices_number",
    "choices_object",
    "usage_1e12",
    "usage_negative",
    "over_max_tokens",
    "echo_key_401",
    "ctrl_in_error",
    "redirect_cross_origin",
    "models_garbage",
    "models_ctrl_id",
)
FLAGGED_COUNTS = ("usage_1e12", "usage_2m", "usage_negative", "over_max_tokens", "endless_tokens")


# -- fixtures: the servers and the fork server ---------------------------------------------------


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Any, Any]]:
    server, catcher = hs.start_pair()
    try:
        yield server, catcher
    finally:
        server.stop()
        catcher.stop()


@dataclass
class Forker:
    proc: subprocess.Popen[bytes]

    def run_all(self, jobs: list[tuple[list[str], Path, dict[str, str]]]) -> list[dict[str, Any]]:
        """Run `python -m harness ARGV` for each (argv, cwd, env) at once; stdout and stderr go
        to cwd/stdout.txt and cwd/stderr.txt. Returns forkrun's results, in order."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        batch = [
            {
                "argv": argv,
                "cwd": str(cwd),
                "env": env,
                "stdout": str(cwd / "stdout.txt"),
                "stderr": str(cwd / "stderr.txt"),
                "timeout_s": RUN_LIMIT_S,
            }
            for argv, cwd, env in jobs
        ]
        self.proc.stdin.write(json.dumps({"jobs": batch}).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server died"
        results: list[dict[str, Any]] = json.loads(line)["results"]
        return results


@pytest.fixture(scope="module")
def forker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forker]:
    log = tmp_path_factory.mktemp("forkrun") / "forkrun.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "forkrun.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=REPO,
        )
    assert proc.stdout is not None
    hello = json.loads(proc.stdout.readline() or b"{}")
    assert hello.get("ready"), log.read_text()
    assert Path(hello["harness"]).resolve().is_relative_to(REPO), hello  # this checkout's harness
    try:
        yield Forker(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()


# -- one run -------------------------------------------------------------------------------------


def _scenario(retry: bool) -> str:
    text = f"""name = "hostile"
seed = 5
[workload]
prompt_tokens = {{ dist = "fixed", value = 8 }}
output_tokens = {{ dist = "fixed", value = {MAX_TOKENS} }}
[[phases]]
name = "main"
requests = {N}
arrival = {{ process = "constant", rate = 100 }}
"""
    if retry:
        text += '[retry]\non = ["429"]\nmax = 1\nbackoff = "10ms"\nmax_wait = "50ms"\n'
    return text


@dataclass
class Run:
    """What one run left: its exit, memory and time, what it printed and wrote."""

    mode: str
    variant: str  # fast, aiohttp, probe, check (prepare)
    rc: int
    maxrss_kb: int
    wall_s: float
    timed_out: bool
    memory_killed: bool
    terminal: bytes  # stdout + stderr
    files: dict[str, bytes]  # relative path -> content, inputs left out
    records: list[dict[str, Any]]  # final journal records (retried attempts left out)
    journal_lines: int  # lines of the journal that are records, retried or not
    result: dict[str, Any] | None


def prepare(
    name: str, variant: str, folder: Path, url: str
) -> tuple[list[str], Path, dict[str, str]]:
    """The files and the command line of `name` in `folder`: variant "fast" or "aiohttp" (`run`
    on that client, without the probe unless the mode needs it), "probe" (`run` with the probe,
    lean client) or "check"."""
    mode = hs.MODES[name]
    folder.mkdir()
    (folder / "s.toml").write_text(_scenario(mode.retry))
    (folder / "config.toml").write_text(
        f'[timeout]\nconnect = "2s"\nread = "{mode.read_timeout_s:g}s"\n'
    )
    (folder / "settings.json").write_text(json.dumps({"headers": {"api-key": HEADER_SECRET}}))
    if mode.userinfo:
        url = url.replace("http://", f"http://hostile:{USERINFO_PASSWORD}@")
    files = ["--api-key-env", KEY_ENV, "--settings", "settings.json", "--config", "config.toml"]
    model = [] if mode.probe else ["--model", hs.MODEL]  # probe modes read /v1/models
    if variant == "check":
        argv = ["check", "--target", url, *files, *model]
    else:
        argv = ["run", "s.toml", "--target", url, "--out", "r.json", "--html", *files, *model]
        argv += ["--http-client", "fast" if variant == "probe" else variant, "--grace", "2"]
        if not (mode.probe or variant == "probe"):
            argv.append("--no-probe")
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k and "PYTEST" not in k}
    env[KEY_ENV] = API_KEY
    return argv, folder, env


def collect(name: str, variant: str, folder: Path, out: dict[str, Any]) -> Run:
    """What the run in `folder` left (`out`: forkrun's result)."""
    files = {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in INPUTS
    }
    terminal = files.get("stdout.txt", b"") + files.get("stderr.txt", b"")
    records: list[dict[str, Any]] = []
    journal_lines = 0
    for line in files.get("r.journal.jsonl", b"").splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("t") == "rec":
            journal_lines += 1
            if not d.get("r"):
                records.append(d)
    result = None
    if "r.json" in files:
        try:
            result = json.loads(files["r.json"])
        except ValueError:
            result = None
    return Run(
        name,
        variant,
        out["rc"],
        out["maxrss_kb"],
        out["wall_s"],
        out["timed_out"],
        out["memory_killed"],
        terminal,
        files,
        records,
        journal_lines,
        result,
    )


# -- the assertions ------------------------------------------------------------------------------


def record_class(d: dict[str, Any]) -> str:
    """ok, or the record's error class as the result names it (http_<status> for HTTP errors)."""
    err = d.get("err")
    if not err:
        return "ok"
    return f"http_{d.get('st')}" if err == "http_status" else str(err)


def error_lines(run: Run) -> list[str]:
    return [
        ln for ln in run.terminal.decode("utf-8", "replace").splitlines() if ln.startswith("error:")
    ]


def check_records(run: Run) -> str | None:
    mode = hs.MODES[run.mode]
    # with the probe, a run may also stop before sending: one line, exit 1
    refuse = mode.refuse if mode.refuse is not None or run.variant != "probe" else 1
    if not run.records and not run.journal_lines and refuse is not None:
        if run.rc == refuse and len(error_lines(run)) == 1:
            return None  # refused before the run, as the contract allows
        if not mode.expect:
            return (
                f"expected a refusal (exit {refuse}, one `error:` line), got exit {run.rc} "
                f"and {len(error_lines(run))} error lines"
            )
    elif not mode.expect:
        return f"expected a refusal (exit {refuse}), got {len(run.records)} records"
    seqs = sorted(int(d.get("seq", -1)) for d in run.records)
    problems = []
    if seqs != list(range(N)):
        missing = sorted(set(range(N)) - set(seqs))
        twice = sorted({s for s in seqs if seqs.count(s) > 1})
        problems.append(
            f"{len(seqs)} final records for {N} planned (missing {missing}, repeated {twice})"
        )
    unknown = {str(d.get("err")) for d in run.records if d.get("err") and d["err"] not in KINDS}
    if unknown:
        problems.append(f"error kinds that are not ErrorKinds: {sorted(unknown)}")
    if run.result is None:
        problems.append(f"no result (exit {run.rc})")
    else:
        req = (run.result.get("summary") or {}).get("requests") or {}
        counted = (req.get("completed") or 0) + (req.get("failed") or 0)
        if counted != N or req.get("not_sent"):
            problems.append(f"the result counts {req} for {N} planned")
        if run.result.get("complete") is not True:
            problems.append(f"the result is not complete: {run.result.get('stop_reason')!r}")
    if run.rc not in (0, 1):
        problems.append(f"exit {run.rc}")
    return "; ".join(problems) or None


def check_kinds(run: Run) -> str | None:
    mode = hs.MODES[run.mode]
    expect = mode.expect | (mode.aiohttp_also if run.variant == "aiohttp" else frozenset())
    got = sorted({record_class(d) for d in run.records})
    bad = []
    for cls in got:
        if cls in expect:
            continue
        if "*error" in expect and cls != "ok":
            continue
        bad.append(cls)
    if not bad:
        return None
    details = sorted({str(d.get("msg", ""))[:120] for d in run.records if record_class(d) in bad})
    return f"records ended as {got}, contract {sorted(expect)}: {details[:2]}"


def check_memory(run: Run) -> str | None:
    if run.memory_killed:
        return "killed past 2 GiB resident"
    if run.maxrss_kb * 1024 > MAX_RSS_BYTES:
        return f"peak resident {run.maxrss_kb // 1024} MiB > {MAX_RSS_BYTES // 1024**2} MiB"
    return None


def check_traceback(run: Run) -> str | None:
    text = run.terminal.decode("utf-8", "replace")
    found = [m for m in TRACEBACK_MARKERS if m in text]
    if not found:
        return None
    last = [
        ln
        for ln in text.splitlines()
        if re.match(r"^[A-Za-z_.]+(Error|Exception|Interrupt)\b", ln) or "Error(" in ln
    ]
    return f"{found[0]!r} ({len(found)} kinds); {last[-1][:160] if last else ''}"


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but TAB and LF, DEL, C1


def check_terminal(run: Run) -> str | None:
    if b"\x1b" in run.terminal:
        i = run.terminal.index(b"\x1b")
        return f"ESC in the terminal output: {run.terminal[max(i - 40, 0) : i + 20]!r}"
    text = run.terminal.decode("utf-8", "replace")
    m = _CONTROL.search(text)
    if m:
        return f"control character U+{ord(m.group()):04X} in the terminal output: {text[max(m.start() - 40, 0) : m.end() + 10]!r}"
    return None


def leaks(data: bytes) -> list[str]:
    """Pieces of a secret longer than its visible prefix found in `data`."""
    found = []
    for secret in SECRETS:
        for i in range(len(secret) - VISIBLE):
            piece = secret[i : i + VISIBLE + 1].encode()
            if piece in data:
                found.append(secret[:VISIBLE])
                break
    return found


def check_secrets(run: Run, catcher: Any) -> str | None:
    problems = []
    for name, data in run.files.items():
        found = leaks(data)
        if found:
            problems.append(f"{name}: {sorted(set(found))}")
    for req in catcher.seen_by(run.mode, run.variant).requests:
        found = leaks(json.dumps(req.headers).encode())
        if found:
            problems.append(f"sent to the other origin {catcher.origin}: {sorted(set(found))}")
            break
    return "; ".join(problems) or None


def _non_finite(obj: Any, where: str = "") -> Iterator[str]:
    if isinstance(obj, float) and not math.isfinite(obj):
        yield where
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _non_finite(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _non_finite(v, f"{where}[{i}]")


def _blocks(result: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The summary and each phase."""
    if isinstance(result.get("summary"), dict):
        yield "summary", result["summary"]
    for ph in result.get("phases") or []:
        if isinstance(ph, dict):
            yield f"phase {ph.get('name')}", ph


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def check_numbers(run: Run, server: Any) -> str | None:
    """Finite everywhere; throughput and token totals not negative; no more tokens than the
    bytes on the wire could carry (an output token is at least one byte the server sent, a
    prompt token at least one byte it was sent); throughput from counts within ASKED_MARGIN
    of what was asked."""
    if run.result is None:
        return None  # `records` says so
    seen = server.seen_by(run.mode, run.variant)
    problems = [f"{w} is not finite" for w in _non_finite(run.result)][:3]
    for where, block in _blocks(run.result):
        tp = block.get("throughput") if isinstance(block.get("throughput"), dict) else {}
        tokens = block.get("tokens") if isinstance(block.get("tokens"), dict) else {}
        for key, value in [*tp.items(), *tokens.items()]:
            if isinstance(value, int | float) and value < 0 and key != "mean_signed":
                problems.append(f"{where}: {key} = {value}")
        window = _num(tp.get("window_s"))
        out_tok = max(
            _num(tokens.get("output_total")), _num(tp.get("output_tokens_per_s")) * window
        )
        prompt_tok = _num(tokens.get("prompt_total"))
        if out_tok > seen.bytes_out:
            problems.append(f"{where}: {out_tok:.3g} output tokens from {seen.bytes_out} bytes")
        counted = _num(tp.get("output_tokens_per_s")) * window
        if counted > ASKED_MARGIN * N * MAX_TOKENS:
            problems.append(
                f"{where}: throughput counts {counted:.3g} output tokens, {N} x {MAX_TOKENS} asked"
            )
        if prompt_tok > seen.bytes_in:
            problems.append(f"{where}: {prompt_tok:.3g} prompt tokens from {seen.bytes_in} bytes")
    return "; ".join(problems) or None


def check_hang(run: Run) -> str | None:
    if run.timed_out:
        return f"still running after {RUN_LIMIT_S:g} s: killed"
    return None


# -- the matrix ----------------------------------------------------------------------------------


def check_exit(run: Run) -> str | None:
    """`check` ends 0 (all passed) or 1 (a step failed), never otherwise."""
    return None if run.rc in (0, 1) else f"exit {run.rc}"


def check_verdict(run: Run) -> str | None:
    """`check` does not pass a stream whose counts the contract flags."""
    if run.mode in FLAGGED_COUNTS:
        passed = [
            ln
            for ln in run.terminal.decode("utf-8", "replace").splitlines()
            if "PASS  streaming request" in ln
        ]
        if passed:
            return f"{passed[0].strip()[:160]}"
    return None


def check_flags(run: Run) -> str | None:
    """A run flags every finished request of a mode whose counts the contract flags."""
    if run.mode not in FLAGGED_COUNTS:
        return None
    unflagged = [d.get("seq") for d in run.records if not d.get("err") and not d.get("uf")]
    return f"finished requests without a usage flag: {unflagged}" if unflagged else None


def check(run: Run, server: Any, catcher: Any) -> dict[str, str]:
    """The assertions that failed for this run: name -> why."""
    if run.variant == "check":
        checks = {"exit": check_exit(run), "verdict": check_verdict(run)}
    else:
        checks = {
            "records": check_records(run),
            "kinds": check_kinds(run),
            "numbers": check_numbers(run, server),
            "flags": check_flags(run),
        }
    checks |= {
        "memory": check_memory(run),
        "traceback": check_traceback(run),
        "terminal": check_terminal(run),
        "secrets": check_secrets(run, catcher),
        "hang": check_hang(run),
    }
    return {name: why for name, why in checks.items() if why}


def run_variants(
    mode: str, variants: tuple[str, ...], tmp: Path, servers: tuple[Any, Any], forker: Forker
) -> None:
    """`mode` in each variant at once; every assertion on each; one failure listing all."""
    server, catcher = servers
    jobs = [prepare(mode, v, tmp / v, server.url(mode, v)) for v in variants]
    outs = forker.run_all(jobs)
    runs = [collect(mode, v, tmp / v, out) for v, out in zip(variants, outs, strict=True)]
    assert not (server.errors or catcher.errors), server.errors + catcher.errors  # our bugs
    failed = {run.variant: (run, check(run, server, catcher)) for run in runs}
    failed = {v: rf for v, rf in failed.items() if rf[1]}
    assert not failed, (
        "; ".join(f"{v}: {', '.join(why)}" for v, (_, why) in failed.items())
        + "\n"
        + "\n".join(
            f"  {v} [exit {run.rc}, {run.wall_s:.1f} s, {run.maxrss_kb // 1024} MiB] {name}: {text}"
            for v, (run, why) in failed.items()
            for name, text in why.items()
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(hs.MODES))
def test_hostile_mode(mode: str, tmp_path: Path, servers: tuple[Any, Any], forker: Forker) -> None:
    """`run` against the mode on both HTTP clients."""
    run_variants(mode, TRANSPORTS, tmp_path, servers, forker)


@pytest.mark.slow
@pytest.mark.parametrize("mode", PREFLIGHT)
def test_hostile_mode_probe_and_check(
    mode: str, tmp_path: Path, servers: tuple[Any, Any], forker: Forker
) -> None:
    """The requests before a run: `run` with its probe, and `check`."""
    run_variants(mode, ("probe", "check"), tmp_path, servers, forker)


def test_the_docs_state_every_modes_contract() -> None:
    """docs/hostile.md's "Hostile server matrix" table has one row per mode, with the
    record kinds the matrix holds the harness to."""
    text = (REPO / "docs" / "hostile.md").read_text()
    section = text.split("## Hostile server matrix", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    assert sorted(rows) == sorted(hs.MODES)
    wrong = {
        m: (rows[m], hs.contract(mode))
        for m, mode in hs.MODES.items()
        if rows[m] != hs.contract(mode)
    }
    assert not wrong, wrong
    assert set(PREFLIGHT) <= set(hs.MODES) and set(FLAGGED_COUNTS) <= set(hs.MODES)
