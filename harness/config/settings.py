"""`settings.json`: where the endpoint is and which key to use, in either of two shapes.

Nested (settings.example.json):
    {"provider": {"base_url", "api_key_env", "api_key", "timeout_seconds", "headers"},
     "defaults": {"model", "temperature", "max_tokens", "top_p"},
     "local_engine": {"enabled", "endpoint", "health_path"}}
Flat (what many users already have):
    {"base_url", "api_key", "default_model", "headers", "env_fallback"}
where `env_fallback` names the environment variable to read the key from (a string).

Key precedence: the named environment variable when it is set and non-empty (after stripping
whitespace), then the key written in the file; an empty variable never overrides a key. The
key is held as a `Secret` and is never printed beyond its first 6 characters.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from harness.config.bounded import check_nesting, nesting_message
from harness.config.target import Secret, header_name_problem, header_value_problem
from harness.config.validate import Table, read_text_file
from harness.errors import ConfigError, preview
from harness.units import MAX_DURATION_S

DEFAULT_SETTINGS_FILE = "settings.json"
DEFAULT_HEALTH_PATH = "/health"
NESTED_KEYS = ("provider", "defaults", "local_engine")
FLAT_KEYS = ("base_url", "api_key", "default_model", "headers", "env_fallback")


@dataclass(frozen=True, slots=True)
class LocalEngine:
    enabled: bool = False
    endpoint: str | None = None
    health_path: str = DEFAULT_HEALTH_PATH


@dataclass(frozen=True)
class Settings:
    """A parsed settings.json. `path` names the file in messages and `--explain`."""

    path: str
    shape: str  # "nested" or "flat"
    base_url: str | None = None
    api_key_env: str | None = None
    file_key: Secret | None = None  # the key written in the file, if any
    timeout_s: float | None = None
    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    local_engine: LocalEngine = LocalEngine()

    def key(self, env: Mapping[str, str] | None = None) -> tuple[Secret | None, str]:
        """The key to send and where it came from, following the precedence above."""
        return pick_key(self.api_key_env, self.file_key, f"{self.path} api_key", env)


def pick_key(
    env_name: str | None,
    file_key: Secret | None,
    file_source: str,
    env: Mapping[str, str] | None = None,
) -> tuple[Secret | None, str]:
    """Env var (set and non-empty after strip) first, then the file's key; ("", None) if neither."""
    env = os.environ if env is None else env
    if env_name:
        value = env.get(env_name, "").strip()
        if value:
            return Secret(value), f"env {env_name}"
    if file_key:
        return file_key, file_source
    return None, ""


def _line_of(text: str, dotted: str) -> int | None:
    """The line of `"key":` for a dotted path, searching each part after its parent (JSON
    parsers give no positions for keys); the parent's line when the key itself is absent."""
    pos, line = 0, None
    for part in dotted.split("."):
        m = re.compile(r'"' + re.escape(part) + r'"\s*:').search(text, pos)
        if not m:
            break
        pos, line = m.end(), text.count("\n", 0, m.start()) + 1
    return line


class _JsonTable(Table):
    """A Table whose errors carry the line of the offending key in the JSON text."""

    def __init__(self, data: object, where: str, prefix: str, text: str) -> None:
        self.text = text
        super().__init__(data, where, prefix)

    def fail(self, name: str, message: str) -> NoReturn:
        raise ConfigError(
            self.where, self.key(name), message, line=_line_of(self.text, self.key(name))
        )

    def shown(self, value: object) -> str:
        return preview(value)

    def sub(self, name: str) -> _JsonTable | None:
        value = self.raw(name, None)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.fail(name, f"expected an object, got {type(value).__name__} {preview(value)}")
        return _JsonTable(value, self.where, self.key(name), self.text)


def _headers(t: _JsonTable, name: str) -> dict[str, str]:
    raw = t.raw(name, None)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        t.fail(name, 'expected an object of string header values, e.g. {"X-Team": "perf"}')
    if any(k.lower() == "authorization" for k in raw):
        t.fail(
            name, "do not put Authorization here; give the key as api_key or through api_key_env"
        )
    for k, v in raw.items():
        if problem := header_name_problem(k):
            t.fail(name, f"{k!r} is {problem}")
        if problem := header_value_problem(v):
            t.fail(name, f"{k}: the value holds {problem}")
    return dict(raw)


def _key(t: _JsonTable, name: str) -> Secret | None:
    value = t.raw(name, None)
    if value is None:
        return None
    if not isinstance(value, str):
        t.fail(name, "expected a string")
    value = value.strip()  # stray whitespace or a newline from copy-paste is the classic 401
    return Secret(value) if value else None


def _env_name(t: _JsonTable, name: str) -> str | None:
    value = t.str(name, None)
    if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        t.fail(
            name,
            f"expected the NAME of an environment variable such as TAOTOKEN_API_KEY, got "
            f"{value[:6]!r}... (a key belongs in api_key, or better in that variable)",
        )
    return value


def parse_settings(doc: object, where: str, text: str = "") -> Settings:
    """Validate a parsed settings document. Raises ConfigError naming file, key and line."""
    top = _JsonTable(doc, where, "", text)
    data = top.data
    nested = any(k in data for k in NESTED_KEYS)
    flat = any(k in data for k in FLAT_KEYS)
    if nested and flat:
        first_flat = next(k for k in data if k in FLAT_KEYS)
        top.fail(
            first_flat,
            "mixes the flat shape (base_url, api_key, default_model, headers, "
            "env_fallback) with the nested one (provider, defaults, local_engine); use one",
        )
    if not nested:
        s = Settings(
            path=where,
            shape="flat",
            base_url=top.url("base_url", None),
            file_key=_key(top, "api_key"),
            model=top.str("default_model", None),
            headers=_headers(top, "headers"),
            api_key_env=_env_name(top, "env_fallback"),
        )
        top.finish()
        return s
    p = top.sub("provider")
    d = top.sub("defaults")
    le = top.sub("local_engine")
    base_url = api_key_env = None
    file_key = None
    timeout_s = None
    headers: dict[str, str] = {}
    if p is not None:
        base_url = p.url("base_url", None)
        api_key_env = _env_name(p, "api_key_env")
        file_key = _key(p, "api_key")
        timeout_s = p.float("timeout_seconds", None, min=0, exclusive_min=True, max=MAX_DURATION_S)
        headers = _headers(p, "headers")
        p.finish()
    model = temperature = top_p = max_tokens = None
    if d is not None:
        model = d.str("model", None)
        temperature = d.float("temperature", None, min=0, max=10)
        top_p = d.float("top_p", None, min=0, max=1)
        max_tokens = d.int("max_tokens", None, min=1, max=10_000_000)
        d.finish()
    local = LocalEngine()
    if le is not None:
        hp = le.str("health_path", DEFAULT_HEALTH_PATH)
        if not hp.startswith("/"):
            le.fail("health_path", f"expected a path starting with '/', got {preview(hp)}")
        local = LocalEngine(le.bool("enabled", False), le.url("endpoint", None), hp)
        if local.enabled and not local.endpoint:
            le.fail(
                "endpoint",
                "is required when local_engine.enabled is true, e.g. http://127.0.0.1:8000/v1",
            )
        le.finish()
    top.finish()
    return Settings(
        where,
        "nested",
        base_url,
        api_key_env,
        file_key,
        timeout_s,
        model,
        temperature,
        top_p,
        max_tokens,
        headers,
        local,
    )


def load_settings(path: str | Path) -> Settings:
    """Read and validate a settings.json. Raises ConfigError (file not found, bad JSON, bad key)."""
    p = Path(path)
    text = read_text_file(p)
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ConfigError(str(p), "", nesting_message()) from None
    except json.JSONDecodeError as exc:
        hint = (
            " (JSON allows no trailing commas or comments)"
            if "property name" in exc.msg or "value" in exc.msg
            else ""
        )
        raise ConfigError(
            str(p), "", f"not valid JSON: {exc.msg}{hint}", line=exc.lineno, column=exc.colno
        ) from None
    check_nesting(doc, str(p))
    return parse_settings(doc, str(p), text)


def exposure_warnings(path: Path) -> list[str]:
    """Ways a settings file holding a key may leak: tracked by git, readable by other users."""
    out: list[str] = []
    try:
        mode = path.stat().st_mode
    except OSError:
        return out
    if mode & 0o044:
        out.append(
            f"{path} holds an API key and is readable by other users (mode {mode & 0o777:o}); "
            f"run: chmod 600 {path}"
        )
    import subprocess

    try:
        tracked = (
            subprocess.run(
                ["git", "ls-files", "--error-unmatch", path.name],
                cwd=path.resolve().parent,
                capture_output=True,
                timeout=10,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        tracked = False
    if tracked:
        out.append(
            f"{path} holds an API key and is tracked by git: it will be pushed with the repository; "
            f"run: git rm --cached {path.name} && echo {path.name} >> .gitignore, then rotate the key"
        )
    return out
