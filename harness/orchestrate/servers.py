"""Start the server a scenario needs: the built-in simulator (from the scenario's `[sim]`), or
vLLM / llama.cpp from config.toml's `[server]` through the launcher. One helper for `run` (no
target given), `sweep` (one server per setting) and `capacity` (no target given).

What a started server returns is what the runs need to measure it: its base URL, the model it
serves, the target kind the result records ("simulator" for the built-in one, so nobody mistakes
a simulated figure for a measured one) and `info`, which the result keeps under
`target.server` (engine, command line, settings, the environment shown).
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.configfile import ConfigFile
from harness.server.launcher import (
    DEV_MODE_ENV,
    ServerHandle,
    served_models,
    start_from_config,
    start_sim,
)
from harness.sim.settings import SimSettings

LAUNCHED_ENGINES = ("vllm", "llama.cpp")  # started from config.toml through the launcher


@dataclass
class StartedServer:
    handle: ServerHandle
    base_url: str
    model: str | None  # what it serves (None: the scenario's [target] model decides)
    target_kind: str  # "simulator" or "http", as the result records it
    info: dict[str, Any]  # the result's target.server
    description: str = ""  # one line for the user: what was started

    def stop(self) -> None:
        self.handle.stop()


def start_simulator(sim_table: dict[str, Any], where: str, log_path: Path) -> StartedServer:
    """The built-in simulator with a scenario's [sim] settings. Raises ConfigError for a bad
    [sim] table and ServerStartError when it does not come up."""
    settings = SimSettings.from_mapping(sim_table, where)
    resolved = settings.resolved(where)  # vLLM's defaults applied: the limits the engine runs at
    handle = start_sim(settings.to_argv(), log_path)
    info = {
        "engine": "sim",
        "command": handle.command_line(),
        "settings": {k: v for k, v in dataclasses.asdict(settings).items() if v is not None},
        "limits": {
            "max_num_seqs": resolved.max_num_seqs,
            "max_num_batched_tokens": resolved.max_num_batched_tokens,
        },
    }
    return StartedServer(
        handle,
        handle.base_url,
        settings.model,
        "simulator",
        info,
        f"the built-in simulator at {handle.base_url} ({settings.gpu}, {settings.model})",
    )


def settings_text(settings: dict[str, Any]) -> str:
    """A server setting as the user wrote it: `max_num_seqs=64 enable_prefix_caching=false`."""
    return " ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in settings.items()
    )


def launch_line(server: StartedServer, log: Path) -> str:
    """What a sweep says when it has started a server: its description, the command line as a
    shell would take it (never a list's repr), and its log."""
    return f"{server.description}: {server.handle.command_line()}; log {log}"


SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASS")  # env values never written to results


def shown_env(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """[server] env as a result records it: values of secret-looking names cut to 6 characters."""
    return {
        k: (v[:6] + "***" if any(p in k.upper() for p in SECRET_NAME_PARTS) else v)
        for k, v in pairs
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_dev_mode(cfg: ConfigFile) -> ConfigFile:
    """config.toml with VLLM_SERVER_DEV_MODE=1 in [server] env (unless it sets the variable):
    vLLM then serves POST /reset_prefix_cache (--reset-prefix-cache), with its other dev routes."""
    if any(k == DEV_MODE_ENV for k, _ in cfg.server.env):
        return cfg
    server = dataclasses.replace(cfg.server, env=(*cfg.server.env, (DEV_MODE_ENV, "1")))
    return dataclasses.replace(cfg, server=server)


def start_launched(
    cfg: ConfigFile, engine: str, log_path: Path, overrides: dict[str, Any], want_model: bool = True
) -> StartedServer:
    """vLLM or llama.cpp from config.toml's [server] with `overrides` (a sweep's setting), on a
    free port unless `overrides` names one. Raises ConfigError / ServerStartError.

    The model: with `want_model`, the first the started server lists at GET /v1/models (vLLM
    answers to --served-model-name, not to [model] name), else the launcher's idea of the name;
    without (the scenario's [target] names one, and the run uses it), None."""
    plan, handle = start_from_config(cfg, engine, log_path, {"port": free_port(), **overrides})
    handle.shown_env = shown_env(plan.env)
    model = (next(iter(served_models(plan.base_url)), None) or plan.model) if want_model else None
    info: dict[str, Any] = {
        "engine": engine,
        "command": handle.command_line(),
        "settings": overrides,
        **({"env": handle.shown_env} if handle.shown_env else {}),
    }
    return StartedServer(
        handle,
        plan.base_url,
        model,
        "http",
        info,
        f"{engine} {settings_text(overrides) or '(config.toml as it is)'} at {plan.base_url}: "
        f"{handle.command_line()}",
    )


__all__ = [
    "LAUNCHED_ENGINES",
    "launch_line",
    "settings_text",
    "StartedServer",
    "free_port",
    "shown_env",
    "start_launched",
    "start_simulator",
    "with_dev_mode",
]
