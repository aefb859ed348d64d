"""Configs users already have (issue 15 item 7): vLLM's "no key" placeholder is accepted and
explained, a real key in config.toml is refused without being shown, and the two common
skeletons (tests/data/configs/) load verbatim and give a clean `run --explain` and `check`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.configfile import load_config
from harness.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SKELETONS = ROOT / "tests" / "data" / "configs"
CLIENT = SKELETONS / "client_config.toml"
VLLM = SKELETONS / "vllm_taotoken_config.toml"


@pytest.mark.parametrize("value", ['"EMPTY"', '""', '" EMPTY "'])
def test_no_key_placeholders_mean_no_key(tmp_path, value):
    p = tmp_path / "config.toml"
    p.write_text(f"[api]\napi_key = {value}\n")
    assert load_config(p).api.no_key == value.strip('"').strip()


@pytest.mark.parametrize(
    "value",
    [
        '"sk-live-abcdef1234567890"',  # an OpenAI-style key
        '"tt_9f8e7d6c5b4a"',  # any other string
        '"empty-ish"',  # not exactly the placeholder
        "12345678",
    ],
)  # not even a string
def test_a_real_key_is_refused_without_its_value(tmp_path, value):
    p = tmp_path / "config.toml"
    p.write_text(f'[api]\napi_key_env = "MY_KEY"\napi_key = {value}\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert (e.value.key, e.value.line) == ("api.api_key", 3)
    assert "export MY_KEY=" in msg and "settings.json" in msg and '"EMPTY"' in msg
    secret = value.strip('"')
    assert secret[:4] not in msg  # no part of the value, not even its first characters


def test_skeletons_load_verbatim():
    client = load_config(CLIENT)
    assert (client.inference.max_tokens, client.timeout.read_s, client.timeout.retry) == (
        512,
        300,
        3,
    )
    vllm = load_config(VLLM)
    assert (vllm.api.base_url, vllm.api.no_key, vllm.server.max_num_seqs) == (
        "https://taotoken.net/api",
        "EMPTY",
        256,
    )


@pytest.mark.parametrize("skeleton", [CLIENT, VLLM], ids=["client", "vllm"])
def test_skeleton_gives_a_clean_explain(tmp_path, monkeypatch, capsys, skeleton):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)
    shutil.copy(skeleton, tmp_path / "config.toml")  # verbatim, found as ./config.toml
    rc = main(["run", str(ROOT / "scenarios" / "steady.toml"), "--explain"])
    captured = capsys.readouterr()
    assert rc == 0 and "error" not in captured.err, captured.err
    assert "api_key" in captured.out
    if skeleton is VLLM:
        assert 'config.toml [api] api_key = "EMPTY" means no key' in captured.out
        assert "https://taotoken.net/api" in captured.out


@pytest.mark.slow
@pytest.mark.parametrize("skeleton", [CLIENT, VLLM], ids=["client", "vllm"])
def test_skeleton_gives_a_clean_check(tmp_path, monkeypatch, capsys, skeleton):
    from harness.server.launcher import start_sim

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)
    shutil.copy(skeleton, tmp_path / "config.toml")
    # The files' own gateway is not reachable from a test: the target is a simulator serving
    # the files' model name, as the vLLM the skeleton describes would.
    with start_sim(
        ["--speedup", "200", "--served-model-name", "Qwen/Qwen2.5-7B-Instruct"],
        tmp_path / "sim.log",
    ) as sim:
        rc = main(["check", "--target", sim.base_url])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "FAIL" not in out
