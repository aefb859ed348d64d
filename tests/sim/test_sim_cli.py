"""`python -m harness.sim` as a process: the ready line, SIGTERM, the key never printed whole;
and the import wall between the simulator and the client side."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENT_SIDE = ("harness.client", "harness.workload", "harness.record", "harness.analysis")


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.sim", "--port", "0", "--speedup", "100", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_prints_one_ready_line_serves_and_exits_cleanly_on_sigterm() -> None:
    key = "sk-very-secret-key-123"
    proc = _start("--root-path", "/api", env={"HARNESS_SIM_API_KEY": key})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(r"harness-sim listening on (http://127\.0\.0\.1:(\d+))\n", line)
        assert m, line
        url = m.group(1)
        with urllib.request.urlopen(url + "/api/health", timeout=10) as resp:
            assert resp.status == 200
        req = urllib.request.Request(
            url + "/api/v1/completions",
            data=json.dumps({"prompt": "a b c", "max_tokens": 3}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] >= 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out == ""  # nothing after the ready line
    assert key not in err and key[:6] in err
    assert "Traceback" not in err


def test_bad_flag_exits_2_with_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.sim", "--gpu", "B300"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --gpu: unknown GPU 'B300'; allowed:")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""


def test_sim_imports_nothing_from_the_client_side() -> None:
    code = (
        "import sys, harness.sim.app, harness.sim.cli, harness.sim.virtual\n"
        f"print([m for m in sys.modules if m.startswith({CLIENT_SIDE!r})])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == "[]"
    for path in (REPO / "harness" / "sim").rglob("*.py"):
        text = path.read_text()
        for mod in CLIENT_SIDE:
            assert f"import {mod}" not in text and f"from {mod}" not in text, path
