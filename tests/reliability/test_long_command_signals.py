"""SIGINT and SIGTERM at a random moment (a seeded delay within the command's run) stop every
long command -- `capacity`, `plan --verify`, `sweep`, `run --repeat` -- within 2 s, with 130 or
143, nothing finished lost and nothing written as a confident answer (issue 44;
harness.orchestrate.stopping). Each runs against the built-in simulator at speedup 10."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from relhelp import harness_cmd

pytestmark = pytest.mark.slow

STOP_WITHIN_S = 2.0  # the requirement itself (DESIGN.md): a long command stops within 2 s

SCENARIO = """
name = "sig"
seed = 11
[workload]
prompt_tokens = {{ dist = "fixed", value = 64 }}
output_tokens = {{ dist = "fixed", value = 32 }}
[sim]
speedup = 10.0
[[phases]]
name = "main"
duration = "{duration}"
arrival = {{ process = "constant", rate = 4 }}
"""

SWEEP = """
name = "sigsweep"
scenario = "s.toml"
[server]
kind = "sim"
vary = { max_num_seqs = [8, 16] }
[load]
phases = ["main"]
rate = [2.0, 4.0, 6.0]
"""


def _load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def _complete_results(folder: Path) -> set[str]:
    """The run results in `folder` that finished (complete), by file name."""
    out = set()
    for f in folder.glob("*.json"):
        if f.name in ("capacity.json", "summary.json", "plan.json"):
            continue
        doc = _load(f)
        if doc.get("complete"):
            out.add(f.name)
    return out


def _check_capacity(tmp: Path, sig: signal.Signals, stdout: str) -> None:
    doc = _load(tmp / "out" / "capacity.json")
    assert doc["interrupted"] == sig.name and doc["answer_requests_per_s"] is None
    assert "lower_bound" not in doc and "replicas" not in doc and "evidence" not in doc
    judged = {p["result"] for p in doc["probes"]}
    cut = (doc.get("cut_short") or {}).get("result")
    assert judged <= _complete_results(tmp / "out")  # every judged probe ran whole
    assert _complete_results(tmp / "out") <= judged | {cut}  # and none that finished is lost
    assert "sustainable" not in stdout and "INTERRUPTED" in stdout


def _check_plan(tmp: Path, sig: signal.Signals, stdout: str) -> None:
    doc = _load(tmp / "plan.json")
    assert doc["interrupted"] == sig.name
    assert not (doc.get("verification") or {}).get("passed")  # a cut verification is no pass
    assert "no pick" in stdout


def _check_sweep(tmp: Path, sig: signal.Signals, stdout: str) -> None:
    out = tmp / "out"
    summary = _load(out / "summary.json")
    assert sig.name in summary["sweep"]["stop_reason"] and summary["sweep"]["finished"] is False
    done = {r["result"] for p in summary["points"] for r in p["runs"] if p["status"] == "done"}
    assert _complete_results(out) == done  # every finished point is in the summary, as done
    assert all(p["status"] != "done" or p["runs"] for p in summary["points"])


def _check_repeat(tmp: Path, sig: signal.Signals, stdout: str) -> None:
    results = sorted((tmp / "rep").glob("r-*.json"))
    assert results, "no run started"
    docs = [_load(f) for f in results]
    *before, last = docs
    assert all(d["complete"] for d in before)  # the runs before the cut one are kept whole
    if not last["complete"]:  # cut short: marked, never a result that looks whole
        assert sig.name in str(last["stop_reason"])
    assert len(results) <= 3


# command, its arguments, the stderr line that says it runs, the delay window after it, the check
CASES: dict[str, tuple[list[str], str, tuple[float, float], Callable[..., None]]] = {
    "capacity": (
        ["capacity", "s.toml", "--slo", "ttft_p99=1s", "--probe-duration", "2s",
         "--no-estimate", "--confirm-runs", "1", "--out", "out"],
        "capacity: started", (0.2, 6.0), _check_capacity,
    ),
    "plan --verify": (
        ["plan", "s.toml", "--slo", "ttft_p99=1s", "--out", "plan.json", "--verify"],
        "plan:", (0.2, 5.0), _check_plan,
    ),
    "sweep": (["sweep", "sw.toml", "--out", "out"], "sweep sigsweep", (0.5, 8.0), _check_sweep),
    "run --repeat": (
        ["run", "s.toml", "--repeat", "3", "--out", "rep/r.json", "--quiet"],
        "", (1.0, 9.0), _check_repeat,
    ),
}  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", list(CASES))
def test_a_long_command_stops_on_a_signal_and_keeps_what_finished(
    tmp_path: Path, command: str, sig: signal.Signals
) -> None:
    args, ready, (lo, hi), check = CASES[command]
    (tmp_path / "s.toml").write_text(
        SCENARIO.format(duration="2s" if command in ("capacity", "sweep") else "4s")
    )
    (tmp_path / "sw.toml").write_text(SWEEP)
    (tmp_path / "rep").mkdir()
    delay = random.Random(f"{command}/{sig.name}").uniform(lo, hi)
    proc = subprocess.Popen(
        harness_cmd(*args),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err: list[str] = []
    out: list[str] = []
    started = threading.Event()

    # Each pipe has its own reader and the main thread only waits: `communicate()` read stderr
    # too and closed it under this reader (ValueError in the thread, the test failed, in a full
    # run of 2026-12-06).
    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if ready in line:
                started.set()

    def read_stdout() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_stderr, read_stdout)]
    for reader in readers:
        reader.start()
    try:
        if ready:
            assert started.wait(60), f"{command} did not start: {''.join(err)[-2000:]}"
        else:  # --quiet: the run's own simulator starting is the first sign; give it a second
            time.sleep(1.0)
        time.sleep(delay)
        assert proc.poll() is None, f"{command} ended before the signal at {delay:.2f}s"
        proc.send_signal(sig)
        sent = time.monotonic()
        proc.wait(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for reader, pipe in zip(readers, (proc.stderr, proc.stdout), strict=True):
            reader.join(5)
            if pipe is not None and not reader.is_alive():  # never closed under its reader
                pipe.close()
    stdout = "".join(out)
    why = f"{command}, {sig.name} {delay:.2f}s in: {''.join(err)[-1500:]}"
    assert took < STOP_WITHIN_S, f"took {took:.2f}s to stop; {why}"
    assert proc.returncode == 128 + sig, why
    check(tmp_path, sig, stdout)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_compare_of_large_folders_stops_on_a_signal_with_no_verdict(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """60 results a side take tens of seconds to compare on 2 cores: a signal 3 s in stops it
    within 2 s with 128 + the signal, and nothing is printed as a verdict."""
    src = Path(__file__).parents[1] / "data" / "results" / "v2.json"
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        for i in range(60):
            (tmp_path / side / f"r{i}.json").write_bytes(src.read_bytes())
    proc = subprocess.Popen(
        harness_cmd("compare", "a", "b"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3.0)
        assert proc.poll() is None, f"compare ended before the signal: {proc.communicate()}"
        proc.send_signal(sig)
        sent = time.monotonic()
        stdout, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < STOP_WITHIN_S, f"took {took:.2f}s to stop: {stderr[-1500:]}"
    assert proc.returncode == 128 + sig, stderr[-1500:]
    assert stdout == ""  # no table, no PASS/REGRESSION
