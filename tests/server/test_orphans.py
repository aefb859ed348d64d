"""A server the harness started never outlives it, even when the harness is killed with SIGKILL."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux-only"),
]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_simulator_dies_with_a_killed_run(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(REPO / "scenarios" / "steady.toml"),
            "--out",
            str(tmp_path / "r.json"),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stderr is not None
        port = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and port is None:
            line = proc.stderr.readline()
            m = re.search(r"simulator at http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
        assert port is not None and _listening(port)
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _listening(port):
        time.sleep(0.1)
    assert not _listening(port), "the simulator outlived the killed harness"
