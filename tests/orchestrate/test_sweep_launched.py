"""A sweep over a server started from config.toml (llama.cpp here, faked by the simulator behind
llama-server's flags): one server per setting, through the same launcher code as `serve`."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.orchestrate.sweep import load_sweep, run_sweep

TESTS = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

SCENARIO = """
name = "base"
seed = 2
[workload]
prompt_tokens = { dist = "fixed", value = 32 }
output_tokens = { dist = "fixed", value = 16 }
[[phases]]
name = "main"
duration = "2s"
arrival = { process = "poisson", rate = 5 }
"""


def setup_files(tmp_path: Path, kind: str = "llama.cpp") -> Path:
    fake = tmp_path / "llama-server"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {TESTS / "fake_engine.py"} llama "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    # the alias llama-server reports is the file's stem: the simulator's model name
    (tmp_path / "Qwen2.5-7B-Instruct.gguf").write_bytes(b"GGUF")
    (tmp_path / "config.toml").write_text(
        f'[server]\nengine = "llama.cpp"\nport = 8000\nstart_timeout = "60s"\n[model]\npath = "{tmp_path / "Qwen2.5-7B-Instruct.gguf"}"\n'
    )
    (tmp_path / "base.toml").write_text(SCENARIO)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'name = "ll"\nscenario = "base.toml"\n[server]\nkind = "{kind}"\nconfig = "config.toml"\n'
        "vary = { max_num_seqs = [1, 4] }\n[load]\nrate = [4.0]\n"
    )
    return sweep


def test_llamacpp_sweep_starts_one_server_per_setting(tmp_path, monkeypatch):
    sweep = setup_files(tmp_path)
    monkeypatch.setenv("HARNESS_LLAMA_SERVER", str(tmp_path / "llama-server"))
    monkeypatch.chdir(tmp_path)
    spec = load_sweep(str(sweep))
    assert spec.config == str(tmp_path / "config.toml")
    assert all(not any(s.startswith("sim.") for s in pt.sets) for pt in spec.points)
    summary = run_sweep(spec, tmp_path / "out", quiet=True)
    assert summary["sweep"]["finished"], summary
    assert [p["status"] for p in summary["points"]] == ["done", "done"]
    logs = sorted((tmp_path / "out").glob("server-*.log"))
    assert len(logs) == 2
    # Each server was started with its own --parallel (the fake passes it on as --max-num-seqs).
    assert "max_num_seqs 1," in logs[0].read_text() and "max_num_seqs 4," in logs[1].read_text()
    # Each result names the server it measured and its settings.
    import orjson

    for point, slots in zip(summary["points"], (1, 4), strict=True):
        r = orjson.loads((tmp_path / "out" / point["runs"][0]["result"]).read_bytes())
        assert r["target"]["server"]["engine"] == "llama.cpp"
        assert r["target"]["server"]["settings"]["max_num_seqs"] == slots
        assert f"--parallel {slots}" in r["target"]["server"]["command"]


def test_launched_sweep_needs_its_config(tmp_path):
    sweep = setup_files(tmp_path)
    (tmp_path / "config.toml").unlink()
    with pytest.raises(ConfigError, match=r"server.config: .*config.toml not found"):
        load_sweep(str(sweep))


def test_config_only_for_launched_kinds(tmp_path):
    sweep = setup_files(tmp_path, kind="sim")
    with pytest.raises(ConfigError, match="server.config: only for kind"):
        load_sweep(str(sweep))


def test_vllm_sweep_with_served_model_name_sends_the_served_name(tmp_path, monkeypatch):
    """Regression: with `--served-model-name tiny` in extra_args every point failed with
    `HTTP 404: The model <path> does not exist` (the sweep sent [model] name). The fake vLLM
    (the simulator behind vLLM's flags) answers only to the served name, as vLLM does."""
    sys.path.insert(0, str(TESTS / "server"))
    from test_launcher import fake_python

    (tmp_path / "config.toml").write_text(
        f'[server]\nengine = "vllm"\npython = "{fake_python(tmp_path)}"\nstart_timeout = "60s"\n'
        'extra_args = ["--served-model-name", "tiny"]\nenv = { VLLM_CPU_KVCACHE_SPACE = "1" }\n'
        f'[model]\nname = "{tmp_path / "models" / "tiny"}"\n'
    )
    (tmp_path / "base.toml").write_text(SCENARIO)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        'name = "v"\nscenario = "base.toml"\n[server]\nkind = "vllm"\nconfig = "config.toml"\n'
        "vary = { max_num_seqs = [2] }\n[load]\nrate = [4.0]\n"
    )
    monkeypatch.chdir(tmp_path)
    summary = run_sweep(load_sweep(str(sweep)), tmp_path / "out", quiet=True)
    assert [p["status"] for p in summary["points"]] == ["done"], summary
    import orjson

    r = orjson.loads((tmp_path / "out" / summary["points"][0]["runs"][0]["result"]).read_bytes())
    assert r["target"]["model"] == "tiny"
    assert r["target"]["server"]["env"] == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert r["summary"]["requests"]["failed"] == 0 and r["summary"]["requests"]["completed"] > 0
    assert "env VLLM_CPU_KVCACHE_SPACE=1" in (tmp_path / "out" / "server-00.log").read_text()
