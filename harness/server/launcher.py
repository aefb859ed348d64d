"""Start and stop server processes (the simulator, vLLM, llama.cpp) and wait until they serve.

A server is a child process in its own process group, its output going to a log file. It is
stopped (SIGTERM, then SIGKILL after a grace period) when the harness exits for any reason:
`ServerHandle` is a context manager, and an atexit hook catches the rest.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError

STOP_GRACE_S = 10.0              # SIGTERM, then this long before SIGKILL
HEALTH_POLL_S = 0.2
DEFAULT_START_TIMEOUT_S = 120.0  # a real model may take minutes to load; the sim takes ~1 s
LOG_TAIL_LINES = 20
_LISTEN_RE = re.compile(r"harness-sim listening on (http://\S+)")

_live: set[ServerHandle] = set()


class ServerStartError(HarnessError):
    """A server died or never became healthy. Exit status 1: not the user's typo."""

    exit_status = 1


def _log_tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + ln for ln in lines[-n:]) or "    (log is empty)"


@dataclass(eq=False)
class ServerHandle:
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log_path: Path
    base_url: str
    kind: str
    env_keys: list[str] = field(default_factory=list)

    def stop(self) -> int | None:
        """Terminate the process group, then kill it; returns the exit status."""
        _live.discard(self)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def command_line(self) -> str:
        return " ".join(_quote(a) for a in self.argv)


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w@%+=:,./-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


@atexit.register
def _stop_all() -> None:
    for h in list(_live):
        h.stop()


def _spawn(argv: list[str], log_path: Path, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        except OSError as exc:
            raise ServerStartError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own 127.0.0.1 server
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_server(argv: list[str], *, health_url: str, base_url: str, log_path: Path,
                 timeout_s: float = DEFAULT_START_TIMEOUT_S, kind: str = "http",
                 env: dict[str, str] | None = None) -> ServerHandle:
    """Start argv, wait until GET health_url answers 2xx; raise ServerStartError with the log's
    last lines if the process exits or the timeout passes."""
    proc = _spawn(argv, log_path, env)
    assert proc.stdout is not None
    _pump_stdout_to_log(proc, log_path)
    handle = ServerHandle(argv, proc, log_path, base_url, kind)
    _live.add(handle)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            handle.stop()
            raise ServerStartError(f"{argv[0]} exited with status {proc.returncode} before becoming "
                                   f"healthy; last lines of {log_path}:\n{_log_tail(log_path)}")
        if _healthy(health_url):
            return handle
        time.sleep(HEALTH_POLL_S)
    handle.stop()
    raise ServerStartError(f"{argv[0]} was not healthy at {health_url} within {timeout_s:g}s; "
                           f"last lines of {log_path}:\n{_log_tail(log_path)}")


def _pump_stdout_to_log(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    import threading

    def pump() -> None:
        assert proc.stdout is not None
        with open(log_path, "ab") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()

    threading.Thread(target=pump, daemon=True).start()


def sim_command(sim_argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "harness", "sim", "--host", "127.0.0.1", "--port", "0", *sim_argv]


def start_sim(sim_argv: list[str], log_path: Path, timeout_s: float = 30.0,
              api_key: str | None = None) -> ServerHandle:
    """Start the built-in simulator on an ephemeral 127.0.0.1 port and wait for its URL line."""
    argv = sim_command(sim_argv)
    env = dict(os.environ)
    if api_key:
        env["HARNESS_SIM_API_KEY"] = api_key
    proc = _spawn(argv, log_path, env)
    assert proc.stdout is not None
    handle = ServerHandle(argv, proc, log_path, "", "simulator")
    _live.add(handle)
    deadline = time.monotonic() + timeout_s
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=0.2):
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            m = _LISTEN_RE.search(buf.decode("utf-8", "replace"))
            if m:
                handle.base_url = m.group(1).rstrip("/")
                with open(log_path, "ab") as log:
                    log.write(buf)
                _pump_stdout_to_log(proc, log_path)
                return handle
    finally:
        sel.close()
    handle.stop()
    raise ServerStartError(f"the simulator did not start (status {proc.returncode}); last lines of "
                           f"{log_path}:\n{_log_tail(log_path)}")
