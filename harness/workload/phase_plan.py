"""The plan's shape: `Plan` (the run drawn ahead of time) and its `PhasePlan`s, what the engine
executes. Drawn by harness.workload.plan (`build_plan`); described for the result and the run's
notes by harness.workload.describe.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.workload.conversation import SessionPlan
from harness.workload.datasets import DatasetPrompts
from harness.workload.prefixes import PromptSource
from harness.workload.prompts import PromptMaker, prompt_seed


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
