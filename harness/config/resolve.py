"""Which target a command measures, and where each value came from.

Precedence, first found wins, value by value:

    command line  >  scenario [target]  >  settings.json  >  config.toml  >  default

With no URL anywhere, `run` starts the built-in simulator. The API key comes from the
environment variable named by the first `api_key_env` in that chain when it is set and
non-empty, else from settings.json's key; it is a `Secret` everywhere and `--explain` shows only
its first 6 characters. `settings.json` and `config.toml` are read from the working directory
when present; `--settings` / `--config` name other files (which then must exist).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from harness.argtable import opt
from harness.config.configfile import (
    DEFAULT_CONFIG_FILE,
    ConfigFile,
    MetricsCfg,
    load_config,
    served_model_name,
)
from harness.config.scenario import RetryPolicy, TargetOverrides
from harness.config.settings import DEFAULT_SETTINGS_FILE, Settings, load_settings, pick_key
from harness.config.target import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_FIRST_TOKEN_TIMEOUT_S,
    Secret,
    Target,
    Timeouts,
    header_value_problem,
    normalize_base_url,
)
from harness.errors import ConfigError


class Sampling(Protocol):
    """The part of a scenario's workload the target's files may fill in (a frozen dataclass:
    `harness.workload.scenario.Workload`; config reads it without importing the workload)."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...


CONFIG_RETRY_ON = ("connect", "429", "503")  # what `[timeout] retry` retries: never a 4xx mistake
KNOWN_HOSTS = {"taotoken.net": "/api"}  # gateways whose base URL needs a path


@dataclass(frozen=True)
class Sources:
    """The files a command read (None: absent) and notes on what was skipped."""

    settings: Settings | None = None
    config: ConfigFile | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CliValues:
    """What the command line said about the target (None: not given)."""

    target: str | None = None
    model: str | None = None
    endpoint: str | None = None
    insecure: bool = False
    api_key_env: str | None = None


# The variable a well-known gateway's users keep its key in: used when nothing names one, and
# only for that gateway's host, so a key is never sent to a server it does not belong to.
KNOWN_KEY_ENVS = {"taotoken.net": "TAOTOKEN_API_KEY", "api.openai.com": "OPENAI_API_KEY"}


def known_key_env(url: str | None) -> str | None:
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url.strip()).hostname or "") if url else ""
    except ValueError:
        return None
    return next((v for h, v in KNOWN_KEY_ENVS.items() if host == h or host.endswith("." + h)), None)


@dataclass
class Resolution:
    target: Target | None  # None: start the simulator
    explain: list[tuple[str, str, str]]  # (name, shown value, source)
    warnings: list[str]
    health_path: str | None = None  # set when the target is a local engine
    metrics: MetricsCfg = MetricsCfg()
    retry: RetryPolicy | None = None  # from config.toml, when the scenario has none
    workload: Any = None  # the scenario's Workload, with defaults filled in
    max_tokens: int | None = None  # for `check`'s requests
    read_timeout_s: float = DEFAULT_FIRST_TOKEN_TIMEOUT_S
    key_env: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    workers: int | str | None = None  # config.toml [client] workers (the command line wins)
    output_dir: str | None = None  # config.toml [output] dir (`--result-dir` wins)

    def explain_text(self) -> str:
        lines = [
            "effective target (first found wins: command line > scenario [target] > "
            "settings.json > config.toml > default):"
        ]
        width = max((len(n) for n, _, _ in self.explain), default=8)
        vwidth = min(max((len(v) for _, v, _ in self.explain), default=8), 44)
        for name, value, source in self.explain:
            lines.append(f"  {name:<{width}}  {value:<{vwidth}}  <- {source}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _no_key_note(cf: ConfigFile | None) -> str:
    """`; config.toml [api] api_key = "EMPTY" means no key` when the file says so (vLLM's placeholder)."""
    if cf is None or cf.api.no_key is None:
        return ""
    return f'; {cf.path} [api] api_key = "{cf.api.no_key}" means no key'


def _key_env_help() -> str:
    return (
        "environment variable holding the API key (default: as the files say; "
        + ", ".join(f"{v} for {h}" for h, v in KNOWN_KEY_ENVS.items())
        + ")"
    )


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise argparse.ArgumentTypeError(
            f"expected an environment variable name such as TAOTOKEN_API_KEY, "
            f"got {value[:6]!r}... (give the variable's name, not the key)"
        )
    return value


# --api-key-env NAME: the variable the key is read from (never the key on a command line).
KEY_ENV_OPTION = opt("--api-key-env", metavar="NAME", type=_env_name, help=_key_env_help())

# --settings and --config, shared by run, check, serve, sweep and capacity.
FILE_OPTIONS = (
    opt(
        "--settings",
        metavar="PATH",
        help=f"settings JSON (default: ./{DEFAULT_SETTINGS_FILE} when present)",
    ),
    opt(
        "--config",
        metavar="PATH",
        help=f"config TOML (default: ./{DEFAULT_CONFIG_FILE} when present)",
    ),
)


def load_sources(settings_path: str | None, config_path: str | None) -> Sources:
    """Read settings.json and config.toml. An explicit path must exist; a default one may not.

    Raises ConfigError for a named file that is missing or for any bad file."""
    notes = []
    settings = config = None
    sp = Path(settings_path or DEFAULT_SETTINGS_FILE)
    if settings_path or sp.is_file():
        settings = load_settings(sp)
    else:
        notes.append(f"no {DEFAULT_SETTINGS_FILE} in the working directory")
    cp = Path(config_path or DEFAULT_CONFIG_FILE)
    if config_path or cp.is_file():
        config = load_config(cp)
    else:
        notes.append(f"no {DEFAULT_CONFIG_FILE} in the working directory")
    return Sources(settings, config, tuple(notes))


def url_warnings(url: str) -> list[str]:
    """Warnings for URLs that parse but look like a typo of a known shape."""
    out = []
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    segs = [s for s in path.split("/") if s]
    for s in segs:
        if s != "v1" and (
            s.lower() in ("v1", "vl", "v1l", "v11", "v") or re.fullmatch(r"[vV][0-9lI]", s)
        ):
            out.append(f"{url}: path segment {s!r} looks like a typo of 'v1'")
    if path.endswith(("/chat", "/chat/completion", "/completion")):
        out.append(
            f"{url}: looks like part of an endpoint path; give the base URL (…/v1 or without it)"
        )
    host = (parts.hostname or "").lower()
    for known, need in KNOWN_HOSTS.items():
        if host == known or host.endswith("." + known):
            if not (path == need or path.startswith(need + "/")):
                out.append(
                    f"{url}: {known}'s OpenAI API lives under {need}: use https://{known}{need}"
                )
            if parts.scheme != "https":
                out.append(f"{url}: {known} is served over https")
    if url.strip() != url:
        out.append(f"{url!r}: has leading or trailing whitespace (removed)")
    return out


def _is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def _first(*chain: tuple[Any, str]) -> tuple[Any, str]:
    for value, source in chain:
        if value is not None:
            return value, source
    return None, ""


def resolve(
    cli: CliValues,
    scn_target: TargetOverrides | None,
    scn_path: str | None,
    src: Sources,
    workload: Sampling | None = None,
    env: Mapping[str, str] | None = None,
) -> Resolution:
    """Merge the command line, the scenario, settings.json and config.toml into a Target."""
    env = os.environ if env is None else env
    st = src.settings
    cf = src.config
    sc = scn_target or TargetOverrides()
    sname = st.path if st else DEFAULT_SETTINGS_FILE
    cname = cf.path if cf else DEFAULT_CONFIG_FILE
    spath = scn_path or "scenario"
    explain: list[tuple[str, str, str]] = []
    warnings: list[str] = []

    local = st is not None and st.local_engine.enabled
    url, url_src = _first(
        (cli.target, "--target"),
        (sc.url, f"{spath} [target] url"),
        (st.local_engine.endpoint if (st and local) else None, f"{sname} local_engine.endpoint"),
        (
            st.base_url if st else None,
            f"{sname} " + ("provider.base_url" if st and st.shape == "nested" else "base_url"),
        ),
        (cf.api.base_url if cf else None, f"{cname} [api] base_url"),
    )
    model, model_src = _first(
        (cli.model, "--model"),
        (sc.model, f"{spath} [target] model"),
        (
            st.model if st else None,
            f"{sname} " + ("defaults.model" if st and st.shape == "nested" else "default_model"),
        ),
        (cf.inference.model if cf else None, f"{cname} [inference] model"),
        *(
            ((served_model_name(cf), f"{cname} [server] extra_args --served-model-name"),)
            if cf
            else ()
        ),
        (cf.model.name if cf else None, f"{cname} [model] name"),
    )
    endpoint, ep_src = _first(
        (cli.endpoint, "--endpoint"),
        (sc.endpoint, f"{spath} [target] endpoint"),
        (cf.api.endpoint if cf else None, f"{cname} [api] endpoint"),
        ("chat", "default"),
    )
    key_env, key_env_src = _first(
        (cli.api_key_env, "--api-key-env"),
        (sc.api_key_env, f"{spath} [target] api_key_env"),
        (
            st.api_key_env if st else None,
            f"{sname} "
            + ("provider.api_key_env" if st and st.shape == "nested" else "env_fallback"),
        ),
        (cf.api.api_key_env if cf else None, f"{cname} [api] api_key_env"),
        (known_key_env(url), f"default for {url.strip() if url else ''}"),
    )
    file_key = st.file_key if st else None
    key_field = "provider.api_key" if st and st.shape == "nested" else "api_key"
    api_key, key_src = pick_key(key_env, file_key, f"{sname} {key_field}", env)
    if api_key and (problem := header_value_problem(api_key.reveal())):
        # HTTP cannot carry it (a pasted ellipsis, a trailing newline from a file): say so before a
        # request fails on it. The message shows the masked key and the position, never the rest.
        raise ConfigError(
            key_src, "", f"the API key ({api_key.masked()}) holds {problem}; copy it again"
        )
    empty_key_env = bool(
        key_env
        and not key_src.startswith("env")
        and env.get(key_env) is not None
        and not env.get(key_env, "").strip()
    )
    if empty_key_env and api_key:
        warnings.append(f"${key_env} is set but empty: using the key from {key_src}")

    connect_s, c_src = _first(
        (cf.timeout.connect_s if cf else None, f"{cname} [timeout] connect"),
        (DEFAULT_CONNECT_TIMEOUT_S, "default"),
    )
    read_s, r_src = _first(
        (st.timeout_s if st else None, f"{sname} provider.timeout_seconds"),
        (cf.timeout.read_s if cf else None, f"{cname} [timeout] read"),
        (None, ""),
    )
    timeouts = Timeouts(connect_s=connect_s)
    if read_s is not None:
        timeouts = replace(timeouts, first_token_s=read_s, idle_s=read_s)
    else:
        r_src = "default"

    wl: Any = workload
    temp, temp_src = _first(
        (wl.temperature if wl else None, f"{spath} [workload] temperature"),
        (st.temperature if st else None, f"{sname} defaults.temperature"),
        (cf.inference.temperature if cf else None, f"{cname} [inference] temperature"),
    )
    top_p, top_p_src = _first(
        (wl.top_p if wl else None, f"{spath} [workload] top_p"),
        (st.top_p if st else None, f"{sname} defaults.top_p"),
        (cf.inference.top_p if cf else None, f"{cname} [inference] top_p"),
    )
    if wl is not None:
        wl = replace(wl, temperature=temp, top_p=top_p)
    max_tokens, mt_src = _first(
        (st.max_tokens if st else None, f"{sname} defaults.max_tokens"),
        (cf.inference.max_tokens if cf else None, f"{cname} [inference] max_tokens"),
    )

    target: Target | None = None
    health_path: str | None = None
    if url is None:
        explain.append(
            (
                "base_url",
                "(built-in simulator)",
                f"no URL on the command line, scenario, {sname} or {cname}",
            )
        )
    else:
        where, key = (
            (url_src.split(" ", 1) + [""])[:2] if url_src != "--target" else ("--target", "url")
        )
        key = re.sub(
            r"\[(\w+)\] ", r"\1.", key
        )  # "[target] url" -> "target.url", as errors name keys
        base = normalize_base_url(url, where, key)  # first: it refuses credentials in the URL
        warnings += url_warnings(url)
        if empty_key_env and not api_key:
            # Almost always a typo or a shell that did not export the key: refuse, do not run keyless.
            raise ConfigError(
                f"environment variable {key_env}",
                "",
                f"is set but empty, and no key is in settings.json; export {key_env}=<your key>, "
                f"or unset it to send no key (named by {key_env_src})",
            )
        explain.append(
            (
                "base_url",
                base,
                url_src + (f" (given as {url.strip()})" if url.strip() != base else ""),
            )
        )
        if url_src.endswith("local_engine.endpoint") or _is_loopback(base):
            health_path = (
                st.local_engine.health_path
                if (st and local)
                else (cf.api.health_path if cf else "/health")
            )
        if base.startswith("http://") and api_key and not _is_loopback(base):
            warnings.append(f"{base}: the API key would travel unencrypted over http://")
        target = Target(
            "http",
            base,
            model,
            endpoint,
            api_key,
            key_src,
            headers=dict(st.headers) if st else {},
            tls_verify=not cli.insecure,
            timeouts=timeouts,
        )
    explain.append(
        ("model", model or "(the server's first, from GET /v1/models)", model_src or "default")
    )
    explain.append(("endpoint", endpoint, ep_src))
    explain.append(
        (
            "api_key",
            api_key.masked() if api_key else "(none)",
            (key_src + (f" (named by {key_env_src})" if key_src.startswith("env") else ""))
            if api_key
            else (
                f"${key_env} unset or empty (named by {key_env_src}), no key in {sname}"
                if key_env
                else "no api_key_env and no key in any file"
            )
            + _no_key_note(cf),
        )
    )
    if st and st.headers:
        explain.append(("headers", ", ".join(sorted(st.headers)), sname))
    explain.append(
        ("tls_verify", str(not cli.insecure).lower(), "--insecure" if cli.insecure else "default")
    )
    explain.append(("connect_timeout_s", f"{connect_s:g}", c_src))
    explain.append(("read_timeout_s", f"{timeouts.first_token_s:g}", r_src))
    if temp is not None:
        explain.append(("temperature", f"{temp:g}", temp_src))
    if top_p is not None:
        explain.append(("top_p", f"{top_p:g}", top_p_src))
    if max_tokens is not None:
        explain.append(("max_tokens (check)", str(max_tokens), mt_src))
    metrics = cf.metrics if cf else MetricsCfg()
    explain.append(
        (
            "server_metrics",
            (
                f"scrape {metrics.path} every {metrics.scrape_interval_s:g}s"
                if metrics.scrape
                else "off"
            ),
            f"{cname} [metrics]"
            if cf and any(p.startswith("metrics.") for p in cf.present)
            else "default",
        )
    )
    retry = None
    if cf and cf.timeout.retry:
        retry = RetryPolicy(CONFIG_RETRY_ON, cf.timeout.retry)
    if cf:
        warnings += cf.deprecations
    workers = cf.client.workers if cf else None
    if workers is not None:
        explain.append(("workers", str(workers), f"{cname} [client]"))
    output_dir = cf.output.dir if cf else None
    if output_dir is not None:
        explain.append(("results_dir", output_dir, f"{cname} [output] dir"))
    for note in src.notes:
        explain.append(("note", note, ""))
    return Resolution(
        target,
        explain,
        warnings,
        health_path,
        metrics,
        retry,
        wl,
        max_tokens,
        timeouts.first_token_s,
        key_env,
        workers=workers,
        output_dir=output_dir,
    )


__all__ = [
    "FILE_OPTIONS",
    "KEY_ENV_OPTION",
    "CliValues",
    "Resolution",
    "Secret",
    "Sources",
    "load_sources",
    "resolve",
    "url_warnings",
]
