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


def _kill_and_wait_until_closed(proc: subprocess.Popen[str], port: int) -> bool:
    """SIGKILL the harness (no atexit hook runs), then up to 15 s for its server's port to close."""
    proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _listening(port):
        time.sleep(0.1)
    return not _listening(port)


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
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    assert _kill_and_wait_until_closed(proc, port), "the simulator outlived the killed harness"


def test_any_server_dies_with_a_killed_starter(tmp_path):
    # Not only the simulator: whatever program the launcher starts (vLLM, llama.cpp) gets the
    # parent-death signal through the launcher's exec shim, with no Python run between its fork
    # and exec (tests/server/test_launcher.py checks that).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    starter = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from harness.server.launcher import start_server\n"
        f"argv = [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1']\n"
        f"url = 'http://127.0.0.1:{port}/'\n"
        "start_server(argv, health_url=url, base_url=url, log_path=Path(sys.argv[1]),"
        " timeout_s=60)\n"
        "print('up', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", starter, str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "up"
        assert _listening(port)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    assert _kill_and_wait_until_closed(proc, port), "the server outlived the killed harness"
