"""Shared prompt prefixes: trace prefix blocks (Mooncake `hash_ids`) and `[workload] prefix_groups`.

Theory of operation
-------------------
A server's prefix cache reuses the KV of a prompt's leading tokens when an earlier prompt began
with the very same tokens. So sharing is made of identical *text*:

- Trace blocks. A Mooncake row lists the ids of its prompt's 512-token blocks. Block id `b` is
  always the same BLOCK_TOKENS words, drawn from a seed made of (scenario seed, b): equal ids give
  identical content, different ids different content. A row's prompt is its blocks' words in
  order (the last block cut to the row's length); tokens past the listed blocks are the
  request's own words.
- Prefix groups. `prefix_groups = { groups = N, tokens = <dist>, share = f }`: a share f of the
  requests of each synthetic phase is drawn, uniformly, into N groups. Group g has a prefix of
  P_g tokens (drawn once from `tokens`) put *before* the request's own `prompt_tokens` words,
  as `system_prompt_tokens` is, so a grouped request's prompt is P_g + its own length (RAG
  documents, agent preambles).

Text is made per request by the engine from these seeds (`PromptSource.text`), so the plan
holds ids and counts, not strings. `implied_reuse` computes the share of planned prompt tokens
that lie in a block or prefix already sent earlier in the run: what an unbounded prefix cache
would hit. A real server hits less (whole blocks only, evictions), which is why its counters
are worth showing beside it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from harness.config.validate import Table
from harness.workload.lengths import LengthDist, parse_length
from harness.workload.prompts import _WORD_ARRAY, WORDS, PromptMaker, prompt_seed

BLOCK_TOKENS = 512  # Mooncake's hash_ids block size (its traces' README and paper)
BLOCK_CACHE = 4096  # block texts kept per process: ~10 MB of words, a trace's hot set
MAX_GROUPS = 1_000_000
REUSE_SLICE_ROWS = 65_536  # rows per step of the implied-reuse count: bounded temporaries


class PromptSource(Protocol):
    """Where a phase's prompt text comes from when it is not the default per-request words."""

    def text(self, k: int, n_tokens: int, seq: int, plan_seed: int, maker: PromptMaker) -> str:
        """The prompt of the phase's request k (global number `seq`) of n_tokens planned tokens."""
        ...

    def digest_bytes(self) -> bytes:
        """Everything that decides the texts, for Plan.digest()."""
        ...


def _seed(kind: str, plan_seed: int, ident: int) -> int:
    """A text seed for a block or group id: a hash, so it never meets a request's own seed."""
    h = hashlib.blake2b(f"{kind}|{plan_seed}|{ident}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFF_FFFF_FFFF_FFFF


_MIX1, _MIX2, _GOLDEN = (
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
    np.uint64(0x9E3779B97F4A7C15),
)


def hashed_words(seed: int, n: int) -> list[str]:
    """n words, word i chosen by splitmix64(seed + i): one vectorised pass, no generator to
    seed, so a 512-word block costs ~20 us where a seeded numpy generator costs ~100 us. The
    first n words of a longer draw are the same words (a block cut short is a prefix)."""
    x = (np.arange(n, dtype=np.uint64) + np.uint64(seed & 0xFFFF_FFFF_FFFF_FFFF)) * _GOLDEN
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return list(_WORD_ARRAY[(x % np.uint64(len(WORDS))).astype(np.intp)])


@lru_cache(maxsize=BLOCK_CACHE)
def _shared_text(
    maker: PromptMaker, kind: str, plan_seed: int, ident: int, n: int, full: int
) -> str:
    """The first n tokens of shared text `ident` whose whole length is `full`: a prefix of the
    full text, so a block cut short still shares its start with the same block in full."""
    if maker.tokenizer_path is not None:
        return maker.text(n, _seed(kind, plan_seed, ident))
    return " ".join(hashed_words(_seed(kind, plan_seed, ident), n))


def own_text(maker: PromptMaker, n_tokens: int, seq: int, plan_seed: int) -> str:
    return maker.text(n_tokens, prompt_seed(plan_seed, seq)) if n_tokens > 0 else ""


@dataclass(frozen=True, slots=True, eq=False)
class BlockPrompts:
    """Prompts built from a trace's prefix block ids. Request k's ids: ids[starts[k]:starts[k+1]]."""

    starts: np.ndarray  # int64, n + 1
    ids: np.ndarray  # int64
    block_tokens: int = BLOCK_TOKENS

    def text(self, k: int, n_tokens: int, seq: int, plan_seed: int, maker: PromptMaker) -> str:
        k %= len(self.starts) - 1
        bt = self.block_tokens
        parts: list[str] = []
        left = n_tokens
        for b in self.ids[self.starts[k] : self.starts[k + 1]].tolist():
            if left <= 0:
                break
            n = min(bt, left)
            parts.append(_shared_text(maker, "block", plan_seed, b, n, bt))
            left -= n
        if left > 0:
            parts.append(own_text(maker, left, seq, plan_seed))
        return " ".join(parts)

    def digest_bytes(self) -> bytes:
        return b"blocks|%d|" % self.block_tokens + self.starts.tobytes() + self.ids.tobytes()


@dataclass(frozen=True, slots=True, eq=False)
class GroupPrompts:
    """Request k's prompt: group[k]'s prefix (none for -1), then its own words."""

    group: np.ndarray  # int64 group per request, -1 for none
    prefix_tokens: np.ndarray  # int64 per group

    def text(self, k: int, n_tokens: int, seq: int, plan_seed: int, maker: PromptMaker) -> str:
        k %= len(self.group)
        g = int(self.group[k])
        if g < 0:
            return own_text(maker, n_tokens, seq, plan_seed)
        p = int(self.prefix_tokens[g])
        prefix = _shared_text(maker, "group", plan_seed, g, p, p)
        return (
            f"{prefix} {own_text(maker, n_tokens - p, seq, plan_seed)}" if n_tokens > p else prefix
        )

    def digest_bytes(self) -> bytes:
        return b"groups|" + self.group.tobytes() + self.prefix_tokens.tobytes()


@dataclass(frozen=True, slots=True)
class PrefixGroups:
    """`[workload] prefix_groups`: N groups, prefix lengths drawn from `tokens`, a `share` grouped."""

    groups: int
    tokens: LengthDist
    share: float = 1.0

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Group per request (-1: not grouped), for n requests."""
        grouped = rng.random(n) < self.share
        group = rng.integers(0, self.groups, size=n, dtype=np.int64)
        return np.where(grouped, group, -1)

    def __str__(self) -> str:
        return f"prefix_groups({self.groups} groups, {self.tokens}, share {self.share:g})"


def parse_prefix_groups(t: Table, base_dir: Any) -> PrefixGroups:
    """`[workload] prefix_groups = { groups = N, tokens = <dist>, share = <fraction> }`."""
    groups = t.int("groups", min=1, max=MAX_GROUPS)
    tokens = parse_length(t.table("tokens"), base_dir)
    share = t.float("share", 1.0, min=0.0, max=1.0)
    t.finish()
    return PrefixGroups(groups, tokens, share)


def block_token_counts(
    starts: np.ndarray, prompt_tokens: np.ndarray, block_tokens: int = BLOCK_TOKENS
) -> np.ndarray:
    """Tokens of each listed block that a request's prompt really holds (its last block is cut to
    the prompt's length; blocks past it hold none), in the order of the flat id array."""
    counts = np.diff(starts)
    pos = np.arange(int(starts[-1]), dtype=np.int64) - np.repeat(starts[:-1], counts)
    return np.clip(np.repeat(prompt_tokens, counts) - pos * block_tokens, 0, block_tokens)


@dataclass(slots=True)
class ReuseCounter:
    """Counts, request by request in run order, prompt tokens already sent in an earlier prompt."""

    prompt_tokens: int = 0
    reused: dict[str, int] | None = None
    seen_blocks: set[int] | None = None
    seen_groups: set[int] | None = None
    system_sent: bool = False

    def __post_init__(self) -> None:
        self.reused = {"system_prompt": 0, "prefix_groups": 0, "trace_blocks": 0}
        self.seen_blocks, self.seen_groups = set(), set()

    def add_system(self, n_requests: int, system_tokens: int) -> None:
        """A shared system prompt: every request after the run's first reuses it."""
        assert self.reused is not None
        if n_requests <= 0 or system_tokens <= 0:
            return
        repeats = n_requests if self.system_sent else n_requests - 1
        self.reused["system_prompt"] += repeats * system_tokens
        self.system_sent = True

    def add_blocks(self, src: BlockPrompts, prompt_tokens: np.ndarray) -> None:
        """Blocks sent before in the run (this phase's earlier rows or an earlier phase's), counted
        REUSE_SLICE_ROWS rows at a time so the temporaries stay small for a million-row trace."""
        assert self.reused is not None and self.seen_blocks is not None
        n = len(src.starts) - 1
        for lo in range(0, n, REUSE_SLICE_ROWS):
            hi = min(n, lo + REUSE_SLICE_ROWS)
            a, b = int(src.starts[lo]), int(src.starts[hi])
            ids = src.ids[a:b]
            if not len(ids):
                continue
            tokens = block_token_counts(
                src.starts[lo : hi + 1] - a, prompt_tokens[lo:hi], src.block_tokens
            )
            uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
            reused = np.ones(len(ids), dtype=bool)
            reused[first] = False  # the first time in this slice ...
            earlier = np.fromiter(
                (u in self.seen_blocks for u in uniq.tolist()), dtype=bool, count=len(uniq)
            )
            reused |= earlier[inverse]  # ... unless an earlier slice or phase had it
            self.reused["trace_blocks"] += int(tokens[reused].sum())
            self.seen_blocks.update(uniq.tolist())

    def add_groups(self, src: GroupPrompts) -> None:
        assert self.reused is not None and self.seen_groups is not None
        g = src.group[src.group >= 0]
        if not len(g):
            return
        uniq, first = np.unique(g, return_index=True)
        again = np.ones(len(g), dtype=bool)
        again[first] = False
        for u in uniq.tolist():
            if u in self.seen_groups:
                again[g == u] = True
        self.reused["prefix_groups"] += int(src.prefix_tokens[g[again]].sum())
        self.seen_groups.update(uniq.tolist())

    def result(self) -> dict[str, Any]:
        assert self.reused is not None
        total = sum(self.reused.values())
        return {
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": total,
            "share": total / self.prompt_tokens if self.prompt_tokens else 0.0,
            "by_source_tokens": dict(self.reused),
            "assumes": "an unbounded prefix cache and prompts in plan order; a server caches whole "
            "blocks only and evicts, so its hit share is at most this",
        }
