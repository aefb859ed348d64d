"""Start and stop server processes (the simulator, vLLM, llama.cpp) and wait until they serve.
What config.toml starts is `harness.server.engine_argv`'s; the simulator's log, `sim_log`'s.

A server is a child process in its own process group, its output going to a log file. It is
stopped (SIGTERM, then SIGKILL after a grace period) when the harness exits for any reason:
`ServerHandle` is a context manager, and an atexit hook catches the rest.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.configfile import ConfigFile
from harness.errors import HarnessError
from harness.safe_write import open_append  # a log: no link followed, no device
from harness.server.engine_argv import (  # config.toml's servers as command lines
    DEV_MODE_ENV,
    ENGINE_CHOICES,
    MODELS_TIMEOUT_S,
    NO_VLLM_RE,
    PROMPT_TOKENS_DETAILS_FLAG,
    VLLM_MODULE,
    ServerPlan,
    llamacpp_server,
    plan_server,
    served_models,
    server_env,
    sim_argv_from_config,
    vllm_argv,
    vllm_missing,
    vllm_python,
)
from harness.server.sim_log import sim_summary

STOP_GRACE_S = 10.0  # SIGTERM, then this long before SIGKILL
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
    shown_env: dict[str, str] = field(default_factory=dict)  # [server] env as results show it
    pump: Any = None  # the thread copying stdout into the log; closes stdout at EOF

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
        if self.pump is not None:
            self.pump.join(timeout=2.0)
        elif self.proc.stdout is not None:
            self.proc.stdout.close()
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


# On Linux a server asks the kernel to SIGTERM it when the harness dies, even by SIGKILL (atexit
# cannot run then). A shim does that after exec, then execs the server: a `preexec_fn` would run
# Python between fork and exec, where a lock that another of the harness's threads held at the
# fork (a pump thread's, a test runner's) stays held for good, and the child can hang before it
# ever starts the server (CI saw a simulator with an empty log killed at its 30 s deadline).
_PDEATHSIG_SHIM = """\
import os, sys
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)  # the harness died before prctl: nothing would stop this server
try:
    os.execv(sys.argv[2], sys.argv[2:])
except OSError as exc:
    print(f"cannot start {sys.argv[2]!r}: {exc.strerror or exc}", file=sys.stderr, flush=True)
    sys.exit(127)
"""


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    """argv behind the shim above on Linux; elsewhere argv (the atexit hook is the only guard).
    The program is looked up here, so that a missing one is still `cannot start` at once."""
    exe = shutil.which(argv[0])
    if exe is None:
        raise ServerStartError(f"cannot start {argv[0]!r}: no such executable file")
    if sys.platform != "linux" or not sys.executable:
        return argv
    return [sys.executable, "-I", "-S", "-c", _PDEATHSIG_SHIM, str(os.getpid()), exe, *argv[1:]]


def _spawn(argv: list[str], log_path: Path, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open_append(log_path) as log:
        try:
            return subprocess.Popen(
                _with_parent_death_signal(argv),
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
                # its own process group (killpg stops the server's children too, and a Ctrl-C
                # at the terminal reaches the harness, which stops the server), but not its own
                # session: Linux's autogroup scheduling shares CPU between sessions first, so a
                # session of its own would give the server a share of its own, whatever the
                # nice or scheduling class of whoever started it (docs/history/testing-log.md, 2026-12-02)
                process_group=0,
            )
        except OSError as exc:
            raise ServerStartError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None


STARVED_FACTOR = 10.0  # a start deadline stretches by the server's waits for a CPU, to this x


def _sched(pid: int) -> tuple[float, float, bool] | None:
    """(seconds it ran, seconds it waited on a run queue, whether it is runnable now) of a
    process (Linux's /proc); None elsewhere or when it is gone. The kernel adds a wait to the
    second figure only when it ends: a wait still going on is not in it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        ran_ns, queued_ns = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
        return int(ran_ns) / 1e9, int(queued_ns) / 1e9, state == "R"
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _StartClock:
    """A start deadline in the server's own time: wall time less the time it waited for a CPU,
    so that an overloaded machine, which delays a server without hanging it, does not fail its
    start (a server started at idle priority beside a busy one waits for a CPU most of the
    time); at most STARVED_FACTOR x the deadline in wall time. Where /proc says nothing, wall
    time.

    A wait still going on counts from when the server last ran or was last seen not runnable:
    starved from its first instant, it would otherwise show no wait at all (a full test run, a
    simulator at idle priority: 1.86 s, 0.0 CPU-s, 0.2 s of waits)."""

    pid: int
    timeout_s: float
    started: float = field(default_factory=time.monotonic)
    _ran: float = field(default=-1.0, init=False, repr=False)
    _since: float = field(default=0.0, init=False, repr=False)  # last ran, or seen not runnable

    def _times(self) -> tuple[float, float] | None:
        """(seconds it ran, seconds it waited for a CPU, the wait going on included)."""
        sched = _sched(self.pid)
        if sched is None:
            return None
        ran, queued, runnable = sched
        now = time.monotonic()
        if ran != self._ran or not runnable:
            self._ran, self._since = ran, now
        return ran, queued + (now - self._since)

    def left_s(self) -> float:
        elapsed = time.monotonic() - self.started
        times = self._times()
        own = elapsed - (times[1] if times else 0.0)
        return min(self.timeout_s - own, STARVED_FACTOR * self.timeout_s - elapsed)

    def note(self) -> str:
        """What the server did meanwhile, which tells a hung server from a starved one."""
        times = self._times()
        if times is None:
            return ""
        elapsed = time.monotonic() - self.started
        overloaded = ": the machine is overloaded" if times[1] > elapsed / 2 else ""
        return (
            f" (in {elapsed:.3g} s it ran {times[0]:.1f} CPU-s and waited {times[1]:.1f} s "
            f"for a CPU{overloaded})"
        )


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own 127.0.0.1 server
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_server(
    argv: list[str],
    *,
    health_url: str,
    base_url: str,
    log_path: Path,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    kind: str = "http",
    env: dict[str, str] | None = None,
) -> ServerHandle:
    """Start argv, wait until GET health_url answers 2xx; raise ServerStartError with the log's
    last lines if the process exits or the timeout passes."""
    proc = _spawn(argv, log_path, env)
    assert proc.stdout is not None
    pump = _pump_stdout_to_log(proc, log_path)
    handle = ServerHandle(argv, proc, log_path, base_url, kind, pump=pump)
    _live.add(handle)
    clock = _StartClock(proc.pid, timeout_s)
    while clock.left_s() > 0:
        if proc.poll() is not None:
            handle.stop()
            raise ServerStartError(
                f"{argv[0]} exited with status {proc.returncode} before becoming "
                f"healthy; last lines of {log_path}:\n{_log_tail(log_path)}"
            )
        if _healthy(health_url):
            return handle
        time.sleep(HEALTH_POLL_S)
    note = clock.note()
    handle.stop()
    raise ServerStartError(
        f"{argv[0]} was not healthy at {health_url} within {timeout_s:g}s{note}; "
        f"last lines of {log_path}:\n{_log_tail(log_path)}"
    )


def _pump_stdout_to_log(proc: subprocess.Popen[bytes], log_path: Path) -> Any:
    import threading

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout, open_append(log_path) as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def sim_command(sim_argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "harness", "sim", "--host", "127.0.0.1", "--port", "0", *sim_argv]


def start_sim(
    sim_argv: list[str], log_path: Path, timeout_s: float = 30.0, api_key: str | None = None
) -> ServerHandle:
    """Start the built-in simulator on an ephemeral 127.0.0.1 port and wait for its URL line."""
    argv = sim_command(sim_argv)
    env = dict(os.environ)
    if api_key:
        env["HARNESS_SIM_API_KEY"] = api_key
    proc = _spawn(argv, log_path, env)
    assert proc.stdout is not None
    handle = ServerHandle(argv, proc, log_path, "", "simulator")
    _live.add(handle)
    clock = _StartClock(proc.pid, timeout_s)
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    note = ""
    try:
        while True:  # what the simulator wrote is read before the deadline is checked
            if sel.select(timeout=max(0.0, min(0.2, clock.left_s()))):
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                m = _LISTEN_RE.search(buf.decode("utf-8", "replace"))
                if m:
                    handle.base_url = m.group(1).rstrip("/")
                    with open_append(log_path) as log:
                        log.write(buf)
                    handle.pump = _pump_stdout_to_log(proc, log_path)
                    return handle
            elif proc.poll() is not None:
                break
            if clock.left_s() <= 0:
                note = f" within {timeout_s:g}s{clock.note()}"
                break
    finally:
        sel.close()
    handle.stop()
    with open_append(log_path) as log:
        log.write(buf)
    raise ServerStartError(
        f"the simulator did not start{note} (status {proc.returncode}); last lines of "
        f"{log_path}:\n{_log_tail(log_path)}"
    )


def start_from_config(
    cfg: ConfigFile,
    engine: str | None = None,
    log_path: Path | None = None,
    overrides: Mapping[str, object] | None = None,
    timeout_s: float | None = None,
) -> tuple[ServerPlan, ServerHandle]:
    """Start config.toml's server and wait until /health answers (sweeps call this per setting).

    The log goes to `log_path` (default: [server] log_dir / <engine>-<port>.log). Raises
    ServerStartError with the log's last lines when it dies or is not healthy in time."""
    plan = plan_server(cfg, engine, overrides)
    if log_path is None:
        port = plan.base_url.rsplit(":", 1)[-1]
        log_path = Path(cfg.server.log_dir) / f"{plan.engine.replace('.', '')}-{port}.log"
    try:
        handle = start_server(
            plan.argv,
            health_url=plan.health_url,
            base_url=plan.base_url,
            log_path=log_path,
            timeout_s=timeout_s or cfg.server.start_timeout_s,
            kind=plan.engine,
            env=server_env(plan),
        )
    except ServerStartError:
        if plan.engine == "vllm" and NO_VLLM_RE.search(_log_tail(log_path)):
            raise vllm_missing(plan.argv[0], cfg, (overrides or {}).get("python")) from None
        raise
    handle.env_keys = [k for k, _ in plan.env]
    return plan, handle


# Re-exported: what config.toml starts (engine_argv) and the simulator's log (sim_log).
__all__ = [
    "DEV_MODE_ENV",
    "ENGINE_CHOICES",
    "MODELS_TIMEOUT_S",
    "NO_VLLM_RE",
    "PROMPT_TOKENS_DETAILS_FLAG",
    "ServerPlan",
    "VLLM_MODULE",
    "llamacpp_server",
    "plan_server",
    "served_models",
    "server_env",
    "sim_argv_from_config",
    "vllm_argv",
    "vllm_missing",
    "vllm_python",
    "sim_summary",
]
