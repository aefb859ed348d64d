"""Plan: everything random about a run, drawn ahead of it, as numpy arrays.

Theory of operation
-------------------
`build_plan(scenario)` is pure and deterministic: the same scenario and seed give a
byte-identical plan (`Plan.digest()`). For each phase it draws, from generators seeded by
(scenario seed, phase index, stream), the intended send offsets (seconds from the phase
start) and the prompt and output lengths of every request. The engine only executes the plan:
it never draws a random number on its hot path.

Phases run back to back. An open-loop phase has a fixed schedule; its planned length is its
`duration`, or the time of its last arrival for a `requests` count. A closed-loop phase has no
schedule: each user sends its next request when the last one ends (plus think time), so its
intended times are computed by the engine; its lengths come from a pre-drawn pool used in order
(cycled if a duration-bound phase outruns it). A phase after a count-bound closed phase starts
when that phase actually ends.

Prompt text is made by the engine, request by request, from the plan's seeds: by default each
request's own words (`prompt_seed`). A phase may carry a `PromptSource` instead: a trace's
prefix blocks (`prefixes.BlockPrompts`), prefix groups (`prefixes.GroupPrompts`) or dataset rows
(`datasets.DatasetPrompts`, rows drawn here by one scenario-wide `DatasetSampler`). The plan also
describes its sources (`Plan.workload`, kept in the result, and `Plan.notes`, printed by the run),
including the prefix reuse the workload implies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.workload.arrivals import Closed, Trace
from harness.workload.conversation import SessionPlan, session_layout
from harness.workload.curves import bin_width_s, counts_per_bin
from harness.workload.datasets import DatasetPrompts, DatasetSampler
from harness.workload.prefixes import BlockPrompts, GroupPrompts, PromptSource, ReuseCounter
from harness.workload.prompts import PromptMaker, ServerVocabulary, prefix_seed, prompt_seed
from harness.workload.scenario import Phase, Scenario
from harness.workload.size import check_drawn

_STREAM_ARRIVALS, _STREAM_PROMPT, _STREAM_OUTPUT, _STREAM_GROUPS, _STREAM_DATASET = 1, 2, 3, 4, 5
_STREAM_TURNS, _STREAM_THINK, _STREAM_TOOL_RESULT = 6, 7, 8
_SCENARIO_WIDE = (
    0xFFFF_FFFF  # the "phase" of draws made once per scenario (group prefixes, dataset rows)
)
CLOSED_POOL_MIN = 1024  # lengths pre-drawn for a duration-bound closed phase ...
CLOSED_POOL_PER_USER = 256  # ... or this many per user, whichever is larger
CLOSED_POOL_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class PhasePlan:
    index: int
    name: str
    warmup: bool
    closed: bool
    offsets_s: np.ndarray  # open loop: intended send offsets from phase start (float64)
    prompt_tokens: np.ndarray  # int64, one per request (closed: the pool, used in order)
    output_tokens: np.ndarray  # int64
    first_seq: int  # global sequence number of this phase's first request
    duration_s: float | None  # planned length; None for a count-bound closed phase
    requests: int | None  # closed loop: requests to complete (None: run for duration_s)
    users: int = 0
    think_s: float = 0.0
    max_concurrency: int | None = None
    prompts: PromptSource | None = None  # None: each request's own synthetic words
    sessions: SessionPlan | None = (
        None  # multi-turn: offsets_s (open loop) are the sessions' starts,
    )
    # the lengths are per request, session after session
    input_tokens: np.ndarray | None = None  # embeddings with workload.batch > 1: (count, batch)
    # int64, each input's length; prompt_tokens is their sum. None: one input per request

    def inputs(self, k: int) -> list[int]:
        """The input lengths of request k (closed loop: of pool entry k): an embeddings batch."""
        if self.input_tokens is None:
            return [int(self.prompt_tokens[k])]
        return [int(v) for v in self.input_tokens[k]]

    @property
    def count(self) -> int:
        """Requests planned (closed loop with a duration: the size of the length pool)."""
        return len(self.prompt_tokens)

    @property
    def arrivals(self) -> int:
        """Arrivals planned: sessions where the phase runs sessions, else requests."""
        return self.sessions.count if self.sessions is not None else self.count


@dataclass(frozen=True, slots=True)
class Plan:
    seed: int
    phases: tuple[PhasePlan, ...]
    system_prompt: str
    system_prompt_tokens: int = 0
    prompts: PromptMaker = PromptMaker()
    workload: dict[str, Any] = field(default_factory=dict, compare=False)  # what the result keeps
    notes: tuple[str, ...] = ()  # lines the run prints about where prompts and times come from

    def prompt_text(self, n_tokens: int, seq: int) -> str:
        """Request `seq`'s prompt: n_tokens of text from its own seed, or from its phase's source
        (trace prefix blocks, prefix groups, a dataset)."""
        n_tokens = self.prompts.content_tokens(n_tokens)
        for p in reversed(self.phases):
            if p.first_seq <= seq:
                if p.prompts is not None:
                    return p.prompts.text(seq - p.first_seq, n_tokens, seq, self.seed, self.prompts)
                break
        return self.prompts.text(n_tokens, prompt_seed(self.seed, seq))

    def digest(self) -> str:
        """sha256 over every array and field: equal digests mean identical plans."""
        h = hashlib.sha256()
        h.update(f"{self.seed}|{self.system_prompt}|{self.prompts.tokenizer_path}".encode())
        if self.prompts.vocabulary is not None:
            h.update(self.prompts.vocabulary.digest_bytes())
        for p in self.phases:
            h.update(
                f"|{p.index}|{p.name}|{p.warmup}|{p.closed}|{p.first_seq}|{p.duration_s}|"
                f"{p.requests}|{p.users}|{p.think_s}|{p.max_concurrency}".encode()
            )
            for arr in (p.offsets_s, p.prompt_tokens, p.output_tokens):
                h.update(np.ascontiguousarray(arr).tobytes())
            if p.input_tokens is not None:
                h.update(np.ascontiguousarray(p.input_tokens).tobytes())
            if p.prompts is not None:
                h.update(p.prompts.digest_bytes())
            if p.sessions is not None:
                h.update(p.sessions.digest_bytes())
        for src in {
            id(p.prompts): p.prompts for p in self.phases if isinstance(p.prompts, DatasetPrompts)
        }.values():
            for text in src.texts:
                h.update(hashlib.sha256(text.encode()).digest())
        return h.hexdigest()

    @property
    def total_requests(self) -> int:
        return sum(p.count if not p.closed or p.requests else 0 for p in self.phases)

    @property
    def peak_concurrency_hint(self) -> int:
        """A bound used to size connection pools: closed users or the phases' caps."""
        best = 0
        for p in self.phases:
            if p.closed:
                best = max(best, p.users)
            elif p.max_concurrency:
                best = max(best, p.max_concurrency)
            else:
                best = max(best, min(p.count, 10_000))
        return max(best, 1)


SEQ_RESERVE_OPEN_ENDED = 10_000_000  # seq numbers kept for a duration-bound closed phase


def _rng(seed: int, phase: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, phase, stream])


class _Drawn:
    """Scenario-wide draws shared by the phases: the dataset's rows, the groups' prefixes."""

    def __init__(self, scn: Scenario) -> None:
        src = scn.workload.sources
        self.dataset = src.dataset
        self.sampler = (
            DatasetSampler(src.dataset, _rng(scn.seed, _SCENARIO_WIDE, _STREAM_DATASET))
            if src.dataset is not None
            else None
        )
        self.groups = src.prefix_groups
        self.group_prefix = (
            src.prefix_groups.tokens.sample(
                src.prefix_groups.groups, _rng(scn.seed, _SCENARIO_WIDE, _STREAM_GROUPS)
            )
            if src.prefix_groups is not None
            else None
        )


def _lengths(
    scn: Scenario, i: int, n: int, drawn: _Drawn, trace: Trace | None
) -> tuple[np.ndarray, np.ndarray, PromptSource | None]:
    """Prompt and output lengths of a phase's n requests, and where their text comes from."""
    wl = scn.workload
    if drawn.sampler is not None:
        assert drawn.dataset is not None
        rows = drawn.sampler.take(n)
        table = drawn.dataset.table
        prompt = table.prompt_tokens[rows]
        output = (
            table.output_tokens[rows]
            if drawn.dataset.output_from_answers
            else wl.output_tokens.sample(n, _rng(scn.seed, i, _STREAM_OUTPUT))
        )
        return prompt, output, DatasetPrompts(table.texts, rows)
    if trace is not None:
        rows_ = trace.rows
        prompt = (
            rows_.prompt_tokens[:n].copy()
            if rows_.prompt_tokens is not None
            else wl.prompt_tokens.sample(n, _rng(scn.seed, i, _STREAM_PROMPT))
        )
        output = (
            rows_.output_tokens[:n].copy()
            if rows_.output_tokens is not None
            else wl.output_tokens.sample(n, _rng(scn.seed, i, _STREAM_OUTPUT))
        )
        source: PromptSource | None = None
        if rows_.hash_ids is not None and rows_.hash_starts is not None:
            starts = rows_.hash_starts[: n + 1]
            source = BlockPrompts(starts - starts[0], rows_.hash_ids[starts[0] : starts[-1]])
        return prompt, output, source
    if wl.batch > 1:  # embeddings: each input its own length; the request's is their sum
        inputs = wl.prompt_tokens.sample(n * wl.batch, _rng(scn.seed, i, _STREAM_PROMPT))
        return inputs.reshape(n, wl.batch).sum(axis=1), np.zeros(n, dtype=np.int64), None
    prompt = wl.prompt_tokens.sample(n, _rng(scn.seed, i, _STREAM_PROMPT))
    output = wl.output_tokens.sample(n, _rng(scn.seed, i, _STREAM_OUTPUT))
    if drawn.groups is not None and drawn.group_prefix is not None:
        group = drawn.groups.draw(n, _rng(scn.seed, i, _STREAM_GROUPS))
        prompt = prompt + np.where(group >= 0, drawn.group_prefix[np.maximum(group, 0)], 0)
        return prompt, output, GroupPrompts(group, drawn.group_prefix)
    return prompt, output, None


def _session_lengths(
    scn: Scenario, i: int, n: int, drawn: _Drawn, planned: int | None
) -> tuple[np.ndarray, np.ndarray, PromptSource | None, SessionPlan]:
    """Per-request lengths of n sessions (their turns back to back), the dataset's user messages
    where a dataset drives the turns, and the sessions' layout. `planned`: requests the plan
    holds before this phase, checked with these sessions' turns against the limit (None: a
    closed loop's pool, not planned requests)."""
    conv = scn.workload.sources.conversation
    assert conv is not None
    wl = scn.workload
    turns = conv.draw_turns(n, _rng(scn.seed, i, _STREAM_TURNS))
    if planned is not None:
        check_drawn(
            planned + int(turns.sum()),
            scn.max_planned_requests,
            scn.path,
            f"phases.{i}",
            f"{n:,} sessions with {int(turns.sum()):,} turns in all (and {planned:,} before them)",
        )
    source: PromptSource | None = None
    if drawn.sampler is not None:
        assert drawn.dataset is not None
        table = drawn.dataset.table
        rows = drawn.sampler.take(n).tolist()
        later = table.later_turns
        texts: list[str] = []
        prompt_l: list[int] = []
        output_l: list[int] = []
        for s, row in enumerate(rows):
            more = later[row] if later else ()
            turns[s] = min(int(turns[s]), 1 + len(more))
            texts.append(table.texts[row])
            prompt_l.append(int(table.prompt_tokens[row]))
            output_l.append(int(table.output_tokens[row]))
            for text, p_tok, o_tok in more[: int(turns[s]) - 1]:
                texts.append(text)
                prompt_l.append(p_tok)
                output_l.append(o_tok)
        prompt = np.asarray(prompt_l, dtype=np.int64)
        output = (
            np.asarray(output_l, dtype=np.int64)
            if drawn.dataset.output_from_answers
            else wl.output_tokens.sample(len(texts), _rng(scn.seed, i, _STREAM_OUTPUT))
        )
        source = DatasetPrompts(tuple(texts), np.arange(len(texts), dtype=np.int64))
    else:
        total = int(turns.sum())
        prompt = wl.prompt_tokens.sample(total, _rng(scn.seed, i, _STREAM_PROMPT))
        output = wl.output_tokens.sample(total, _rng(scn.seed, i, _STREAM_OUTPUT))
    think = conv.think.sample(len(prompt), _rng(scn.seed, i, _STREAM_THINK))
    if conv.agent is not None:  # every session the same layout (harness.workload.agent)
        ag = conv.agent
        results = ag.tool_result_tokens.sample(len(prompt), _rng(scn.seed, i, _STREAM_TOOL_RESULT))
        firsts, joins = np.tile(ag.firsts(), n), np.tile(ag.joins(), n)
        prompt = np.where(firsts, prompt, results)  # a task, else the tool result sent back
        think = np.where(firsts | joins, 0.0, think)  # no tool time before a task or a join
    return prompt, output, source, session_layout(turns, think, conv)


def _plan_phase(
    scn: Scenario, i: int, ph: Phase, first_seq: int, drawn: _Drawn, planned: int
) -> PhasePlan:
    """Phase i's plan; `planned`: the requests planned before it (the size limit counts all)."""
    arrival = ph.arrival
    if scn.workload.sources.conversation is not None:
        return _plan_sessions(scn, i, ph, first_seq, drawn, planned)
    if isinstance(arrival, Closed):
        if ph.requests is not None:
            n = ph.requests
        else:
            n = min(max(CLOSED_POOL_MIN, CLOSED_POOL_PER_USER * arrival.users), CLOSED_POOL_MAX)
        prompt, output, source = _lengths(scn, i, n, drawn, None)
        return PhasePlan(
            i,
            ph.name,
            ph.warmup,
            True,
            np.zeros(0),
            prompt,
            output,
            first_seq,
            ph.duration_s,
            ph.requests,
            arrival.users,
            arrival.think_time_s,
            ph.max_concurrency,
            source,
            input_tokens=_batch_inputs(scn, i, n),
        )
    offsets = arrival.times(_rng(scn.seed, i, _STREAM_ARRIVALS), ph.duration_s, ph.requests)
    n = len(offsets)
    check_drawn(
        planned + n,
        scn.max_planned_requests,
        scn.path,
        f"phases.{i}",
        f"{arrival} drew {n:,} arrivals (and {planned:,} before them)",
    )
    trace = arrival if isinstance(arrival, Trace) else None
    if trace is not None and n == 0:
        raise ConfigError(
            scn.path,
            f"phases.{i}.duration",
            f"is {ph.duration_s:g} s, and the trace's first "
            f"arrival comes at {float(trace.rows.offsets_s[0]):g} s: the phase would send nothing",
        )
    prompt, output, source = _lengths(scn, i, n, drawn, trace)
    duration = ph.duration_s if ph.duration_s is not None else (float(offsets[-1]) if n else 0.0)
    return PhasePlan(
        i,
        ph.name,
        ph.warmup,
        False,
        offsets.astype(np.float64),
        prompt,
        output,
        first_seq,
        duration,
        None,
        0,
        0.0,
        ph.max_concurrency,
        source,
        input_tokens=_batch_inputs(scn, i, n),
    )


def _batch_inputs(scn: Scenario, i: int, n: int) -> np.ndarray | None:
    """Each input's length of phase i's n embeddings requests (`workload.batch` > 1): the same
    draw `_lengths` summed, so a request's prompt_tokens is its inputs' sum."""
    b = scn.workload.batch
    if b <= 1:
        return None
    return scn.workload.prompt_tokens.sample(n * b, _rng(scn.seed, i, _STREAM_PROMPT)).reshape(n, b)


def _plan_sessions(
    scn: Scenario, i: int, ph: Phase, first_seq: int, drawn: _Drawn, planned: int
) -> PhasePlan:
    """A phase whose arrivals start multi-turn sessions: open loop, each intended time starts
    one; closed loop, each request a user takes is a whole session (`requests`: sessions)."""
    arrival = ph.arrival
    if isinstance(arrival, Closed):
        conv = scn.workload.sources.conversation
        assert conv is not None
        # A duration-bound pool: CLOSED_POOL_MAX requests at most, so fewer sessions of many turns
        per_session = conv.turns.mean_estimate if conv.turns is not None else 1.0
        n = (
            ph.requests
            if ph.requests is not None
            else min(
                max(CLOSED_POOL_MIN, CLOSED_POOL_PER_USER * arrival.users),
                max(1, int(CLOSED_POOL_MAX / max(per_session, 1.0))),
            )
        )
        prompt, output, source, sessions = _session_lengths(
            scn, i, n, drawn, planned if ph.requests is not None else None
        )
        return PhasePlan(
            i,
            ph.name,
            ph.warmup,
            True,
            np.zeros(0),
            prompt,
            output,
            first_seq,
            ph.duration_s,
            ph.requests,
            arrival.users,
            arrival.think_time_s,
            ph.max_concurrency,
            source,
            sessions,
        )
    offsets = arrival.times(_rng(scn.seed, i, _STREAM_ARRIVALS), ph.duration_s, ph.requests)
    prompt, output, source, sessions = _session_lengths(scn, i, len(offsets), drawn, planned)
    duration = (
        ph.duration_s
        if ph.duration_s is not None
        else (float(offsets[-1]) if len(offsets) else 0.0)
    )
    return PhasePlan(
        i,
        ph.name,
        ph.warmup,
        False,
        offsets.astype(np.float64),
        prompt,
        output,
        first_seq,
        duration,
        None,
        0,
        0.0,
        ph.max_concurrency,
        source,
        sessions,
    )


def with_vocabulary(plan: Plan, vocabulary: ServerVocabulary, info: dict[str, Any]) -> Plan:
    """The plan with prompts made from the words the server's /tokenize measured (exact lengths):
    the same draws and lengths, the text remade from that vocabulary -- the system prompt now,
    each request's text by the engine, less the server's template tokens -- and `info` kept as
    `plan.workload.prompt_lengths`."""
    maker = PromptMaker(plan.prompts.tokenizer_path, vocabulary)
    n_system = plan.system_prompt_tokens
    system = maker.text(n_system, prefix_seed(plan.seed)) if n_system > 0 else ""
    return replace(
        plan,
        prompts=maker,
        system_prompt=system,
        workload={**plan.workload, "prompt_lengths": info},
    )


def build_plan(scn: Scenario) -> Plan:
    """Draw the whole run ahead of time. Pure: no clock, no I/O, no global randomness."""
    phases: list[PhasePlan] = []
    seq = 0
    drawn = _Drawn(scn)
    planned = 0  # requests planned so far (a closed loop bound by a duration plans none)
    for i, ph in enumerate(scn.phases):
        pp = _plan_phase(scn, i, ph, seq, drawn, planned)
        phases.append(pp)
        planned += pp.count if not pp.closed or pp.requests is not None else 0
        seq += SEQ_RESERVE_OPEN_ENDED if pp.closed and pp.requests is None else pp.count
    maker = PromptMaker(scn.workload.tokenizer)
    n_system = scn.workload.system_prompt_tokens
    system = maker.text(n_system, prefix_seed(scn.seed)) if n_system > 0 else ""
    info, notes = describe_workload(scn, phases, drawn)
    return Plan(scn.seed, tuple(phases), system, n_system, maker, info, notes)


def describe_workload(
    scn: Scenario, phases: list[PhasePlan], drawn: _Drawn
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """What the result keeps about the workload's sources (plan.workload) and what the run prints."""
    info: dict[str, Any] = {}
    notes: list[str] = []
    reuse = ReuseCounter()
    n_system = scn.workload.system_prompt_tokens
    traces: dict[str, Any] = {}
    for ph, pp in zip(scn.phases, phases, strict=True):
        reuse.prompt_tokens += int(pp.prompt_tokens.sum()) + n_system * pp.count
        reuse.add_system(pp.count, n_system)
        if isinstance(pp.prompts, BlockPrompts):
            reuse.add_blocks(pp.prompts, pp.prompt_tokens)
        elif isinstance(pp.prompts, GroupPrompts):
            reuse.add_groups(pp.prompts)
        if isinstance(ph.arrival, Trace):
            t = ph.arrival
            entry = dict(t.info)
            entry["requests_planned"] = pp.count
            rows = t.rows
            if rows.log_type is not None:
                codes, counts = np.unique(rows.log_type[: pp.count], return_counts=True)
                entry["log_types"] = {
                    rows.log_types[c]: int(k)
                    for c, k in zip(codes.tolist(), counts.tolist(), strict=True)
                }
            if rows.failed is not None:
                entry["failed_rows"] = int(rows.failed[: pp.count].sum())
            span = (pp.duration_s or float(rows.offsets_s[pp.count - 1])) if pp.count else 0.0
            b = bin_width_s(span)
            entry["curve"] = {
                "bin_s": b,
                "trace_bin_s": b / t.time_scale,
                "requests": counts_per_bin(rows.offsets_s[: pp.count], b, span).tolist(),
            }
            traces[ph.name] = entry
            how = "detected from its first line" if t.info["format_detected"] else "as configured"
            window = f"from {t.info['window_start_s']:g} s" + (
                f" for {t.info['window_duration_s']:g} s"
                if t.info["window_duration_s"] is not None
                else ""
            )
            rate = t.info["replay_mean_rate_per_s"]
            notes.append(
                f"phase {ph.name}: trace {t.path} read as {t.format} ({how}); {pp.count:,} of "
                f"{t.info['rows_read']:,} rows replayed, window {window}, time_scale {t.time_scale:.4g}"
                + (f", mean {rate:.3g}/s" if rate is not None else "")
                + (
                    "; prompts from the dataset, not the trace's lengths"
                    if drawn.dataset is not None
                    else ""
                )
            )
    conv = scn.workload.sources.conversation
    if conv is not None:
        sessions = {
            pp.name: {"sessions_planned": pp.sessions.count, "requests_planned": pp.count}
            for pp in phases
            if pp.sessions is not None
        }
        info["conversation"] = {
            "turns_dist": None if conv.turns is None else str(conv.turns),
            "think_time": str(conv.think),
            "history": conv.history,
            "last_n": conv.last_n if conv.history == "last_n" else None,
            "turns_from_dataset": drawn.dataset is not None,
            "phases": sessions,
        }
        if conv.agent is not None:
            info["agent"] = {**conv.agent.info(), "tool_time": str(conv.think)}
        notes.append(
            ("agent sessions: " if conv.agent is not None else "multi-turn sessions: ")
            + conv.describe()
            + "; "
            + ", ".join(
                f"phase {k}: {v['sessions_planned']:,} sessions, {v['requests_planned']:,} requests"
                for k, v in sessions.items()
            )
        )
    if traces:
        info["traces"] = traces
    if drawn.dataset is not None and drawn.sampler is not None:
        ds = dict(drawn.dataset.info)
        ds["passes"] = drawn.sampler.passes
        info["dataset"] = ds
        notes.append(
            f"prompts: {drawn.dataset.format} dataset {drawn.dataset.path}, {ds['usable_rows']:,} of "
            f"{ds['rows']:,} rows usable"
            + (
                f" ({', '.join(f'{v} {k}' for k, v in ds['skipped_rows'].items())})"
                if ds["skipped_rows"]
                else ""
            )
            + f", {ds['order']} order {'with' if ds['replacement'] else 'without'} replacement; output "
            f"lengths from {ds['output_tokens_from']}"
        )
    if drawn.groups is not None and drawn.group_prefix is not None:
        info["prefix_groups"] = {
            "groups": drawn.groups.groups,
            "share": drawn.groups.share,
            "prefix_tokens_dist": str(drawn.groups.tokens),
            "prefix_tokens_mean": float(drawn.group_prefix.mean()),
        }
    implied = reuse.result()
    info["implied_prefix_reuse"] = implied
    if implied["reused_tokens"]:
        notes.append(
            f"implied prefix reuse: {100 * implied['share']:.1f} % of {implied['prompt_tokens']:,} planned "
            "prompt tokens were sent before in the run (an unbounded cache's hit share)"
        )
    return info, tuple(notes)
