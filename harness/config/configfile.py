"""`config.toml`: request defaults, timeouts, metrics scraping, and the server to launch.

    [inference]  model, max_tokens, temperature, top_p
    [timeout]    connect, read (seconds or "30s"), retry (extra attempts on connect errors/429/503)
    [metrics]    scrape, scrape_interval, path
    [server]     engine ("vllm", "llama.cpp", "sim"), host, port, max_num_seqs,
                 max_num_batched_tokens, start_timeout, extra_args, log_dir,
                 python (the interpreter that runs vLLM, e.g. a venv of its own),
                 env (a table of environment variables for the server, e.g. VLLM_CPU_KVCACHE_SPACE)
    [model]      name, path (a GGUF for llama.cpp), dtype, gpu_memory_utilization, max_model_len
    [engine]     enable_chunked_prefill, block_size, tensor_parallel_size, threads
    [api]        base_url, api_key_env, endpoint ("chat", "completions", "responses", "embeddings"), health_path,
                 api_key: only "EMPTY" or "" (vLLM's placeholders for "no key"); a real key is refused
    [client]     workers (N or "auto": worker processes for `run`, as `--workers`)
    [output]     dir (where `run` writes results, journals and HTML reports; `--result-dir`)

Every table and key is optional. Unknown keys and wrong types are ConfigErrors naming the file,
the dotted key and its line (tomllib gives no positions for keys, so the line is found by
scanning the text for the key under its table header).

Keys that did nothing were removed: `[inference] stream` (every request streams: the harness
measures SSE streams) and `[metrics] record_ttft`, `record_latency`, `record_tokens` (every
metric is always recorded). Files users already have still load: such a key is accepted, with
a one-line deprecation warning naming it (`ConfigFile.deprecations`, shown by `run` and `check`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from harness.config.validate import Table, parse_toml_text, read_text_file
from harness.errors import ConfigError
from harness.units import MAX_DURATION_S, MAX_DURATION_TEXT

DEFAULT_CONFIG_FILE = "config.toml"
ENGINES = ("vllm", "llama.cpp", "sim")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
ENDPOINTS = ("chat", "completions", "responses", "embeddings")
DEFAULT_SCRAPE_INTERVAL_S = 1.0  # one /metrics poll a second: vLLM's gauges move per step
MIN_SCRAPE_INTERVAL_S = 0.1  # faster polling would load the server we measure
DEFAULT_START_TIMEOUT_S = 600.0  # vLLM loading a 70B model from disk takes minutes
MAX_WORKERS = 1024  # as `run --workers`
# What vLLM's own docs and quick-starts write for "no key" (`api_key = "EMPTY"`, as the OpenAI SDK
# needs some string); config.toml files users copy carry them, so they load and mean no key.
NO_KEY_PLACEHOLDERS = ("EMPTY", "")


@dataclass(frozen=True, slots=True)
class Inference:
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None


@dataclass(frozen=True, slots=True)
class TimeoutCfg:
    connect_s: float | None = None
    read_s: float | None = None
    retry: int = 0


@dataclass(frozen=True, slots=True)
class MetricsCfg:
    scrape: bool = True
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    path: str = "/metrics"


@dataclass(frozen=True, slots=True)
class ServerCfg:
    engine: str = "vllm"
    host: str = "127.0.0.1"
    port: int = 8000
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    extra_args: tuple[str, ...] = ()
    log_dir: str = "results"
    python: str | None = None  # vLLM's interpreter; None: the one running the harness
    env: tuple[tuple[str, str], ...] = ()  # (name, value) pairs added to the server's environment


@dataclass(frozen=True, slots=True)
class ModelCfg:
    name: str | None = None
    path: str | None = None
    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None


@dataclass(frozen=True, slots=True)
class EngineCfg:
    enable_chunked_prefill: bool | None = None
    block_size: int | None = None
    tensor_parallel_size: int | None = None
    threads: int | None = None


@dataclass(frozen=True, slots=True)
class ApiCfg:
    base_url: str | None = None
    api_key_env: str | None = None
    endpoint: str | None = None
    health_path: str = "/health"
    no_key: str | None = None  # the placeholder written as api_key ("EMPTY" or ""), if any


@dataclass(frozen=True, slots=True)
class ClientCfg:
    workers: int | str | None = None  # N or "auto"; None: one process (unless --ray)


@dataclass(frozen=True, slots=True)
class OutputCfg:
    dir: str | None = None  # results folder (relative: to the working directory); None: results/


@dataclass(frozen=True)
class ConfigFile:
    path: str
    inference: Inference = Inference()
    timeout: TimeoutCfg = TimeoutCfg()
    metrics: MetricsCfg = MetricsCfg()
    server: ServerCfg = ServerCfg()
    model: ModelCfg = ModelCfg()
    engine: EngineCfg = EngineCfg()
    api: ApiCfg = ApiCfg()
    present: frozenset[str] = field(default_factory=frozenset)  # "table.key" written in the file
    client: ClientCfg = ClientCfg()
    deprecations: tuple[str, ...] = ()  # one line per removed key the file still carries
    output: OutputCfg = OutputCfg()


# Removed keys, still accepted (with a warning) so the config.toml files users have keep loading:
# "table.key" -> why it is gone.
DEPRECATED_KEYS: dict[str, str] = {
    "inference.stream": "every request streams: the harness measures SSE streams",
    "metrics.record_ttft": "every metric is always recorded",
    "metrics.record_latency": "every metric is always recorded",
    "metrics.record_tokens": "every metric is always recorded",
}


def _deprecated(t: Any, table: str, where: str) -> list[str]:
    """Consume the removed keys of `table` (any value its old type allowed); one line each."""
    out = []
    for dotted, why in DEPRECATED_KEYS.items():
        tname, _, key = dotted.partition(".")
        if tname == table and t.has(key):
            t.bool(key, True)
            out.append(f"{where}: {dotted}: deprecated and ignored ({why}); remove it")
    return out


SERVED_NAME_FLAG = "--served-model-name"


def served_model_name(cfg: ConfigFile) -> str | None:
    """The first name after `--served-model-name` in [server] extra_args (vLLM answers to it,
    not to the path), else None."""
    args = list(cfg.server.extra_args)
    for i, arg in enumerate(args):
        if arg == SERVED_NAME_FLAG and i + 1 < len(args) and not args[i + 1].startswith("--"):
            return args[i + 1]
        if arg.startswith(SERVED_NAME_FLAG + "="):
            return arg.split("=", 1)[1] or None
    return None


def key_line(text: str, dotted: str) -> int | None:
    """Line of `key =` under `[table]` (or of `[table]` itself for a one-part path)."""
    parts = dotted.split(".")
    lines = text.splitlines()
    table, key = (parts[0], parts[1]) if len(parts) > 1 else (parts[0], None)
    header = re.compile(r"^\s*\[\s*" + re.escape(table) + r"\s*\]\s*(#.*)?$")
    any_header = re.compile(r"^\s*\[")
    start = next((i for i, ln in enumerate(lines) if header.match(ln)), None)
    if start is None:
        if key is None:
            pat = re.compile(r"^\s*" + re.escape(table) + r"\s*=")
            return next((i + 1 for i, ln in enumerate(lines) if pat.match(ln)), None)
        pat = re.compile(r"^\s*" + re.escape(table) + r"\s*\.\s*" + re.escape(key) + r"\s*=")
        return next((i + 1 for i, ln in enumerate(lines) if pat.match(ln)), None)
    if key is None:
        return start + 1
    pat = re.compile(r"^\s*[\"']?" + re.escape(key) + r"[\"']?\s*=")
    for i in range(start + 1, len(lines)):
        if any_header.match(lines[i]):
            break
        if pat.match(lines[i]):
            return i + 1
    return start + 1


class _TomlTable(Table):
    """A Table whose errors carry the line of the offending key."""

    def __init__(self, data: object, where: str, prefix: str, text: str) -> None:
        self.text = text
        super().__init__(data, where, prefix)

    def fail(self, name: str, message: str) -> NoReturn:
        key = self.key(name)
        raise ConfigError(self.where, key, message, line=key_line(self.text, key))

    def sub(self, name: str) -> _TomlTable:
        value = self.raw(name, {})
        if not isinstance(value, dict):
            self.fail(name, f"expected a [{name}] table, got {value!r}")
        return _TomlTable(value, self.where, self.key(name), self.text)

    def seconds(self, name: str) -> float | None:
        """A timeout: a number of seconds or a duration string ("30s", "2m"), > 0."""
        value = self.raw(name, None)
        if value is None:
            return None
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not 0 < value <= MAX_DURATION_S:  # also NaN and inf (TOML has both)
                self.fail(
                    name,
                    f"expected a number of seconds > 0 and at most {MAX_DURATION_S:g} "
                    f"({MAX_DURATION_TEXT}), got {value!r}",
                )
            return float(value)
        out = self.duration_s(name, None, allow_zero=False)
        return float(out)


def parse_config(doc: dict[str, Any], where: str, text: str = "") -> ConfigFile:
    """Validate a parsed config.toml. Raises ConfigError naming file, key and line."""
    top = _TomlTable(doc, where, "", text)
    present = frozenset(f"{t}.{k}" for t, v in doc.items() if isinstance(v, dict) for k in v)
    inference, deprecations = _inference(top.sub("inference"), where)
    timeout = _timeout(top.sub("timeout"))
    metrics, metrics_deprecations = _metrics(top.sub("metrics"), where)
    server = _server(top.sub("server"))
    model = _model(top.sub("model"))
    engine = _engine(top.sub("engine"))
    api = _api(top.sub("api"))
    client = _client(top.sub("client"))
    output = _output(top.sub("output"))
    top.finish()
    return ConfigFile(
        where,
        inference,
        timeout,
        metrics,
        server,
        model,
        engine,
        api,
        present,
        client=client,
        deprecations=tuple(deprecations + metrics_deprecations),
        output=output,
    )


# One parser per table: each reads its keys in the order above and refuses any other key
# (`finish`), so an error names the first bad key as a reader of the file meets it.


def _inference(t: _TomlTable, where: str) -> tuple[Inference, list[str]]:
    inference = Inference(
        t.str("model", None),
        t.int("max_tokens", None, min=1, max=10_000_000),
        t.float("temperature", None, min=0, max=10),
        t.float("top_p", None, min=0, max=1),
    )
    deprecations = _deprecated(t, "inference", where)
    t.finish()
    return inference, deprecations


def _timeout(t: _TomlTable) -> TimeoutCfg:
    timeout = TimeoutCfg(t.seconds("connect"), t.seconds("read"), t.int("retry", 0, min=0, max=10))
    t.finish()
    return timeout


def _metrics(t: _TomlTable, where: str) -> tuple[MetricsCfg, list[str]]:
    path = t.str("path", "/metrics")
    if not path.startswith("/"):
        t.fail("path", f"expected a path starting with '/', got {path!r}")
    interval = t.seconds("scrape_interval")
    if interval is not None and interval < MIN_SCRAPE_INTERVAL_S:
        t.fail(
            "scrape_interval",
            f"expected at least {MIN_SCRAPE_INTERVAL_S:g}s (polling faster loads "
            f"the server under test), got {interval:g}s",
        )
    metrics = MetricsCfg(t.bool("scrape", True), interval or DEFAULT_SCRAPE_INTERVAL_S, path)
    deprecations = _deprecated(t, "metrics", where)
    t.finish()
    return metrics, deprecations


def _server(t: _TomlTable) -> ServerCfg:
    extra = t.list("extra_args", [])
    if not all(isinstance(a, str | int | float) and not isinstance(a, bool) for a in extra):
        t.fail(
            "extra_args", f'expected an array of strings, e.g. ["--swap-space", "8"], got {extra!r}'
        )
    env_pairs = _server_env(t)
    python = t.str("python", None)
    if python is not None and not python.strip():
        t.fail(
            "python",
            "expected the path of a Python interpreter, e.g. ~/.cache/harness/vllm-cpu/venv/bin/python",
        )
    server = ServerCfg(
        t.str("engine", "vllm", choices=ENGINES),
        t.str("host", "127.0.0.1"),
        t.int("port", 8000, min=1, max=65535),
        t.int("max_num_seqs", None, min=1, max=1_000_000),
        t.int("max_num_batched_tokens", None, min=1, max=100_000_000),
        t.seconds("start_timeout") or DEFAULT_START_TIMEOUT_S,
        tuple(str(a) for a in extra),
        t.str("log_dir", "results"),
        python,
        env_pairs,
    )
    t.finish()
    return server


def _server_env(t: _TomlTable) -> tuple[tuple[str, str], ...]:
    """[server] env: NAME = "value" pairs for the server's environment (numbers as text)."""
    env_doc = t.raw("env", {})
    if not isinstance(env_doc, dict):
        t.fail(
            "env",
            f'expected a table of NAME = "value", e.g. env = {{ VLLM_CPU_KVCACHE_SPACE = "1" }}, '
            f"got {env_doc!r}",
        )
    env_pairs: list[tuple[str, str]] = []
    for name, value in env_doc.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            t.fail("env", f"{name!r} is not an environment variable name (letters, digits, _)")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            t.fail("env", f"{name}: expected a string or a number, got {value!r}")
        env_pairs.append((name, str(value)))
    return tuple(env_pairs)


def _model(t: _TomlTable) -> ModelCfg:
    model = ModelCfg(
        t.str("name", None),
        t.str("path", None),
        t.str("dtype", None, choices=DTYPES),
        t.float("gpu_memory_utilization", None, min=0, max=1, exclusive_min=True),
        t.int("max_model_len", None, min=16, max=10_000_000),
    )
    t.finish()
    return model


def _engine(t: _TomlTable) -> EngineCfg:
    engine = EngineCfg(
        t.bool("enable_chunked_prefill", None),
        t.int("block_size", None, min=1, max=4096),
        t.int("tensor_parallel_size", None, min=1, max=1024),
        t.int("threads", None, min=1, max=4096),
    )
    t.finish()
    return engine


def _api(t: _TomlTable) -> ApiCfg:
    env = t.str("api_key_env", None)
    if env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env):
        t.fail(
            "api_key_env",
            "expected the NAME of an environment variable such as TAOTOKEN_API_KEY "
            "(config.toml never holds a key)",
        )
    hp = t.str("health_path", "/health")
    if not hp.startswith("/"):
        t.fail("health_path", f"expected a path starting with '/', got {hp!r}")
    api = ApiCfg(
        t.url("base_url", None),
        env,
        t.str("endpoint", None, choices=ENDPOINTS),
        hp,
        _no_key_placeholder(t, env),
    )
    t.finish()
    return api


def _client(t: _TomlTable) -> ClientCfg:
    workers = t.raw("workers", None)
    if isinstance(workers, str) and workers == "auto":
        pass
    elif workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS
    ):
        t.fail("workers", f'expected a whole number 1..{MAX_WORKERS} or "auto", got {workers!r}')
    client = ClientCfg(workers)
    t.finish()
    return client


def _output(t: _TomlTable) -> OutputCfg:
    out_dir = t.str("dir", None)
    if out_dir is not None and not out_dir.strip():
        t.fail("dir", "expected a folder path (results are written there), got an empty string")
    t.finish()
    return OutputCfg(out_dir)


def _no_key_placeholder(t: Table, env: str | None) -> str | None:
    """[api] api_key: a no-key placeholder is accepted (returned); anything else is refused
    without its value in the message (it may be a real key)."""
    if not t.has("api_key"):
        return None
    value = t.raw("api_key")
    if isinstance(value, str) and value.strip() in NO_KEY_PLACEHOLDERS:
        return value.strip()
    var = env or "VLLM_API_KEY"
    t.fail(
        "api_key",
        "looks like a key, and config.toml does not hold keys (it is shared and "
        f"committed; the value is not shown); move it to the environment (export {var}=...; "
        f'[api] api_key_env = "{var}" names it) or to settings.json\'s api_key; '
        'api_key = "EMPTY" or "" here means no key',
    )


def load_config(path: str | Path) -> ConfigFile:
    """Read and validate config.toml. Raises ConfigError (not found, TOML syntax, bad key)."""
    p = Path(path)
    text = read_text_file(p)
    doc = parse_toml_text(text, str(p))
    return parse_config(doc, str(p), text)
