"""Nothing lost: SIGKILL mid-run (the journal rebuilds the result), SIGINT/SIGTERM (a partial
result marked incomplete, non-zero exit), a second Ctrl-C (stops at once, journal readable),
an unwritable or full results folder (refused before the run) and a write failure mid-run
(the run stops with a clear message)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from relhelp import (
    SimProcess,
    final_records,
    free_port,
    harness_cmd,
    journal_of,
    load,
    run_inprocess,
    sim_thread,
    write_scenario,
)

from harness.errors import RunAborted, UsageError
from harness.orchestrate import run as runner
from harness.record import journal as journal_mod

pytestmark = pytest.mark.slow


_children: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _reap_children():  # type: ignore[no-untyped-def]
    """A failed test must not leave a `run` behind."""
    yield
    while _children:
        p = _children.pop()
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=10)


def _start_run(
    tmp_path: Path, target: str, *extra: str, duration: str = "20s", output_tokens: int = 200
) -> tuple[subprocess.Popen[bytes], Path]:
    scn = write_scenario(
        tmp_path / "s.toml", rate=20, duration=duration, output_tokens=output_tokens
    )
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        harness_cmd("run", str(scn), "--target", target, "--out", str(out), "--quiet", *extra),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _children.append(proc)
    return proc, out


def _wait_for_records(jpath: Path, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if jpath.exists() and jpath.read_bytes().count(b'"t":"rec"') >= n:
            return
        time.sleep(0.05)
    for p in _children:
        if p.poll() is not None:
            raise AssertionError(f"run exited with {p.returncode}: {p.communicate()[1][-2000:]!r}")
    raise AssertionError(f"{jpath}: fewer than {n} records after {timeout_s}s")


@pytest.fixture
def sim_proc(tmp_path: Path):  # type: ignore[no-untyped-def]
    sim = SimProcess(free_port(), tmp_path / "sim.log", "--speedup", "4")
    yield sim
    sim.kill()


def test_sigkill_then_report_rebuilds(tmp_path: Path, sim_proc: SimProcess) -> None:
    """Every request that finished more than a second before SIGKILL is in the rebuilt result."""
    proc, out = _start_run(tmp_path, sim_proc.url)
    jpath = runner.journal_path_for(out)
    _wait_for_records(jpath, 30)
    time.sleep(0.7)
    kill_ns = time.perf_counter_ns()  # CLOCK_MONOTONIC: comparable with the simulator's truth
    proc.kill()
    proc.communicate(timeout=10)
    truth = orjson.loads(_get(sim_proc.url + "/sim/truth"))["requests"]
    finished_early = {
        int(rid.rsplit("-", 2)[1])
        for rid, t in truth.items()
        if t["end_ns"] is not None
        and t["end_ns"] < kill_ns - 1_000_000_000
        and t["status"] == 200
        and t["finish_reason"] != "abort"
        and rid.startswith("rel-")
    }
    assert len(finished_early) >= 20
    rebuilt = tmp_path / "rebuilt.json"
    rep = subprocess.run(
        harness_cmd("report", str(jpath), "--out", str(rebuilt)),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert rep.returncode == 0, rep.stderr
    result = load(rebuilt)
    assert result["complete"] is False and "killed" in result["stop_reason"]
    seqs = {r.seq for r in journal_of(out).records if r.ok}
    assert finished_early <= seqs, sorted(finished_early - seqs)
    assert result["summary"]["requests"]["completed"] >= len(finished_early)


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - 127.0.0.1
        return bytes(r.read())


@pytest.mark.parametrize(
    ("sig", "reason"), [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")]
)
def test_stop_signal_writes_partial_result(
    sig: int, reason: str, tmp_path: Path, sim_proc: SimProcess
) -> None:
    """One signal: stop sending, let in-flight requests finish within --grace, write the
    partial result with complete = false and the reason, exit 1."""
    proc, out = _start_run(tmp_path, sim_proc.url, "--grace", "10")
    _wait_for_records(runner.journal_path_for(out), 10)
    t_sig = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    waited = time.monotonic() - t_sig
    assert proc.returncode == 1, err
    result = load(out)
    assert result["complete"] is False
    assert reason in result["stop_reason"]
    assert result["duration_s"] < 15, "the 20 s run stopped early"
    j = journal_of(out)
    recs = final_records(j)
    assert j.end is not None and j.torn_lines == 0
    # in-flight requests got their grace: 200 tokens at speedup 4 take well under 10 s
    assert all(r.error is None for r in recs.values()), {r.error_class for r in recs.values()}
    assert waited < 12


def test_second_sigint_stops_at_once(tmp_path: Path, sim_proc: SimProcess) -> None:
    """Ctrl-C twice: no waiting for the 60 s grace; in-flight requests recorded as cancelled and
    the journal still readable by `report`."""
    proc, out = _start_run(tmp_path, sim_proc.url, "--grace", "60", output_tokens=3000)
    jpath = runner.journal_path_for(out)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (jpath.exists() and jpath.stat().st_size > 0):
        time.sleep(0.05)
    time.sleep(1.0)  # some 3000-token streams are in flight
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    t2 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - t2 < 8, "a second Ctrl-C must not wait for the grace period"
    assert proc.returncode != 0, err
    rep = subprocess.run(
        harness_cmd("report", str(jpath), "--out", str(tmp_path / "x.json")),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert rep.returncode == 0, rep.stderr
    recs = final_records(journal_of(out))
    assert recs and any(r.error_class == "cancelled" for r in recs.values())
    assert load(tmp_path / "x.json")["complete"] is False


def test_stop_during_retry_wait_keeps_the_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop while a request waits out a 429's Retry-After: its last attempt is its outcome."""
    scn = write_scenario(
        tmp_path / "s.toml", rate=20, duration="3s", extra='[retry]\non = ["429"]\nmax = 2\n'
    )
    out = tmp_path / "r.json"
    with sim_thread(speedup=20.0, faults={"http429": 1.0}) as sim:

        def stop_when_waiting() -> None:  # the run's signal handlers are in place by then
            while len(sim.server.truth) < 5:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)

        th = threading.Thread(target=stop_when_waiting)
        th.start()
        try:
            rc, _ = run_inprocess(monkeypatch, scn, out, sim.url, grace_s=0.5)
        finally:
            th.join()
        truth = sim.truth_by_seq()
    assert rc == 1
    recs = final_records(journal_of(out))
    assert set(recs) == set(truth), "every request the server saw has a final record"
    assert all(r.error_class == "http_429" for r in recs.values())


# -- the results folder --------------------------------------------------------------------


def test_out_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    scn = write_scenario(tmp_path / "s.toml")
    p = subprocess.run(
        harness_cmd("run", str(scn), "--out", str(tmp_path / "f" / "r.json")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: --out ") and "cannot create folder" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_unwritable_folder_is_refused(tmp_path: Path) -> None:
    scn = write_scenario(tmp_path / "s.toml")
    # /proc takes no new files, even for root (for whom os.access says yes)
    p = subprocess.run(
        harness_cmd("run", str(scn), "--out", "/proc/r.json"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "/proc" in p.stderr and ("not writable" in p.stderr or "cannot write" in p.stderr), (
        p.stderr
    )


def test_full_disk_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(
        runner.shutil, "disk_usage", lambda p: real(p)._replace(free=10 * 1024 * 1024)
    )
    with pytest.raises(UsageError, match=r"only 10 MiB free .* at least 64 MiB"):
        run_inprocess(monkeypatch, write_scenario(tmp_path / "s.toml"), tmp_path / "r.json", None)
    assert not runner.journal_path_for(tmp_path / "r.json").exists()


def test_journal_on_a_full_device_is_refused_at_once(tmp_path: Path) -> None:
    """The journal's first write fails (ENOSPC): RunAborted (exit 1) before any request is
    sent. (A journal *linked* to /dev/full is refused before that: harness.safe_write.)"""
    out = tmp_path / "r.json"
    runner.journal_path_for(out).symlink_to("/dev/full")
    scn = write_scenario(tmp_path / "s.toml", duration="30s")
    t0 = time.monotonic()
    p = subprocess.run(
        harness_cmd("run", str(scn), "--out", str(out), "--no-probe"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "r.journal.jsonl: exists and is a symbolic link, not a regular file" in p.stderr
    assert time.monotonic() - t0 < 25, "refused before the 30 s run, not after"

    class FullDisk:  # the journal opened and locked, on a device with no space left
        def file(self) -> Any:
            return open("/dev/full", "wb")  # noqa: SIM115 - closed by the writer

    with pytest.raises(RunAborted, match="cannot write the journal .*No space left on device"):
        journal_mod.JournalWriter(tmp_path / "j.journal.jsonl", {}, FullDisk())  # type: ignore[arg-type]


def test_write_failure_mid_run_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up one second into a 20 s run: the run stops with a clear message."""
    writers: list[Any] = []
    real_init = journal_mod.JournalWriter.__init__

    def init(self: Any, *a: Any, **kw: Any) -> None:
        real_init(self, *a, **kw)
        writers.append(self)

    monkeypatch.setattr(journal_mod.JournalWriter, "__init__", init)
    originals: list[Any] = []

    def fill_disk() -> None:
        while not writers:
            time.sleep(0.01)
        time.sleep(1.0)
        originals.append(writers[0]._f)
        writers[0]._f = open("/dev/full", "wb")  # noqa: SIM115 - closed by the writer

    th = threading.Thread(target=fill_disk)
    t0 = time.monotonic()
    with sim_thread(speedup=20.0) as sim:
        th.start()
        try:
            with pytest.raises(
                RunAborted, match="cannot write the journal .*No space left on device"
            ):
                run_inprocess(
                    monkeypatch,
                    write_scenario(tmp_path / "s.toml", duration="20s"),
                    tmp_path / "r.json",
                    sim.url,
                )
        finally:
            th.join()
            for f in originals:
                f.close()
    assert time.monotonic() - t0 < 10, "the run stopped instead of measuring into nothing"
    assert not (tmp_path / "r.json").exists()
