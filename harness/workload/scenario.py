"""Scenario files: load TOML, apply `--set` overrides, validate into frozen dataclasses.

A scenario says *when* requests arrive (phases with arrival processes) and *how long* prompts
and answers are (length distributions). Every mistake becomes a ConfigError naming the file
(or `--set`), the dotted key and what is allowed; nothing here talks to a server.

The workload interprets the document: arrival processes, length distributions, traces and
datasets are workload concepts, parsed by their own modules here; the plain sections (`[target]`,
`[slo]`, `[retry]`, `--set`) are parsed by `harness.config.scenario`. The `[sim]` table is kept as
plain data: the simulator owns its settings and checks them where a scenario is loaded for a
command (`harness.orchestrate.scenario`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.catalogue import SloLimit
from harness.config.scenario import (
    ENDPOINTS,
    RetryPolicy,
    TargetOverrides,
    apply_overrides,
    parse_retry,
    parse_slo,
    parse_target,
)
from harness.config.validate import Table, load_toml_file
from harness.errors import ConfigError
from harness.workload.arrivals import Arrival, Closed, Trace, parse_arrival
from harness.workload.lengths import Fixed, LengthDist, parse_length
from harness.workload.limits import (
    DEFAULT_MAX_PLANNED_REQUESTS,
    LIMIT_KEY,
    MAX_PLANNED_REQUESTS_CEILING,
)
from harness.workload.size import check_plan_size
from harness.workload.sources import Sources, parse_sources, settle_lengths
from harness.workload.tools import MAX_TOOLS, TOOL_CHOICES, tools_body

MAX_PHASE_REQUESTS = MAX_PLANNED_REQUESTS_CEILING  # and all phases together: max_planned_requests
SERVER_TOKENIZE = ("auto", "on", "off")  # auto: an HTTP target's /tokenize where it has one
# Request fields the harness writes itself: `extra_body` may not replace them (a replaced
# `stream` fails every request, a replaced `max_tokens` silently changes the planned lengths).
OWNED_BODY_KEYS = {
    "model": "the model comes from [target] model or --model",
    "messages": "the prompt is made from the plan (prompt_tokens, a dataset or a trace)",
    "prompt": "the prompt is made from the plan (prompt_tokens, a dataset or a trace)",
    "stream": "every request streams: the measurement reads the stream",
    "stream_options": "the harness asks for usage in the stream to count tokens",
    "max_tokens": "each request's output length comes from the plan (output_tokens)",
    "max_completion_tokens": "each request's output length comes from the plan (output_tokens)",
    "ignore_eos": "it has its own key: set workload.ignore_eos",
    "temperature": "it has its own key: set workload.temperature",
    "top_p": "it has its own key: set workload.top_p",
}


@dataclass(frozen=True, slots=True)
class Workload:
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    system_prompt_tokens: int = 0
    ignore_eos: bool = True
    temperature: float | None = None
    top_p: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None  # a tokenizer.json for exact prompt lengths
    sources: Sources = Sources()  # dataset prompts, prefix groups (harness.workload.sources)
    server_tokenize: str = "auto"  # exact lengths from the target's /tokenize: auto | on | off
    batch: int = 1  # embeddings: inputs per request, each its own prompt_tokens draw


MAX_BATCH = 2048  # inputs per embeddings request (OpenAI's limit is 2048)


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    arrival: Arrival
    duration_s: float | None = None
    requests: int | None = None
    max_concurrency: int | None = None
    warmup: bool = False


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
    resolved: dict[str, Any]  # the TOML document after --set, as the result stores it
    max_planned_requests: int = DEFAULT_MAX_PLANNED_REQUESTS  # harness.workload.size

    @property
    def per_request_slos(self) -> tuple[SloLimit, ...]:
        return tuple(s for s in self.slo if s.stat is None)


def _parse_phase(t: Table, base_dir: Path, limit: int) -> Phase:
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
        t.fail("duration", 'give exactly one of `duration` ("30s") or `requests` (a count)')
    arrival = parse_arrival(arrival_t, duration_s, base_dir, limit)
    max_conc = t.int("max_concurrency", None, min=1, max=1_000_000)
    warmup = t.bool("warmup", False)
    t.finish()
    if isinstance(arrival, Closed) and max_conc is not None and max_conc < arrival.users:
        t.fail("max_concurrency", f"is {max_conc}, below the closed loop's {arrival.users} users")
    return Phase(name, arrival, duration_s, requests, max_conc, warmup)


def validate_scenario(
    doc: dict[str, Any], where: str, base_dir: Path, set_paths: set[str] | None = None
) -> Scenario:
    """Turn a parsed scenario document into a Scenario, or raise ConfigError."""
    try:
        return _validate(doc, where, base_dir)
    except ConfigError as exc:
        raise attribute_to_set(exc, set_paths or set()) from None


def attribute_to_set(exc: ConfigError, set_paths: set[str]) -> ConfigError:
    """The error as `--set`'s when one of the `--set` paths wrote the key it names, else as is."""
    if any(
        exc.key == p or exc.key.startswith(p + ".") or p.startswith(exc.key + ".")
        for p in set_paths
        if exc.key
    ):
        return ConfigError("--set", exc.key, exc.detail)
    return exc


def _validate(doc: dict[str, Any], where: str, base_dir: Path) -> Scenario:
    top = Table(doc, where)
    name, description, seed, limit = _header(top, where)
    target = parse_target(top.table("target", None))
    draft = _workload_keys(top.table("workload", Table({}, where, "workload")), base_dir, target)
    phases = _phases(top, where, base_dir, limit)
    workload = _workload(draft, phases, limit, where)
    st = top.table("slo", None)
    slo = parse_slo(st) if st is not None else ()
    retry = parse_retry(top.table("retry", None))
    sim_raw = top.raw("sim", {})
    if not isinstance(sim_raw, dict):
        top.fail("sim", "expected a table of simulator settings")
    sim_raw = _sim_paths(dict(sim_raw), base_dir)
    top.finish()
    return Scenario(
        name,
        description,
        seed,
        target,
        workload,
        phases,
        slo,
        retry,
        dict(sim_raw),
        where,
        copy.deepcopy(doc),
        limit,
    )


def _header(top: Table, where: str) -> tuple[str, str, int, int]:
    """name, description, seed and the planned-request limit."""
    name = top.str("name", Path(where).stem)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        top.fail(
            "name", f"expected letters, digits, '_', '-', '.' (it names result files), got {name!r}"
        )
    description = top.str("description", "")
    seed = top.int("seed", 0, min=0, max=2**63 - 1)
    limit = top.int(
        LIMIT_KEY, DEFAULT_MAX_PLANNED_REQUESTS, min=1, max=MAX_PLANNED_REQUESTS_CEILING
    )
    return name, description, seed, limit


@dataclass(frozen=True)
class _WorkloadKeys:
    """[workload] read and checked on its own; the Workload is made once the phases are known
    and the lengths settled (`_workload`). `wt` stays for errors that need the phases."""

    wt: Table
    prompt: LengthDist | None
    output: LengthDist | None
    tokenizer: str | None
    sources: Sources
    system_prompt_tokens: int
    ignore_eos: bool
    temperature: float | None
    top_p: float | None
    extra_body: dict[str, Any]
    batch: int
    server_tokenize: str


def _workload_keys(wt: Table, base_dir: Path, target: TargetOverrides) -> _WorkloadKeys:
    prompt = parse_length(wt.table("prompt_tokens"), base_dir) if wt.has("prompt_tokens") else None
    output = parse_length(wt.table("output_tokens"), base_dir) if wt.has("output_tokens") else None
    tokenizer = _tokenizer(wt, base_dir)
    sources = parse_sources(wt, base_dir, tokenizer, prompt is not None, output is not None)
    system_prompt_tokens = wt.int("system_prompt_tokens", 0, min=0, max=1_000_000)
    ignore_eos = wt.bool("ignore_eos", True)
    temperature = wt.float("temperature", None, min=0, max=10)
    top_p = wt.float("top_p", None, min=0, max=1)
    extra_body, tools = _extra_body(wt)
    conv = sources.conversation
    if conv is not None and conv.agent is not None and not tools:
        wt.fail("agent", "needs tools = N: an agent's requests carry tool definitions to call")
    batch = wt.int("batch", 1, min=1, max=MAX_BATCH)
    if batch > 1 and (
        sources.dataset is not None
        or sources.conversation is not None
        or sources.prefix_groups is not None
        or tools
    ):
        wt.fail(
            "batch",
            "draws each embeddings input's length from workload.prompt_tokens; it does not "
            "combine with a dataset, conversation, prefix groups or tools",
        )
    if output is None and target.endpoint == "embeddings":
        output = Fixed(1)  # an embeddings answer has no output tokens: nothing to ask
    server_tokenize = wt.str("server_tokenize", "auto", choices=SERVER_TOKENIZE)
    if tokenizer is not None and server_tokenize == "on":
        wt.fail(
            "server_tokenize",
            'is "on", and workload.tokenizer already makes the lengths exact; remove one',
        )
    wt.finish()
    return _WorkloadKeys(
        wt,
        prompt,
        output,
        tokenizer,
        sources,
        system_prompt_tokens,
        ignore_eos,
        temperature,
        top_p,
        extra_body,
        batch,
        server_tokenize,
    )


def _extra_body(wt: Table) -> tuple[dict[str, Any], int]:
    """[workload.extra_body] (keys the harness sets refused) with the tool definitions of
    `tools` / `tool_choice` merged in, and the number of tools."""
    extra_t = wt.table("extra_body", Table({}, wt.where, "workload.extra_body"))
    for key in extra_t.data:
        if key in OWNED_BODY_KEYS:
            extra_t.fail(key, f"is set by the harness: {OWNED_BODY_KEYS[key]}; remove it")
    extra_body = dict(extra_t.data)
    tools = wt.int("tools", 0, min=0, max=MAX_TOOLS)
    tool_choice = wt.str("tool_choice", None, choices=TOOL_CHOICES)
    if tool_choice is not None and not tools:
        wt.fail("tool_choice", "needs tools = N (how many tool definitions each request sends)")
    if tools:
        for key in ("tools", "tool_choice"):
            if key in extra_body:
                extra_t.fail(key, "is set by workload.tools; remove one of the two")
        extra_body = {**tools_body(tools, tool_choice or "auto"), **extra_body}
    return extra_body, tools


def _phases(top: Table, where: str, base_dir: Path, limit: int) -> tuple[Phase, ...]:
    """[[phases]]: at least one, names unique, at least one measured."""
    phases_raw = top.list("phases")
    if not phases_raw:
        top.fail("phases", "expected at least one [[phases]] table")
    phases = tuple(
        _parse_phase(Table(p, where, f"phases.{i}"), base_dir, limit)
        for i, p in enumerate(phases_raw)
    )
    names = [p.name for p in phases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        top.fail("phases", f"phase names must be unique; repeated: {', '.join(sorted(dup))}")
    if all(p.warmup for p in phases):
        top.fail(
            "phases", "every phase is a warm-up; at least one must be measured (warmup = false)"
        )
    return phases


def _workload(keys: _WorkloadKeys, phases: tuple[Phase, ...], limit: int, where: str) -> Workload:
    """The Workload: [workload] checked against the phases (a trace's rows are single requests
    of one length each), the plan's size checked before anything is drawn, lengths settled."""
    wt, sources = keys.wt, keys.sources
    if sources.conversation is not None and any(isinstance(p.arrival, Trace) for p in phases):
        wt.fail(
            "agent" if sources.conversation.agent is not None else "conversation",
            "a trace's rows are single requests with their own times and lengths; "
            "replay it without conversation, or drive sessions from a rate or closed-loop users",
        )
    if keys.batch > 1 and any(isinstance(p.arrival, Trace) for p in phases):
        wt.fail("batch", "draws each input's length; a trace's rows carry one length each")
    check_plan_size(phases, sources.conversation, limit, where)  # before anything is drawn
    prompt_dist, output_dist = settle_lengths(
        keys.prompt, keys.output, sources, [p.arrival for p in phases], where
    )
    return Workload(
        prompt_dist,
        output_dist,
        system_prompt_tokens=keys.system_prompt_tokens,
        ignore_eos=keys.ignore_eos,
        temperature=keys.temperature,
        top_p=keys.top_p,
        extra_body=keys.extra_body,
        tokenizer=keys.tokenizer,
        sources=sources,
        server_tokenize=keys.server_tokenize,
        batch=keys.batch,
    )


def _sim_paths(sim: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """`[sim]`'s files relative to the scenario's folder, as trace and length files are:
    `preset_file` always, `model` where it names a model folder or config.json found there (a
    preset name or a cached repo name is left as it is)."""
    preset = sim.get("preset_file")
    if isinstance(preset, str) and preset and not Path(preset).expanduser().is_absolute():
        sim["preset_file"] = str(base_dir / preset)
    model = sim.get("model")
    if (
        isinstance(model, str)
        and model
        and not Path(model).expanduser().is_absolute()
        and (base_dir / model).exists()
    ):
        sim["model"] = str(base_dir / model)
    return sim


def check_endpoint_workload(scn: Scenario, endpoint: str) -> None:
    """What the workload asks that the run's endpoint cannot send: ConfigError naming the key.
    (The endpoint is known only once `--endpoint`, the files and the scenario are resolved.)"""
    wl = scn.workload
    if wl.batch > 1 and endpoint != "embeddings":
        raise ConfigError(
            scn.path,
            "workload.batch",
            f'is {wl.batch}: inputs per embeddings request; the endpoint is "{endpoint}" '
            '(set endpoint = "embeddings", or remove batch)',
        )
    conv = wl.sources.conversation
    if conv is not None and conv.agent is not None and endpoint != "chat":
        raise ConfigError(
            scn.path,
            "workload.agent",
            f'sends tool calls and tool results as chat messages; the endpoint is "{endpoint}" '
            '(set endpoint = "chat")',
        )
    if endpoint == "embeddings" and wl.sources.conversation is not None:
        raise ConfigError(
            scn.path,
            "workload.conversation",
            "an embeddings request has no answer to send back: conversations need chat, "
            "completions or responses",
        )


def _tokenizer(wt: Table, base_dir: Path) -> str | None:
    """`workload.tokenizer`: a Hugging Face tokenizer.json, checked loadable now."""
    raw = wt.str("tokenizer", None)
    if raw is None:
        return None
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    if not path.is_file():
        wt.fail(
            "tokenizer",
            f"{str(path)!r} is not a file; give the path of a Hugging Face tokenizer.json",
        )
    from harness.workload.prompts import load_tokenizer

    try:
        load_tokenizer(str(path))
    except ImportError:
        wt.fail("tokenizer", "needs the tokenizers package: pip install 'harness[tokenizer]'")
    except Exception as exc:  # noqa: BLE001 - the library raises its own types for a bad file
        wt.fail(
            "tokenizer",
            f"{str(path)!r} is not a tokenizer.json the tokenizers package can read: "
            f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}",
        )
    return str(path)


def load_scenario(
    path: str | Path | Mapping[str, Any],
    sets: list[str] | None = None,
    seed: int | None = None,
    adapt: Callable[[dict[str, Any]], None] | None = None,
) -> Scenario:
    """Read, override and validate a scenario file, or a scenario document already in memory
    (a quick run's, harness.config.quick; named by its `name`, paths relative to the working
    directory). `adapt`: a command's own change to the document after `sets` (a capacity
    probe's rate and length); an error in a key it wrote names the file, never `--set`.
    Raises ConfigError / UsageError."""
    if isinstance(path, Mapping):
        doc, where, base = copy.deepcopy(dict(path)), str(path.get("name", "scenario")), Path(".")
    else:
        p = Path(path)
        doc, where, base = load_toml_file(p), str(p), p.parent
    set_paths = apply_overrides(doc, list(sets or []))
    if seed is not None:
        doc["seed"] = seed
    if adapt is not None:
        adapt(doc)
    return validate_scenario(doc, where, base, set_paths)


__all__ = [
    "ENDPOINTS",
    "check_endpoint_workload",
    "MAX_PHASE_REQUESTS",
    "OWNED_BODY_KEYS",
    "Phase",
    "RetryPolicy",
    "Scenario",
    "SloLimit",
    "TargetOverrides",
    "Workload",
    "attribute_to_set",
    "load_scenario",
    "validate_scenario",
]
