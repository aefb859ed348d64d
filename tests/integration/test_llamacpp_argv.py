"""harness.server.llamacpp without a server: lookup order, argv, context sizing, errors.

Fast and pure (fake binaries in tmp_path); the real server is exercised by test_llamacpp.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError, HarnessError
from harness.server import llamacpp


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'version: 1 (test)'\n")
    path.chmod(0o755)
    return path


def test_binary_lookup_order(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached = _exe(cache / "llamacpp" / "bin" / "llama-server")
    on_path = _exe(tmp_path / "pathdir" / "llama-server")
    explicit = _exe(tmp_path / "mine" / "llama-server-custom")
    env = {"HARNESS_CACHE_DIR": str(cache), "PATH": str(tmp_path / "nowhere")}
    assert llamacpp.find_server_binary(env) == cached
    env["PATH"] = str(on_path.parent)
    assert llamacpp.find_server_binary(env) == on_path
    env["HARNESS_LLAMA_SERVER"] = str(explicit)
    assert llamacpp.find_server_binary(env) == explicit


def test_bad_explicit_binary_names_the_variable(tmp_path: Path) -> None:
    env = {"HARNESS_LLAMA_SERVER": str(tmp_path / "nope"), "PATH": ""}
    with pytest.raises(HarnessError, match="HARNESS_LLAMA_SERVER"):
        llamacpp.find_server_binary(env)


def test_missing_binary_and_model_say_how_to_install(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    with pytest.raises(HarnessError, match="install_llamacpp.sh"):
        llamacpp.find_server_binary(env)
    with pytest.raises(HarnessError, match="install_llamacpp.sh"):
        llamacpp.find_model(None, env)
    assert "install_llamacpp.sh" in (llamacpp.available(env) or "")


def test_model_lookup_order(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached = cache / "models" / llamacpp.DEFAULT_MODEL_FILE
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF")
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    env = {"HARNESS_CACHE_DIR": str(cache)}
    assert llamacpp.find_model(None, env) == cached
    assert llamacpp.find_model(None, {**env, "HARNESS_LLAMA_MODEL": str(other)}) == other
    assert llamacpp.find_model(str(other), env) == other
    with pytest.raises(ConfigError, match="no such GGUF"):
        llamacpp.find_model(tmp_path / "missing.gguf", env)


def test_argv_fits_every_slot() -> None:
    argv = llamacpp.server_argv(
        "/bin/llama-server",
        "/m/gemma-3-270m-q4_k_m.gguf",
        port=8123,
        parallel=4,
        ctx_per_slot=512,
        threads=2,
        extra_args=["--no-webui"],
    )
    assert argv == [
        "/bin/llama-server",
        "--model",
        "/m/gemma-3-270m-q4_k_m.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--parallel",
        "4",
        "--ctx-size",
        "2048",
        "--alias",
        "gemma-3-270m-q4_k_m",
        "--cont-batching",
        "--metrics",
        "--threads",
        "2",
        "--no-webui",
    ]
    assert llamacpp.ctx_size(8, 256) == 2048


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"parallel": 0}, "parallel"),
        ({"ctx_per_slot": 8}, "ctx_per_slot"),
        ({"port": 0}, "port"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_values_are_config_errors(kwargs: dict[str, int], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        llamacpp.server_argv("llama-server", "m.gguf", **kwargs)  # type: ignore[arg-type]
    assert err.value.key == key


def test_server_urls(tmp_path: Path) -> None:
    srv = llamacpp.LlamaCppServer(
        model=tmp_path / "x.gguf", binary=tmp_path / "llama-server", port=9000, parallel=2
    )
    assert srv.base_url == "http://127.0.0.1:9000/v1"
    assert srv.health_url == "http://127.0.0.1:9000/health"
    assert srv.metrics_url == "http://127.0.0.1:9000/metrics"
    assert srv.model_name == "x"
    assert "--parallel" in srv.argv()


def test_server_version_of_a_fake_binary(tmp_path: Path) -> None:
    assert llamacpp.server_version(_exe(tmp_path / "llama-server")) == "version: 1 (test)"
