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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from harness.config.scenario import Phase, Scenario
from harness.workload.arrivals import Closed, Trace
from harness.workload.prompts import PromptMaker, prefix_seed

_STREAM_ARRIVALS, _STREAM_PROMPT, _STREAM_OUTPUT = 1, 2, 3
CLOSED_POOL_MIN = 1024        # lengths pre-drawn for a duration-bound closed phase ...
CLOSED_POOL_PER_USER = 256    # ... or this many per user, whichever is larger
CLOSED_POOL_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class PhasePlan:
    index: int
    name: str
    warmup: bool
    closed: bool
    offsets_s: np.ndarray          # open loop: intended send offsets from phase start (float64)
    prompt_tokens: np.ndarray      # int64, one per request (closed: the pool, used in order)
    output_tokens: np.ndarray      # int64
    first_seq: int                 # global sequence number of this phase's first request
    duration_s: float | None       # planned length; None for a count-bound closed phase
    requests: int | None           # closed loop: requests to complete (None: run for duration_s)
    users: int = 0
    think_s: float = 0.0
    max_concurrency: int | None = None

    @property
    def count(self) -> int:
        """Requests planned (closed loop with a duration: the size of the length pool)."""
        return len(self.prompt_tokens)


@dataclass(frozen=True, slots=True)
class Plan:
    seed: int
    phases: tuple[PhasePlan, ...]
    system_prompt: str
    system_prompt_tokens: int = 0
    prompts: PromptMaker = PromptMaker()

    def prompt_text(self, n_tokens: int, seq: int) -> str:
        """Request `seq`'s prompt: n_tokens of text from its own seed."""
        return self.prompts.text(n_tokens, prompt_seed(self.seed, seq))

    def digest(self) -> str:
        """sha256 over every array and field: equal digests mean identical plans."""
        h = hashlib.sha256()
        h.update(f"{self.seed}|{self.system_prompt}|{self.prompts.tokenizer_path}".encode())
        for p in self.phases:
            h.update(f"|{p.index}|{p.name}|{p.warmup}|{p.closed}|{p.first_seq}|{p.duration_s}|"
                     f"{p.requests}|{p.users}|{p.think_s}|{p.max_concurrency}".encode())
            for arr in (p.offsets_s, p.prompt_tokens, p.output_tokens):
                h.update(np.ascontiguousarray(arr).tobytes())
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


def prompt_seed(plan_seed: int, seq: int) -> int:
    """The seed of request `seq`'s prompt words (distinct per request, fixed per scenario)."""
    return (plan_seed * 1_000_003 + seq * 7_919 + 1) & 0x7FFF_FFFF_FFFF


SEQ_RESERVE_OPEN_ENDED = 10_000_000  # seq numbers kept for a duration-bound closed phase


def _rng(seed: int, phase: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, phase, stream])


def _plan_phase(scn: Scenario, i: int, ph: Phase, first_seq: int) -> PhasePlan:
    wl = scn.workload
    arrival = ph.arrival
    if isinstance(arrival, Closed):
        if ph.requests is not None:
            n = ph.requests
        else:
            n = min(max(CLOSED_POOL_MIN, CLOSED_POOL_PER_USER * arrival.users), CLOSED_POOL_MAX)
        prompt = wl.prompt_tokens.sample(n, _rng(scn.seed, i, _STREAM_PROMPT))
        output = wl.output_tokens.sample(n, _rng(scn.seed, i, _STREAM_OUTPUT))
        return PhasePlan(i, ph.name, ph.warmup, True, np.zeros(0), prompt, output, first_seq,
                         ph.duration_s, ph.requests, arrival.users, arrival.think_time_s,
                         ph.max_concurrency)
    offsets = arrival.times(_rng(scn.seed, i, _STREAM_ARRIVALS), ph.duration_s, ph.requests)
    n = len(offsets)
    if isinstance(arrival, Trace):
        prompt = np.asarray(arrival.prompt_tokens[:n], dtype=np.int64)
        output = np.asarray(arrival.output_tokens[:n], dtype=np.int64)
    else:
        prompt = wl.prompt_tokens.sample(n, _rng(scn.seed, i, _STREAM_PROMPT))
        output = wl.output_tokens.sample(n, _rng(scn.seed, i, _STREAM_OUTPUT))
    duration = ph.duration_s if ph.duration_s is not None else (float(offsets[-1]) if n else 0.0)
    return PhasePlan(i, ph.name, ph.warmup, False, offsets.astype(np.float64), prompt, output,
                     first_seq, duration, None, 0, 0.0, ph.max_concurrency)


def build_plan(scn: Scenario) -> Plan:
    """Draw the whole run ahead of time. Pure: no clock, no I/O, no global randomness."""
    phases: list[PhasePlan] = []
    seq = 0
    for i, ph in enumerate(scn.phases):
        pp = _plan_phase(scn, i, ph, seq)
        phases.append(pp)
        seq += SEQ_RESERVE_OPEN_ENDED if pp.closed and pp.requests is None else pp.count
    maker = PromptMaker(scn.workload.tokenizer)
    n_system = scn.workload.system_prompt_tokens
    system = maker.text(n_system, prefix_seed(scn.seed)) if n_system > 0 else ""
    return Plan(scn.seed, tuple(phases), system, n_system, maker)
