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

from dataclasses import replace
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.workload.arrivals import Closed, Trace
from harness.workload.conversation import SessionPlan, session_layout
from harness.workload.datasets import DatasetPrompts, DatasetSampler
from harness.workload.describe import describe_workload
from harness.workload.phase_plan import PhasePlan as PhasePlan
from harness.workload.phase_plan import Plan as Plan
from harness.workload.prefixes import BlockPrompts, GroupPrompts, PromptSource
from harness.workload.prompts import PromptMaker, ServerVocabulary, prefix_seed
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
        lengths = _lengths(scn, i, n, drawn, None)
        return _closed_phase(i, ph, arrival, first_seq, lengths, _batch_inputs(scn, i, n))
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
    lengths = _lengths(scn, i, n, drawn, trace)
    return _open_phase(i, ph, offsets, first_seq, lengths, _batch_inputs(scn, i, n))


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
        return _closed_phase(i, ph, arrival, first_seq, (prompt, output, source), sessions=sessions)
    offsets = arrival.times(_rng(scn.seed, i, _STREAM_ARRIVALS), ph.duration_s, ph.requests)
    prompt, output, source, sessions = _session_lengths(scn, i, len(offsets), drawn, planned)
    return _open_phase(i, ph, offsets, first_seq, (prompt, output, source), sessions=sessions)


Lengths = tuple[np.ndarray, np.ndarray, PromptSource | None]  # prompt, output, text source


def _closed_phase(
    i: int,
    ph: Phase,
    arrival: Closed,
    first_seq: int,
    lengths: Lengths,
    input_tokens: np.ndarray | None = None,
    sessions: SessionPlan | None = None,
) -> PhasePlan:
    """A closed-loop phase: no schedule; the lengths are the pool its users take in order."""
    prompt, output, source = lengths
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
        input_tokens,
    )


def _open_phase(
    i: int,
    ph: Phase,
    offsets: np.ndarray,
    first_seq: int,
    lengths: Lengths,
    input_tokens: np.ndarray | None = None,
    sessions: SessionPlan | None = None,
) -> PhasePlan:
    """An open-loop phase: its schedule (`offsets`, arrivals or session starts); planned to
    last its duration, or to its last arrival."""
    prompt, output, source = lengths
    n = len(offsets)
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
        sessions,
        input_tokens,
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
    passes = drawn.sampler.passes if drawn.sampler is not None else None
    info, notes = describe_workload(scn, phases, passes, drawn.group_prefix)
    return Plan(scn.seed, tuple(phases), system, n_system, maker, info, notes)
