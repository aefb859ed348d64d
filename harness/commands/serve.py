"""`harness serve`: start the server config.toml describes, wait until healthy, keep it up.

Prints the exact command line and the log path; Ctrl-C or SIGTERM stops the server (SIGTERM to
its process group, then SIGKILL), and so does any other exit of the harness.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from harness.argtable import Option, add_options, opt
from harness.config.configfile import DEFAULT_CONFIG_FILE, ConfigFile, load_config
from harness.config.sources import FILE_OPTIONS
from harness.server.launcher import ENGINE_CHOICES, plan_server, start_from_config
from harness.termtext import terminal_safe

SERVE_TABLE: tuple[Option, ...] = (
    *FILE_OPTIONS,
    opt("--engine", choices=ENGINE_CHOICES, help="override [server] engine"),
    opt("--host", help="override [server] host"),
    opt("--port", type=int, help="override [server] port"),
    opt("--max-num-seqs", type=int, help="override [server] max_num_seqs"),
    opt(
        "--python",
        metavar="PATH",
        help="override [server] python: the interpreter that runs "
        "vLLM (e.g. the venv scripts/install_vllm_cpu.sh makes)",
    ),
    opt("--log", metavar="PATH", help="server log (default [server] log_dir/<engine>-<port>.log)"),
    opt("--timeout", type=float, metavar="SECONDS", help="override [server] start_timeout"),
    opt("--dry-run", action="store_true", help="print the command line and exit"),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="start vLLM, llama.cpp or the simulator from config.toml",
        description="Start the server described by config.toml's [server], [model] and "
        "[engine] tables, wait until GET /health answers, and keep it running until "
        "Ctrl-C.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness serve --engine sim --port 8000\n"
        "  python -m harness serve --config config.toml --engine vllm\n"
        "  python -m harness serve --engine vllm --python ~/.cache/harness/vllm-cpu/venv/bin/python\n"
        "  python -m harness serve --engine llama.cpp --dry-run",
    )
    add_options(p, SERVE_TABLE)
    p.set_defaults(func=_main)


def _config(path: str | None) -> ConfigFile:
    if path or Path(DEFAULT_CONFIG_FILE).is_file():
        return load_config(path or DEFAULT_CONFIG_FILE)
    return ConfigFile(path="(defaults: no config.toml)")


def command_line(env: Sequence[tuple[str, str]], argv: Sequence[str]) -> str:
    """The server's command line as a shell reads it back: `K=V` assignments (values quoted, so
    each stays an assignment), then `shlex.join(argv)`; controls escaped (harness.termtext)."""
    assigns = [f"{k}={shlex.quote(str(v))}" for k, v in env]
    return terminal_safe(" ".join([*assigns, shlex.join(argv)]), keep_newlines=False)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve_command(a: argparse.Namespace) -> int:
    cfg = _config(a.config)
    overrides = {
        k: v
        for k, v in (
            ("host", a.host),
            ("port", a.port),
            ("max_num_seqs", a.max_num_seqs),
            ("python", a.python),
        )
        if v is not None
    }
    plan = plan_server(cfg, a.engine, overrides)
    print(f"command: {command_line(plan.env, plan.argv)}", flush=True)
    if a.dry_run:
        return 0
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    handle = None
    try:
        plan, handle = start_from_config(
            cfg, a.engine, Path(a.log) if a.log else None, overrides, a.timeout
        )
        print(
            f"{plan.engine} is healthy at {plan.base_url} (OpenAI API: {plan.base_url}/v1"
            f"{f', model {plan.model}' if plan.model else ''}); log: {handle.log_path.absolute()}; Ctrl-C stops it",
            flush=True,
        )
        while handle.proc.poll() is None:
            time.sleep(0.5)
        print(
            f"error: {plan.engine} exited with status {handle.proc.returncode}; see {handle.log_path}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("stopping the server", file=sys.stderr, flush=True)
        return 0
    finally:
        if handle is not None:
            handle.stop()
        signal.signal(signal.SIGTERM, previous)


def _main(a: argparse.Namespace) -> int:
    return serve_command(a)
