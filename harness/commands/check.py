"""`harness check`: a doctor for the target chain, printed as a checklist.

Files found and parsed -> URL shape -> key found (masked) and from where -> the network steps of
`harness.client.check`. Exit 0 only when nothing failed (warnings do not fail); 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from harness.argtable import Option, add_options, opt
from harness.client.adapt import RequestShape
from harness.client.check import FAIL, PASS, SKIP, WARN, Step, run_checks
from harness.config.configfile import DEFAULT_CONFIG_FILE, ConfigFile, load_config
from harness.config.resolve import (
    FILE_OPTIONS,
    KEY_ENV_OPTION,
    CliValues,
    Resolution,
    Sources,
    resolve,
)
from harness.config.scenario import ENDPOINTS
from harness.config.settings import (
    DEFAULT_SETTINGS_FILE,
    Settings,
    exposure_warnings,
    load_settings,
)
from harness.config.target import Target, target_arg
from harness.errors import ConfigError
from harness.orchestrate.scenario import load_scenario
from harness.termtext import terminal_safe

CHECK_TABLE: tuple[Option, ...] = (
    opt("--target", type=target_arg, help="base URL (overrides the files)"),
    opt("--model", help="model name (overrides the files)"),
    opt("--endpoint", choices=ENDPOINTS, help="OpenAI endpoint (default chat)"),
    opt("--insecure", action="store_true", help="do not verify the server's TLS certificate"),
    opt(
        "--scenario",
        metavar="SCENARIO.toml",
        help="check the request shape this scenario sends (ignore_eos, extra_body, sampling); "
        "default: ignore_eos and per-chunk usage, as the shipped scenarios",
    ),
    KEY_ENV_OPTION,
    *FILE_OPTIONS,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="check settings, key and target step by step (a doctor)",
        description="Walk the chain settings.json / config.toml -> key -> /health -> "
        "/v1/models -> one request -> one stream, and say what failed, why and how to "
        "fix it. Exit 0 only if every step passed.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness check\n"
        "  python -m harness check --target http://127.0.0.1:8000 --model Qwen2.5-7B-Instruct\n"
        "  python -m harness check --settings ~/taotoken.json\n"
        "  python -m harness check --scenario scenarios/steady.toml --target https://my-gateway/v1",
    )
    add_options(p, CHECK_TABLE)
    p.set_defaults(func=_main)


def _load_files(settings: str | None, config: str | None) -> tuple[Sources, list[Step]]:
    steps = []
    st: Settings | None = None
    cf: ConfigFile | None = None
    loaders: tuple[tuple[str, str | None, str, Callable[[Path], Settings | ConfigFile]], ...] = (
        ("settings", settings, DEFAULT_SETTINGS_FILE, load_settings),
        ("config", config, DEFAULT_CONFIG_FILE, load_config),
    )
    for label, arg, default, loader in loaders:
        path = Path(arg or default)
        if not arg and not path.is_file():
            steps.append(Step(f"{default}", SKIP, "not in the working directory"))
            continue
        try:
            loaded = loader(path)
        except ConfigError as exc:
            steps.append(
                Step(
                    str(path),
                    FAIL,
                    "cannot be used",
                    str(exc),
                    f"fix the file (see {DEFAULT_SETTINGS_FILE.replace('.json', '.example.json')} and "
                    "docs/targets.md)"
                    if label == "settings"
                    else "fix the file (see docs/targets.md)",
                )
            )
            continue
        if isinstance(loaded, Settings):
            st = loaded
            steps.append(Step(str(path), PASS, f"found and parsed ({loaded.shape} shape)"))
            if loaded.file_key:
                steps += [
                    Step(
                        str(path),
                        WARN,
                        "key exposed",
                        w,
                        "keep keys in the environment or an "
                        "ignored settings.json readable only by you",
                    )
                    for w in exposure_warnings(path)
                ]
        else:
            cf = loaded
            steps.append(Step(str(path), PASS, "found and parsed"))
    return Sources(st, cf), steps


def _print(step: Step) -> None:
    """One step, its texts (which quote the server) escaped for the terminal."""
    print(f"  {step.status}  {terminal_safe(step.name)}: {terminal_safe(step.detail)}")
    if step.status in (FAIL, WARN):
        if step.cause:
            print(f"        cause: {terminal_safe(step.cause)}")
        if step.fix:
            print(f"        fix:   {terminal_safe(step.fix)}")


def check_command(a: argparse.Namespace) -> int:
    shape, temperature, top_p = _request_shape(a)
    src, steps = _load_files(a.settings, a.config)
    cli = CliValues(a.target, a.model, a.endpoint, a.insecure, a.api_key_env)
    try:
        res = resolve(cli, None, None, src)
    except ConfigError as exc:
        steps.append(
            Step("base URL", FAIL, "cannot be used", str(exc), "give http(s)://host[:port][/path]")
        )
        res = None
    target = res.target if res else None
    head = (
        f"harness check: {target.base_url} (model {target.model or '?'}, {target.endpoint})"
        if target
        else "harness check"
    )
    print(terminal_safe(head))
    for st in steps:
        _print(st)
    if res is None:
        return 1
    if target is None:
        _print(NO_TARGET)
        return 1
    local = _target_steps(res, target)
    for s in local:
        _print(s)
    net = asyncio.run(
        run_checks(
            target,
            health_path=res.health_path,
            max_tokens=res.max_tokens,
            read_timeout_s=res.read_timeout_s,
            shape=shape,
            temperature=temperature,
            top_p=top_p,
        )
    )
    for s in net:
        _print(s)
    return _summary([*steps, *local, *net])


NO_TARGET = Step(
    "target",
    FAIL,
    "no base URL anywhere",
    "nothing names a server to check",
    "give --target URL, settings.json base_url / local_engine, or config.toml [api] base_url",
)


def _request_shape(
    a: argparse.Namespace,
) -> tuple[RequestShape | None, float | None, float | None]:
    """The request shape, temperature and top_p of --scenario (None: the shipped scenarios');
    a bad scenario is exit 2 before anything is sent."""
    if not getattr(a, "scenario", None):
        return None, None, None
    wl = load_scenario(a.scenario).workload
    return RequestShape(wl.ignore_eos, True, dict(wl.extra_body)), wl.temperature, wl.top_p


def _target_steps(res: Resolution, target: Target) -> list[Step]:
    """What the resolved target says before anything is sent: URL warnings, the key, TLS."""
    steps = [Step("base URL", WARN, w) for w in res.warnings]
    if target.api_key:
        steps.append(Step("API key", PASS, f"{target.api_key.masked()} from {target.key_source}"))
    elif res.key_env:
        steps.append(
            Step(
                "API key",
                WARN,
                f"${res.key_env} is unset or empty and no file holds a key",
                "requests go without Authorization; fine for a local server without --api-key",
                f"export {res.key_env}=...",
            )
        )
    else:
        steps.append(
            Step(
                "API key",
                WARN,
                "none configured",
                "requests go without Authorization; fine for a local server without --api-key",
                "set provider.api_key_env in settings.json",
            )
        )
    if not target.tls_verify:
        steps.append(Step("TLS", WARN, "certificate verification is off (--insecure)"))
    return steps


def _summary(steps: list[Step]) -> int:
    """The closing line; 1 when any step failed, else 0."""
    failed = sum(1 for s in steps if s.status == FAIL)
    warned = sum(1 for s in steps if s.status == WARN)
    passed = sum(1 for s in steps if s.status == PASS)
    print(f"{'FAILED' if failed else 'OK'}: {passed} passed, {warned} warnings, {failed} failed")
    sys.stdout.flush()
    return 1 if failed else 0


def _main(a: argparse.Namespace) -> int:
    return check_command(a)
