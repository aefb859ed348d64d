"""The main command against the built-in simulator (started on an ephemeral port, then stopped)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_run_without_target_starts_and_stops_the_simulator(tmp_path):
    out = tmp_path / "burst.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(REPO / "scenarios" / "burst.toml"),
            "--no-slo-exit",  # a shortened burst may miss its itl_p99: not this test's point
            "--out",
            str(out),
            "--set",
            "phases.0.duration=1s",
            "--set",
            "phases.1.duration=2s",
            "--set",
            "phases.2.duration=2s",
            "--set",
            "phases.3.duration=2s",
            "--set",
            "sim.speedup=20",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "started the built-in simulator" in proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    assert "phase burst" in proc.stdout and "simulated server" in proc.stdout
    r = orjson.loads(out.read_bytes())
    assert r["target"]["kind"] == "simulator" and r["complete"]
    assert r["summary"]["requests"]["completed"] > 0 and r["summary"]["requests"]["failed"] == 0
    assert r["summary"]["tokens"]["per_chunk_usage"] is True
    err = r["summary"]["tokens"]["prompt_synthesis_error"]
    assert err is not None and err["mean"] < 0.1
    assert r["summary"]["tokens"]["output_matches_requested_share"] == 1.0
    assert (tmp_path / "burst.sim.log").exists()
    server = r["target"]["server"]  # what was started, with its settings
    assert server["engine"] == "sim" and server["settings"]["max_num_seqs"] == 48
    assert "--max-num-seqs 48" in server["command"]
    sim = r["target"]["simulator"]  # the simulator's own account of the run
    assert sim["steps"] > 0 and sim["model_s"] > 0 and sim["behind_model_s"] >= 0
    assert 0 < sim["wake_late_p50_ms"] <= sim["wake_late_p99_ms"] < 1000  # a bin's upper edge
    # The simulator was stopped: nothing listens on its port any more.
    import socket

    port = int(r["target"]["base_url"].rsplit(":", 1)[1])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\n[workload]\nprompt_tokens = { dist = "fixed", value = 1 }\n'
        'output_tokens = { dist = "fixed", value = 1 }\n[[phases]]\nduration = "5"\n'
        'arrival = { process = "poisson", rate = 1 }\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: {bad}: phases.0.duration: expected a string with a unit, such as "
        f'"500ms", "30s", "2m" or "1h", got \'5\''
    )
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(bad), "--target", "localhost:8000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_a_starved_simulator_is_flagged():
    from harness.analysis.result import _simulator_warnings

    assert _simulator_warnings({"steps": 10, "model_s": 5.0, "behind_model_s": 0.01}, 60.0) == []
    (w,) = _simulator_warnings({"steps": 10, "model_s": 5.0, "behind_model_s": 3.0}, 60.0)
    assert "fell 3.00 s behind its own model (5.0% of the run)" in w
    assert _simulator_warnings(None, 60.0) == []


def test_a_run_that_fails_midway_closes_its_journal_with_what_it_measured(tmp_path, monkeypatch):
    """The engine raises after a line was journaled: the journal is closed (its buffered lines on
    disk) without an end line, so `report` reads it as an interrupted run."""
    import harness.orchestrate.run as run_mod
    from harness.record.journal import journal_path_for, read_journal

    async def failing(plan, cfg, journal, *a, **k):
        journal.write_line({"t": "note", "text": "measured before the failure"})
        raise RuntimeError("engine failed")

    monkeypatch.setattr(run_mod, "execute_one_process", failing)
    out = tmp_path / "r.json"
    doc = {
        "name": "x",
        "workload": {
            "prompt_tokens": {"dist": "fixed", "value": 8},
            "output_tokens": {"dist": "fixed", "value": 4},
        },
        "phases": [{"name": "m", "requests": 2, "arrival": {"process": "poisson", "rate": 10}}],
    }
    args = run_mod.RunArgs(scenario=doc, out=str(out), quiet=True)
    with pytest.raises(RuntimeError, match="engine failed"):
        run_mod.measure(args)
    lines = journal_path_for(out).read_text().splitlines()
    assert '"measured before the failure"' in lines[-1], lines
    assert read_journal(journal_path_for(out)).end is None
