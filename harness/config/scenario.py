"""Scenario files: load TOML, apply `--set` overrides, validate into frozen dataclasses.

A scenario says *when* requests arrive (phases with arrival processes) and *how long* prompts
and answers are (length distributions). Every mistake becomes a ConfigError naming the file
(or `--set`), the dotted key and what is allowed; nothing here talks to a server.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.validate import Table, load_toml_file
from harness.errors import ConfigError, UsageError
from harness.workload.arrivals import Arrival, Closed, Trace, parse_arrival
from harness.workload.lengths import LengthDist, parse_length
from harness.workload.sources import Sources, parse_sources, settle_lengths

METRICS_WITH_PERCENTILES = ("ttft", "ttft_from_schedule", "itl", "inter_chunk", "tpot", "e2e",
                            "e2e_from_schedule", "send_lag")
STATS = ("mean", "p50", "p90", "p95", "p99", "p999", "max")
PER_REQUEST_SLOS = ("ttft", "tpot", "e2e", "ttft_from_schedule", "e2e_from_schedule")
ENDPOINTS = ("chat", "completions")
SERVER_TOKENIZE = ("auto", "on", "off")   # auto: an HTTP target's /tokenize where it has one
MAX_PHASE_REQUESTS = 10_000_000


@dataclass(frozen=True, slots=True)
class TargetOverrides:
    url: str | None = None
    model: str | None = None
    endpoint: str | None = None
    api_key_env: str | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    system_prompt_tokens: int = 0
    ignore_eos: bool = True
    temperature: float | None = None
    top_p: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None      # a tokenizer.json for exact prompt lengths
    sources: Sources = Sources()      # dataset prompts, prefix groups (harness.workload.sources)
    server_tokenize: str = "auto"     # exact lengths from the target's /tokenize: auto | on | off


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    arrival: Arrival
    duration_s: float | None = None
    requests: int | None = None
    max_concurrency: int | None = None
    warmup: bool = False


@dataclass(frozen=True, slots=True)
class SloLimit:
    """`metric_stat <= limit_s`, e.g. ttft p99 <= 2 s; stat None: a per-request limit (goodput)."""

    name: str
    metric: str
    stat: str | None
    limit_s: float


DEFAULT_RETRY_BACKOFF_S = 0.5     # first wait without a Retry-After; doubles per retry
DEFAULT_RETRY_MAX_WAIT_S = 30.0   # no wait (backoff or Retry-After) is longer than this


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`[retry]`: which failures are sent again (`on`), how often (`max`), and how long to wait:
    the server's Retry-After, else exponential backoff with jitter from `backoff_s`, both capped
    at `max_wait_s` (harness.client.retry)."""

    on: tuple[str, ...] = ()
    max: int = 0
    backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    max_wait_s: float = DEFAULT_RETRY_MAX_WAIT_S


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    seed: int
    target: TargetOverrides
    workload: Workload
    phases: tuple[Phase, ...]
    slo: tuple[SloLimit, ...]
    retry: RetryPolicy
    sim: dict[str, Any]
    path: str
    resolved: dict[str, Any]           # the TOML document after --set, as the result stores it

    @property
    def per_request_slos(self) -> tuple[SloLimit, ...]:
        return tuple(s for s in self.slo if s.stat is None)


def parse_set_value(text: str) -> Any:
    """A --set value as TOML would read it (5, 2.5, true, "x", [1, 2]); bare words stay strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(doc: dict[str, Any], sets: list[str]) -> set[str]:
    """Apply `KEY=VALUE` overrides by dotted path (list items by index). Returns the paths set.

    Raises UsageError for malformed items or paths that cannot exist (an index past the end,
    a key under a non-table). Unknown key *names* are caught by validation afterwards.
    """
    paths: set[str] = set()
    for item in sets:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise UsageError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. phases.0.duration=5s")
        parts = key.split(".")
        node: Any = doc
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise UsageError(f"--set {key}: {'.'.join(parts[:i]) or 'document'} has "
                                     f"{len(node)} items; {part!r} is not an index 0..{len(node) - 1}")
                if last:
                    node[int(part)] = parse_set_value(value)
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = parse_set_value(value)
                else:
                    node = node.setdefault(part, {})
            else:
                raise UsageError(f"--set {key}: {'.'.join(parts[:i])} is a value, not a table")
        paths.add(key)
    return paths


def _parse_slo(t: Table) -> tuple[SloLimit, ...]:
    out: list[SloLimit] = []
    allowed = [f"{m}_{s}" for m in METRICS_WITH_PERCENTILES for s in STATS] + list(PER_REQUEST_SLOS)
    for name in list(t.data):
        if name in PER_REQUEST_SLOS:
            metric, stat = name, None
        else:
            metric, _, stat = name.rpartition("_")
            if metric not in METRICS_WITH_PERCENTILES or stat not in STATS:
                import difflib
                close = difflib.get_close_matches(name, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                t.fail(name, f"unknown SLO{hint}; use <metric>_<stat> with metric in "
                       f"{', '.join(METRICS_WITH_PERCENTILES)} and stat in {', '.join(STATS)}, "
                       f"or a per-request limit: {', '.join(PER_REQUEST_SLOS)}")
        out.append(SloLimit(name, metric, stat, t.duration_s(name, allow_zero=False)))
    return tuple(out)


def _parse_phase(t: Table, base_dir: Path) -> Phase:
    name = t.str("name", t.prefix.replace("phases.", "phase"))
    has_d, has_n = t.has("duration"), t.has("requests")
    duration_s = t.duration_s("duration", None, allow_zero=False)
    requests = t.int("requests", None, min=1, max=MAX_PHASE_REQUESTS)
    arrival_t = t.table("arrival")
    process = arrival_t.data.get("process")
    if process == "trace":
        if has_d and has_n:
            t.fail("duration", "give `duration` or `requests`, not both")
    elif has_d == has_n:
        t.fail("duration", "give exactly one of `duration` (\"30s\") or `requests` (a count)")
    arrival = parse_arrival(arrival_t, duration_s, base_dir)
    max_conc = t.int("max_concurrency", None, min=1, max=1_000_000)
    warmup = t.bool("warmup", False)
    t.finish()
    if isinstance(arrival, Closed) and max_conc is not None and max_conc < arrival.users:
        t.fail("max_concurrency", f"is {max_conc}, below the closed loop's {arrival.users} users")
    if isinstance(arrival, Trace) and duration_s is None and requests is None:
        duration_s = None
    return Phase(name, arrival, duration_s, requests, max_conc, warmup)


def validate_scenario(doc: dict[str, Any], where: str, base_dir: Path,
                      set_paths: set[str] | None = None) -> Scenario:
    """Turn a parsed scenario document into a Scenario, or raise ConfigError."""
    set_paths = set_paths or set()
    try:
        return _validate(doc, where, base_dir)
    except ConfigError as exc:
        if any(exc.key == p or exc.key.startswith(p + ".") or p.startswith(exc.key + ".") for p in set_paths if exc.key):
            raise ConfigError("--set", exc.key, exc.detail) from None
        raise


def _validate(doc: dict[str, Any], where: str, base_dir: Path) -> Scenario:
    top = Table(doc, where)
    name = top.str("name", Path(where).stem)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        top.fail("name", f"expected letters, digits, '_', '-', '.' (it names result files), got {name!r}")
    description = top.str("description", "")
    seed = top.int("seed", 0, min=0, max=2**63 - 1)

    tt = top.table("target", None)
    target = TargetOverrides()
    if tt is not None:
        target = TargetOverrides(
            url=tt.str("url", None), model=tt.str("model", None),
            endpoint=tt.str("endpoint", None, choices=ENDPOINTS), api_key_env=tt.str("api_key_env", None))
        if target.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", target.api_key_env):
            tt.fail("api_key_env", f"expected the name of an environment variable (letters, digits, '_'), "
                    f"such as \"TAOTOKEN_API_KEY\", got {target.api_key_env!r}")
        tt.finish()

    wt = top.table("workload", Table({}, where, "workload"))
    prompt = parse_length(wt.table("prompt_tokens"), base_dir) if wt.has("prompt_tokens") else None
    output = parse_length(wt.table("output_tokens"), base_dir) if wt.has("output_tokens") else None
    tokenizer = _tokenizer(wt, base_dir)
    sources = parse_sources(wt, base_dir, tokenizer, prompt is not None, output is not None)
    workload = Workload(
        prompt, output,  # type: ignore[arg-type]  # settled below, once the phases are known
        system_prompt_tokens=wt.int("system_prompt_tokens", 0, min=0, max=1_000_000),
        ignore_eos=wt.bool("ignore_eos", True),
        temperature=wt.float("temperature", None, min=0, max=10),
        top_p=wt.float("top_p", None, min=0, max=1),
        extra_body=dict(wt.table("extra_body", Table({}, where, "workload.extra_body")).data),
        tokenizer=tokenizer,
        sources=sources,
        server_tokenize=wt.str("server_tokenize", "auto", choices=SERVER_TOKENIZE),
    )
    if tokenizer is not None and workload.server_tokenize == "on":
        wt.fail("server_tokenize", "is \"on\", and workload.tokenizer already makes the lengths exact; remove one")
    wt.finish()

    phases_raw = top.list("phases")
    if not phases_raw:
        top.fail("phases", "expected at least one [[phases]] table")
    phases = tuple(_parse_phase(Table(p, where, f"phases.{i}"), base_dir) for i, p in enumerate(phases_raw))
    names = [p.name for p in phases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        top.fail("phases", f"phase names must be unique; repeated: {', '.join(sorted(dup))}")
    if all(p.warmup for p in phases):
        top.fail("phases", "every phase is a warm-up; at least one must be measured (warmup = false)")
    if sources.conversation is not None and any(isinstance(p.arrival, Trace) for p in phases):
        wt.fail("conversation", "a trace's rows are single requests with their own times and lengths; "
                "replay it without conversation, or drive sessions from a rate or closed-loop users")
    prompt, output = settle_lengths(prompt, output, sources, [p.arrival for p in phases], where)
    workload = dataclasses.replace(workload, prompt_tokens=prompt, output_tokens=output)

    st = top.table("slo", None)
    slo = _parse_slo(st) if st is not None else ()

    rt = top.table("retry", None)
    retry = RetryPolicy()
    if rt is not None:
        on = rt.list("on", [])
        for v in on:
            if not (isinstance(v, str) and (v.isdigit() or v in ("connect", "stream_cut", "timeout"))):
                rt.fail("on", f"expected HTTP codes as strings (\"429\") or connect, stream_cut, timeout; got {v!r}")
        retry = RetryPolicy(tuple(on), rt.int("max", 1, min=0, max=10),
                            rt.duration_s("backoff", DEFAULT_RETRY_BACKOFF_S, allow_zero=True),
                            rt.duration_s("max_wait", DEFAULT_RETRY_MAX_WAIT_S, allow_zero=True))
        rt.finish()

    sim_raw = top.raw("sim", {})
    if not isinstance(sim_raw, dict):
        top.fail("sim", "expected a table of simulator settings")
    _check_sim(sim_raw, where)
    top.finish()
    return Scenario(name, description, seed, target, workload, phases, slo, retry, dict(sim_raw),
                    where, copy.deepcopy(doc))


def _tokenizer(wt: Table, base_dir: Path) -> str | None:
    """`workload.tokenizer`: a Hugging Face tokenizer.json, checked loadable now."""
    raw = wt.str("tokenizer", None)
    if raw is None:
        return None
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    if not path.is_file():
        wt.fail("tokenizer", f"{str(path)!r} is not a file; give the path of a Hugging Face tokenizer.json")
    from harness.workload.prompts import load_tokenizer

    try:
        load_tokenizer(str(path))
    except ImportError:
        wt.fail("tokenizer", "needs the tokenizers package: pip install 'harness[tokenizer]'")
    except Exception as exc:  # noqa: BLE001 - the library raises its own types for a bad file
        wt.fail("tokenizer", f"{str(path)!r} is not a tokenizer.json the tokenizers package can read: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}")
    return str(path)


def _check_sim(sim_raw: dict[str, Any], where: str) -> None:
    """Validate a [sim] table with the simulator's own settings parser (server side owns it)."""
    if not sim_raw:
        return
    from harness.sim.settings import SimSettings

    SimSettings.from_mapping(sim_raw, where)


def load_scenario(path: str | Path, sets: list[str] | None = None, seed: int | None = None) -> Scenario:
    """Read, override and validate a scenario file. Raises ConfigError / UsageError."""
    p = Path(path)
    doc = load_toml_file(p)
    set_paths = apply_overrides(doc, list(sets or []))
    if seed is not None:
        doc["seed"] = seed
    return validate_scenario(doc, str(p), p.parent, set_paths)
