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

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from harness.config.configfile import (
    DEFAULT_CONFIG_FILE,
    ConfigFile,
    MetricsCfg,
    served_model_name,
)
from harness.config.scenario import RetryPolicy, TargetOverrides
from harness.config.settings import DEFAULT_SETTINGS_FILE, Settings, pick_key
from harness.config.sources import (
    FILE_OPTIONS,
    KEY_ENV_OPTION,
    Sources,
    known_key_env,
    load_sources,
)
from harness.config.target import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_FIRST_TOKEN_TIMEOUT_S,
    Secret,
    Target,
    Timeouts,
    header_value_problem,
    is_loopback,
    normalize_base_url,
    url_warnings,
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


@dataclass(frozen=True)
class CliValues:
    """What the command line said about the target (None: not given)."""

    target: str | None = None
    model: str | None = None
    endpoint: str | None = None
    insecure: bool = False
    api_key_env: str | None = None


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


def _first(*chain: tuple[Any, str]) -> tuple[Any, str]:
    for value, source in chain:
        if value is not None:
            return value, source
    return None, ""


Pick = tuple[Any, str]  # a value and where it came from ("" / None: nowhere)
ExplainRow = tuple[str, str, str]  # (name, shown value, source)


@dataclass(frozen=True)
class _Chain:
    """The places a target value may come from, highest precedence first, and their names."""

    cli: CliValues
    sc: TargetOverrides
    st: Settings | None
    cf: ConfigFile | None
    sname: str  # settings.json's path, as --explain and errors name it
    cname: str  # config.toml's
    spath: str  # the scenario's

    @property
    def nested(self) -> bool:
        """settings.json in the nested shape (provider.*, defaults.*)."""
        return self.st is not None and self.st.shape == "nested"

    @property
    def local(self) -> bool:
        """settings.json names a local engine (local_engine.enabled)."""
        return self.st is not None and self.st.local_engine.enabled


@dataclass(frozen=True)
class _Key:
    """The API key: the variable that names it, the key found and where."""

    env: str | None
    env_src: str
    key: Secret | None
    src: str
    empty_env: bool  # the variable is set but empty (and the key, if any, came from a file)


def _chain(
    cli: CliValues, scn_target: TargetOverrides | None, scn_path: str | None, src: Sources
) -> _Chain:
    st, cf = src.settings, src.config
    return _Chain(
        cli,
        scn_target or TargetOverrides(),
        st,
        cf,
        st.path if st else DEFAULT_SETTINGS_FILE,
        cf.path if cf else DEFAULT_CONFIG_FILE,
        scn_path or "scenario",
    )


def _pick_url(ch: _Chain) -> Pick:
    st, cf = ch.st, ch.cf
    return _first(
        (ch.cli.target, "--target"),
        (ch.sc.url, f"{ch.spath} [target] url"),
        (
            st.local_engine.endpoint if (st and ch.local) else None,
            f"{ch.sname} local_engine.endpoint",
        ),
        (
            st.base_url if st else None,
            f"{ch.sname} " + ("provider.base_url" if ch.nested else "base_url"),
        ),
        (cf.api.base_url if cf else None, f"{ch.cname} [api] base_url"),
    )


def _pick_model(ch: _Chain) -> Pick:
    st, cf = ch.st, ch.cf
    return _first(
        (ch.cli.model, "--model"),
        (ch.sc.model, f"{ch.spath} [target] model"),
        (
            st.model if st else None,
            f"{ch.sname} " + ("defaults.model" if ch.nested else "default_model"),
        ),
        (cf.inference.model if cf else None, f"{ch.cname} [inference] model"),
        *(
            ((served_model_name(cf), f"{ch.cname} [server] extra_args --served-model-name"),)
            if cf
            else ()
        ),
        (cf.model.name if cf else None, f"{ch.cname} [model] name"),
    )


def _pick_endpoint(ch: _Chain) -> Pick:
    return _first(
        (ch.cli.endpoint, "--endpoint"),
        (ch.sc.endpoint, f"{ch.spath} [target] endpoint"),
        (ch.cf.api.endpoint if ch.cf else None, f"{ch.cname} [api] endpoint"),
        ("chat", "default"),
    )


def _pick_key(ch: _Chain, url: str | None, env: Mapping[str, str]) -> _Key:
    """The variable naming the key (first in the chain, else a known gateway's), and the key:
    from that variable when set and non-empty, else settings.json's. Raises ConfigError for a
    key HTTP cannot carry."""
    st, cf = ch.st, ch.cf
    key_env, key_env_src = _first(
        (ch.cli.api_key_env, "--api-key-env"),
        (ch.sc.api_key_env, f"{ch.spath} [target] api_key_env"),
        (
            st.api_key_env if st else None,
            f"{ch.sname} " + ("provider.api_key_env" if ch.nested else "env_fallback"),
        ),
        (cf.api.api_key_env if cf else None, f"{ch.cname} [api] api_key_env"),
        (known_key_env(url), f"default for {url.strip() if url else ''}"),
    )
    file_key = st.file_key if st else None
    key_field = "provider.api_key" if ch.nested else "api_key"
    api_key, key_src = pick_key(key_env, file_key, f"{ch.sname} {key_field}", env)
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
    return _Key(key_env, key_env_src, api_key, key_src, empty_key_env)


def _pick_timeouts(ch: _Chain) -> tuple[Timeouts, str, str]:
    """The timeouts, and where the connect and read timeouts came from."""
    st, cf = ch.st, ch.cf
    connect_s, c_src = _first(
        (cf.timeout.connect_s if cf else None, f"{ch.cname} [timeout] connect"),
        (DEFAULT_CONNECT_TIMEOUT_S, "default"),
    )
    read_s, r_src = _first(
        (st.timeout_s if st else None, f"{ch.sname} provider.timeout_seconds"),
        (cf.timeout.read_s if cf else None, f"{ch.cname} [timeout] read"),
        (None, ""),
    )
    timeouts = Timeouts(connect_s=connect_s)
    if read_s is None:
        return timeouts, c_src, "default"
    return replace(timeouts, first_token_s=read_s, idle_s=read_s), c_src, r_src


def _pick_sampling(
    ch: _Chain, workload: Sampling | None
) -> tuple[Any, int | None, list[ExplainRow]]:
    """The workload with temperature and top_p filled in from the files, `check`'s max_tokens,
    and their --explain rows."""
    st, cf = ch.st, ch.cf
    wl: Any = workload
    temp, temp_src = _first(
        (wl.temperature if wl else None, f"{ch.spath} [workload] temperature"),
        (st.temperature if st else None, f"{ch.sname} defaults.temperature"),
        (cf.inference.temperature if cf else None, f"{ch.cname} [inference] temperature"),
    )
    top_p, top_p_src = _first(
        (wl.top_p if wl else None, f"{ch.spath} [workload] top_p"),
        (st.top_p if st else None, f"{ch.sname} defaults.top_p"),
        (cf.inference.top_p if cf else None, f"{ch.cname} [inference] top_p"),
    )
    if wl is not None:
        wl = replace(wl, temperature=temp, top_p=top_p)
    max_tokens, mt_src = _first(
        (st.max_tokens if st else None, f"{ch.sname} defaults.max_tokens"),
        (cf.inference.max_tokens if cf else None, f"{ch.cname} [inference] max_tokens"),
    )
    rows = []
    if temp is not None:
        rows.append(("temperature", f"{temp:g}", temp_src))
    if top_p is not None:
        rows.append(("top_p", f"{top_p:g}", top_p_src))
    if max_tokens is not None:
        rows.append(("max_tokens (check)", str(max_tokens), mt_src))
    return wl, max_tokens, rows


def _http_target(
    ch: _Chain,
    url: Pick,
    model: str | None,
    endpoint: str,
    key: _Key,
    timeouts: Timeouts,
    warnings: list[str],
) -> tuple[Target, str | None, ExplainRow]:
    """The Target at `url`, the health path of a local engine, and base_url's --explain row;
    the URL's warnings appended to `warnings`. Raises ConfigError for a URL that cannot be used
    and for a key variable that is set but empty with no key in the files."""
    url_text, url_src = url
    where, name = (
        (url_src.split(" ", 1) + [""])[:2] if url_src != "--target" else ("--target", "url")
    )
    name = re.sub(
        r"\[(\w+)\] ", r"\1.", name
    )  # "[target] url" -> "target.url", as errors name keys
    base = normalize_base_url(url_text, where, name)  # first: it refuses credentials in the URL
    warnings += url_warnings(url_text)
    if key.empty_env and not key.key:
        # Almost always a typo or a shell that did not export the key: refuse, do not run keyless.
        raise ConfigError(
            f"environment variable {key.env}",
            "",
            f"is set but empty, and no key is in settings.json; export {key.env}=<your key>, "
            f"or unset it to send no key (named by {key.env_src})",
        )
    row = (
        "base_url",
        base,
        url_src + (f" (given as {url_text.strip()})" if url_text.strip() != base else ""),
    )
    st, cf = ch.st, ch.cf
    health_path = None
    if url_src.endswith("local_engine.endpoint") or is_loopback(base):
        health_path = (
            st.local_engine.health_path
            if (st and ch.local)
            else (cf.api.health_path if cf else "/health")
        )
    if base.startswith("http://") and key.key and not is_loopback(base):
        warnings.append(f"{base}: the API key would travel unencrypted over http://")
    target = Target(
        "http",
        base,
        model,
        endpoint,
        key.key,
        key.src,
        headers=dict(st.headers) if st else {},
        tls_verify=not ch.cli.insecure,
        timeouts=timeouts,
    )
    return target, health_path, row


def _key_row(ch: _Chain, key: _Key) -> ExplainRow:
    """api_key's --explain row: the masked key and where it came from, or why there is none."""
    if key.key:
        named = f" (named by {key.env_src})" if key.src.startswith("env") else ""
        return ("api_key", key.key.masked(), key.src + named)
    why = (
        f"${key.env} unset or empty (named by {key.env_src}), no key in {ch.sname}"
        if key.env
        else "no api_key_env and no key in any file"
    )
    return ("api_key", "(none)", why + _no_key_note(ch.cf))


def _config_extras(
    ch: _Chain, explain: list[ExplainRow], warnings: list[str]
) -> tuple[MetricsCfg, RetryPolicy | None, int | str | None, str | None]:
    """What config.toml says beyond the target: the /metrics scrape, retries, workers and the
    results folder, their --explain rows appended to `explain` and its deprecations to
    `warnings`."""
    cf = ch.cf
    metrics = cf.metrics if cf else MetricsCfg()
    explain.append(
        (
            "server_metrics",
            (
                f"scrape {metrics.path} every {metrics.scrape_interval_s:g}s"
                if metrics.scrape
                else "off"
            ),
            f"{ch.cname} [metrics]"
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
        explain.append(("workers", str(workers), f"{ch.cname} [client]"))
    output_dir = cf.output.dir if cf else None
    if output_dir is not None:
        explain.append(("results_dir", output_dir, f"{ch.cname} [output] dir"))
    return metrics, retry, workers, output_dir


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
    ch = _chain(cli, scn_target, scn_path, src)
    warnings: list[str] = []
    url = _pick_url(ch)
    model, model_src = _pick_model(ch)
    endpoint, ep_src = _pick_endpoint(ch)
    key = _pick_key(ch, url[0], env)
    if key.empty_env and key.key:
        warnings.append(f"${key.env} is set but empty: using the key from {key.src}")
    timeouts, c_src, r_src = _pick_timeouts(ch)
    wl, max_tokens, sampling_rows = _pick_sampling(ch, workload)
    target: Target | None = None
    health_path: str | None = None
    if url[0] is None:
        sim = f"no URL on the command line, scenario, {ch.sname} or {ch.cname}"
        url_row = ("base_url", "(built-in simulator)", sim)
    else:
        target, health_path, url_row = _http_target(
            ch, url, model, endpoint, key, timeouts, warnings
        )
    explain = [
        url_row,
        ("model", model or "(the server's first, from GET /v1/models)", model_src or "default"),
        ("endpoint", endpoint, ep_src),
        _key_row(ch, key),
    ]
    if ch.st and ch.st.headers:
        explain.append(("headers", ", ".join(sorted(ch.st.headers)), ch.sname))
    explain += [
        ("tls_verify", str(not cli.insecure).lower(), "--insecure" if cli.insecure else "default"),
        ("connect_timeout_s", f"{timeouts.connect_s:g}", c_src),
        ("read_timeout_s", f"{timeouts.first_token_s:g}", r_src),
        *sampling_rows,
    ]
    metrics, retry, workers, output_dir = _config_extras(ch, explain, warnings)
    explain += [("note", note, "") for note in src.notes]
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
        key.env,
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
