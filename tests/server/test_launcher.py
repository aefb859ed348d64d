"""Command lines from config.toml, and starting/stopping servers (the simulator, a failing fake)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import urllib.request

import pytest

from harness.config.configfile import parse_config
from harness.server import launcher
from harness.server.launcher import ServerStartError, plan_server, start_from_config, start_server

CFG = parse_config(
    {
        "server": {
            "host": "127.0.0.1",
            "port": 8123,
            "max_num_seqs": 64,
            "max_num_batched_tokens": 4096,
            "extra_args": ["--swap-space", "8"],
        },
        "model": {
            "name": "Qwen/Qwen2.5-7B-Instruct",
            "dtype": "bfloat16",
            "gpu_memory_utilization": 0.85,
            "max_model_len": 4096,
        },
        "engine": {"enable_chunked_prefill": False, "block_size": 32},
    },
    "config.toml",
)


def test_vllm_command_line():
    p = plan_server(CFG, "vllm")
    assert p.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    line = " ".join(p.argv)
    for part in (
        "--model Qwen/Qwen2.5-7B-Instruct",
        "--host 127.0.0.1",
        "--port 8123",
        "--dtype bfloat16",
        "--gpu-memory-utilization 0.85",
        "--max-model-len 4096",
        "--max-num-seqs 64",
        "--max-num-batched-tokens 4096",
        "--block-size 32",
        "--no-enable-chunked-prefill",
    ):
        assert part in line
    assert p.argv[-2:] == ["--swap-space", "8"]
    assert p.health_url == "http://127.0.0.1:8123/health"


def test_sweep_overrides():
    assert "--max-num-seqs 8" in " ".join(plan_server(CFG, "vllm", {"max_num_seqs": 8}).argv)


def test_llamacpp_command_line(tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    cfg = parse_config(
        {
            "server": {"port": 8124, "max_num_seqs": 4},
            "model": {"path": str(model), "max_model_len": 1024},
        },
        "c.toml",
    )
    import os

    env = {**os.environ, "HARNESS_LLAMA_SERVER": str(binary)}
    from harness.server.launcher import llamacpp_server

    argv = llamacpp_server(cfg, env=env).argv()
    line = " ".join(argv)
    assert argv[0] == str(binary)
    for part in (
        f"--model {model}",
        "--port 8124",
        "--parallel 4",
        "--ctx-size 4096",
        "--cont-batching",
        "--metrics",
    ):
        assert part in line


def test_sim_command_line_maps_hf_id_to_preset():
    argv = plan_server(CFG, "sim").argv
    line = " ".join(argv)
    assert (
        "--model Qwen2.5-7B-Instruct" in line
        and "--no-chunked-prefill" in line
        and "--max-num-seqs 64" in line
    )


def test_sim_unknown_model_is_config_error():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="model.name"):
        plan_server(parse_config({"model": {"name": "no/such"}}, "c.toml"), "sim")


def test_fake_command_that_fails_to_start(tmp_path):
    argv = [
        sys.executable,
        "-c",
        "import sys; print('loading...'); print('CUDA out of memory', file=sys.stderr); sys.exit(3)",
    ]
    with pytest.raises(ServerStartError) as e:
        start_server(
            argv,
            health_url="http://127.0.0.1:9/health",
            base_url="http://127.0.0.1:9",
            log_path=tmp_path / "fake.log",
            timeout_s=20,
        )
    assert "exited with status 3" in str(e.value) and "CUDA out of memory" in str(e.value)


def test_never_healthy_times_out_and_is_stopped(tmp_path, monkeypatch):
    # No Python runs in the child between fork and exec (a preexec_fn could hang there on a lock
    # another thread held at the fork): the parent-death signal is set by an exec shim.
    kwargs: dict[str, object] = {}
    popen = subprocess.Popen

    def spy(args, **kw):
        kwargs.update(kw)
        return popen(args, **kw)

    monkeypatch.setattr(launcher.subprocess, "Popen", spy)
    argv = [sys.executable, "-c", "import time; print('hung', flush=True); time.sleep(60)"]
    with pytest.raises(ServerStartError, match="not healthy .* within 1s") as e:
        start_server(
            argv,
            health_url="http://127.0.0.1:9/health",
            base_url="http://127.0.0.1:9",
            log_path=tmp_path / "hung.log",
            timeout_s=1,
        )
    assert "hung" in str(e.value)  # the shim ran the program
    assert kwargs and kwargs.get("preexec_fn") is None
    if sys.platform == "linux":  # what it did meanwhile: a hung server from a starved one
        assert re.search(
            r"within 1s \(in [\d.]+ s it ran \d+\.\d CPU-s and waited \d+\.\d s ", str(e.value)
        )


def test_a_simulator_that_misses_its_deadline_says_what_it_did(tmp_path):
    with pytest.raises(ServerStartError, match=r"the simulator did not start within 0\.01s") as e:
        launcher.start_sim([], tmp_path / "sim.log", timeout_s=0.01)
    if sys.platform == "linux":
        assert re.search(r"0\.01s \(in [\d.]+ s it ran \d+\.\d CPU-s and waited ", str(e.value))


def test_missing_binary(tmp_path):
    with pytest.raises(ServerStartError, match="cannot start"):
        start_server(
            [str(tmp_path / "nope")],
            health_url="http://127.0.0.1:9/h",
            base_url="x",
            log_path=tmp_path / "l.log",
            timeout_s=1,
        )


@pytest.mark.slow
def test_start_sim_from_config_and_stop(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = parse_config({"server": {"engine": "sim", "port": port, "max_num_seqs": 8}}, "c.toml")
    plan, handle = start_from_config(
        cfg, log_path=tmp_path / "sim.log", overrides={"speedup": 100}, timeout_s=30
    )
    with handle, urllib.request.urlopen(plan.base_url + "/v1/models", timeout=5) as r:
        assert r.status == 200
    assert handle.proc.poll() is not None  # stopped on leaving the block
    assert (tmp_path / "sim.log").read_text()


def fake_python(tmp_path):
    """An 'interpreter' for [server] python that runs tests/fake_engine.py vllm in place of
    `-m vllm.entrypoints.openai.api_server` (the first two arguments)."""
    from pathlib import Path

    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve().parent.parent / "fake_engine.py"
    fake.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {script} vllm "$@"\n')
    fake.chmod(0o755)
    return fake


def test_server_python_runs_vllm_and_serve_python_overrides_it(tmp_path):
    fake = fake_python(tmp_path)
    cfg = parse_config({"server": {"python": str(fake)}, "model": {"name": "/m"}}, "c.toml")
    assert plan_server(cfg, "vllm").argv[0] == str(fake)
    other = fake_python(tmp_path / "o")
    assert plan_server(cfg, "vllm", {"python": str(other)}).argv[0] == str(other)
    # default: the interpreter running the harness
    assert (
        plan_server(parse_config({"model": {"name": "/m"}}, "c.toml"), "vllm").argv[0]
        == sys.executable
    )


def test_server_python_that_is_not_an_interpreter_is_a_config_error(tmp_path):
    from harness.errors import ConfigError

    cfg = parse_config(
        {"server": {"python": str(tmp_path / "nope")}, "model": {"name": "/m"}}, "c.toml"
    )
    with pytest.raises(ConfigError, match=r"server.python: .*nope.*install_vllm_cpu.sh"):
        plan_server(cfg, "vllm")
    with pytest.raises(ConfigError, match=r"--python"):
        plan_server(
            parse_config({"model": {"name": "/m"}}, "c.toml"),
            "vllm",
            {"python": str(tmp_path / "x")},
        )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"env": "x"}, "expected a table"),  # not a table
        ({"env": {"1BAD": "x"}}, "not an environment variable name"),  # bad name
        ({"env": {"A": [1]}}, "expected a string or a number"),  # bad value
        ({"python": ""}, "path of a Python interpreter"),  # empty path
    ],
)
def test_server_env_and_python_validation(env, message):
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_config({"server": env}, "c.toml")


def test_served_model_name_is_the_model_requests_carry():
    from harness.config.configfile import served_model_name

    for extra, want in (
        (["--served-model-name", "tiny"], "tiny"),
        (["--served-model-name=tiny"], "tiny"),
        (["--swap-space", "8"], None),
        (["--served-model-name"], None),
    ):
        cfg = parse_config(
            {"server": {"extra_args": extra}, "model": {"name": "/models/x"}}, "c.toml"
        )
        assert served_model_name(cfg) == want
        assert plan_server(cfg, "vllm").model == (want or "/models/x")


@pytest.mark.slow
def test_vllm_from_config_gets_its_env_and_lists_its_served_name(tmp_path):
    import socket

    from harness.server.launcher import served_models

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = parse_config(
        {
            "server": {
                "python": str(fake_python(tmp_path)),
                "port": port,
                "env": {"VLLM_CPU_KVCACHE_SPACE": 1},
                "extra_args": ["--served-model-name", "tiny"],
            },
            "model": {"name": str(tmp_path / "model")},
        },
        "c.toml",
    )
    plan, handle = start_from_config(cfg, "vllm", log_path=tmp_path / "v.log", timeout_s=30)
    with handle:
        assert served_models(plan.base_url) == ["tiny"] and plan.model == "tiny"
    assert "env VLLM_CPU_KVCACHE_SPACE=1" in (tmp_path / "v.log").read_text()
    assert handle.env_keys == ["VLLM_CPU_KVCACHE_SPACE"]


def test_vllm_is_asked_for_cached_tokens_unless_extra_args_say_otherwise():
    assert plan_server(CFG, "vllm").argv.count("--enable-prompt-tokens-details") == 1
    off = parse_config(
        {
            "server": {"extra_args": ["--no-enable-prompt-tokens-details"]},
            "model": {"name": "m"},
        },
        "config.toml",
    )
    argv = plan_server(off, "vllm").argv
    assert "--enable-prompt-tokens-details" not in argv
    assert argv[-1] == "--no-enable-prompt-tokens-details"


def test_reset_prefix_cache_starts_vllm_in_dev_mode_once():
    from harness.orchestrate.servers import with_dev_mode

    cfg = with_dev_mode(CFG)
    assert ("VLLM_SERVER_DEV_MODE", "1") in cfg.server.env
    assert with_dev_mode(cfg).server.env == cfg.server.env  # set already: left as it is


# Alone: its busy loops must hold every CPU for 3 s, and then the idle-priority simulator needs
# the CPUs back. Beside other tests at normal priority (the inner loop runs slow-kind tests
# first) it got 0.3 CPU-s in 15 s and was rightly failed at STARVED_FACTOR x its deadline.
@pytest.mark.exclusive
@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_a_server_starved_of_cpu_is_not_failed_for_it(tmp_path):
    # A server that waits for a CPU has not hung: its start deadline counts its own time. The
    # simulator starts at idle priority while every CPU spins at normal priority for 3 s, so it
    # gets almost nothing until then; its 1.5 s deadline must not run out meanwhile.
    spin = "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in os.sched_getaffinity(0)]
    got: list[object] = []

    def start() -> None:  # on a thread of its own, which the simulator's priority comes from
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        try:
            handle = launcher.start_sim([], tmp_path / "sim.log", timeout_s=1.5)
            got.append(handle.base_url)
            handle.stop()
        except ServerStartError as exc:
            got.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    for hog in hogs:
        hog.wait()
    assert got and isinstance(got[0], str) and got[0].startswith("http://127.0.0.1:"), got


@pytest.mark.parametrize(
    ("state", "runs", "counts_as_waiting"),
    [
        ("R", False, True),  # runnable, never on a CPU: a wait going on, not yet in schedstat
        ("R", True, False),  # runnable and running: its own time
        ("S", False, False),  # asleep (hung, or waiting for its port): its own time
    ],
)
def test_a_start_deadline_counts_a_wait_still_going_on(monkeypatch, state, runs, counts_as_waiting):
    # The kernel adds a wait to /proc/PID/schedstat when it ends: a server starved from its
    # first instant shows none there, and a simulator at idle priority beside busy tests was
    # failed after 1.86 s in which it ran 0.0 CPU-s and was said to have waited 0.2 s.
    now = [100.0]
    ran = [0.0]
    monkeypatch.setattr(launcher.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(launcher, "_sched", lambda pid: (ran[0], 0.2, state == "R"))
    clock = launcher._StartClock(pid=1, timeout_s=1.5, started=now[0])
    for _ in range(10):  # 2 s of polls, 0.2 s apart
        now[0] += 0.2
        ran[0] += 0.2 if runs else 0.0
        left = clock.left_s()
    if counts_as_waiting:
        assert left > 1.0, left  # 2 s of waiting is not its own time
        assert "waited 2.0 s for a CPU: the machine is overloaded" in clock.note()
    else:
        assert left < 0, left  # 2 s of its own time: past the 1.5 s deadline
    now[0] += 20.0  # and never more than STARVED_FACTOR x the deadline in wall time
    assert clock.left_s() < 0
