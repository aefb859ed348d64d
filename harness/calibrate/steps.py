"""Calibration, step 2: recover engine steps from token stamps (`observed_steps`): every
active stream gets one token per step, so stamps cluster, one cluster per step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.calibrate.load import MeasuredRun
from harness.sim.roofline import Roofline

CLUSTER_GAP_NS = 2_000_000  # tokens of one step reach the client within ~1 ms of each other ...
CLUSTER_GAP_ITL_SHARE = 0.25  # ... or, on a busy machine, within a quarter of a step
DEFAULT_BLOCK_SIZE = 16
# llama.cpp's default n_batch: a step takes every pending prompt token up to this many.
DEFAULT_BATCH_TOKENS = 2048


@dataclass(frozen=True)
class Steps:
    """Engine steps recovered from token stamps: their work and measured duration."""

    group: np.ndarray  # per step: the measured gap it belongs to (a gap may hold two)
    num_tokens: np.ndarray
    num_seqs: np.ndarray
    num_sampled: np.ndarray
    kv_read_tokens: np.ndarray
    attention_pairs: np.ndarray
    duration_s: np.ndarray  # per gap
    batch: np.ndarray  # per gap: streams decoding in it (for reports)
    prefill: np.ndarray  # per gap: it holds prompt work

    def model_s(self, roofline: Roofline) -> np.ndarray:
        """Modelled seconds per gap (the sum of its steps)."""
        per_step = roofline.step_times_s(
            self.num_tokens,
            self.num_seqs,
            self.num_sampled,
            self.kv_read_tokens,
            self.attention_pairs,
        )
        return np.bincount(self.group, weights=per_step, minlength=len(self.duration_s))

    @classmethod
    def concat(cls, parts: Sequence[Steps]) -> Steps:
        names = ("num_tokens", "num_seqs", "num_sampled", "kv_read_tokens", "attention_pairs")
        arrays = {n: np.concatenate([getattr(p, n) for p in parts]) for n in names}
        offsets = np.cumsum([0] + [len(p.duration_s) for p in parts[:-1]])
        return cls(
            group=np.concatenate([p.group + o for p, o in zip(parts, offsets, strict=True)]),
            **arrays,
            duration_s=np.concatenate([p.duration_s for p in parts]),
            batch=np.concatenate([p.batch for p in parts]),
            prefill=np.concatenate([p.prefill for p in parts]),
        )


# ---- steps from token stamps -----------------------------------------------------------------


def _clusters(run: MeasuredRun, gap_s: float) -> list[tuple[float, float, np.ndarray, np.ndarray]]:
    """(first stamp, last stamp, request ids, token positions) per cluster of token stamps."""
    t = np.concatenate(run.token_s)
    req = np.concatenate([np.full(len(x), i) for i, x in enumerate(run.token_s)])
    pos = np.concatenate([np.arange(len(x)) for x in run.token_s])
    order = np.argsort(t, kind="stable")
    t, req, pos = t[order], req[order], pos[order]
    out = []
    i = 0
    while i < len(t):
        j = i + 1
        seen = {int(req[i])}
        while j < len(t) and t[j] - t[j - 1] <= gap_s and int(req[j]) not in seen:
            seen.add(int(req[j]))
            j += 1
        out.append((float(t[i]), float(t[j - 1]), req[i:j], pos[i:j]))
        i = j
    return out


def cluster_gap_s(run: MeasuredRun) -> float:
    """Largest gap between two stamps of one step: CLUSTER_GAP_NS, or a quarter of the median
    inter-token latency when that is longer. A busy machine spreads one step's tokens over
    several ms (llama.cpp writes each stream in turn, a starved client reads them late); at a
    2 ms gap its steps at --parallel 4 fell apart into clusters of one or two streams, and the
    fit read every token as a step of its own. Steps are a median ITL apart, so a quarter of
    it never joins two (and a stream seen twice ends a cluster anyway)."""
    gaps = [np.diff(x) for x in run.token_s if len(x) > 1]
    itl = float(np.median(np.concatenate(gaps))) if gaps else 0.0
    return max(CLUSTER_GAP_NS / 1e9, CLUSTER_GAP_ITL_SHARE * itl)


def observed_steps(run: MeasuredRun, lag_steps: int = 1, gap_s: float | None = None) -> Steps:
    """Cluster every stream's token stamps into engine steps (see the module docstring).

    lag_steps 1 (llama.cpp, observed): a request's first token comes one step after the
    step that processed its prompt, so the prompt's work belongs to the previous cluster if
    the request had been sent and a slot was free then; otherwise (the engine was idle, or
    the slot was freed by the request that ended in the previous cluster) the cluster's gap
    holds two steps, prefill and a one-row step, and both are modelled.
    lag_steps 0 (the built-in simulator, vLLM): the first token ends the prompt's step.
    """
    if gap_s is None:
        gap_s = cluster_gap_s(run)
    clusters = _clusters(run, gap_s)
    # Step entries: [group, tokens, seqs, kv, pairs]; a group's model time is its sum.
    entries: list[list[float]] = []
    groups: list[tuple[float, float]] = []  # per cluster-gap: (duration, decode batch)
    owner: list[int] = []  # entry index of each cluster's main step, -1 if skipped
    attached = [0] * len(clusters)  # prompts moved into each cluster's step
    prev_end: float | None = None
    for k, (first, last, r, pos) in enumerate(clusters):
        new = r[pos == 0]
        is_decode = pos > 0 if lag_steps == 0 else np.ones(len(r), bool)
        dec, dpos = r[is_decode], pos[is_decode]
        ctx = run.prompt_tokens[dec] + dpos
        start = prev_end
        hidden: list[int] = []  # prompts whose step hides inside this gap
        attach: list[int] = []  # prompts that belong to the previous cluster's step
        for q in new.tolist():
            sent = float(run.sent_s[q])
            if (
                lag_steps
                and k >= 2
                and owner[k - 1] >= 0
                and clusters[k - 2][1] >= sent - gap_s
                and len(clusters[k - 1][2]) + attached[k - 1] < run.max_num_seqs
            ):
                attach.append(q)
                attached[k - 1] += 1
            else:
                hidden.append(q)
                start = sent if start is None else max(start, sent)
        prev_end = last
        for q in attach:
            e = entries[owner[k - 1]]
            p = float(run.prompt_tokens[q])
            e[1] += p
            e[2] += 1
            e[4] += p * (p + 1) / 2
        if start is None or first <= start:
            owner.append(-1)
            continue
        g = len(groups)
        groups.append((first - start, float(len(dec))))
        hp = run.prompt_tokens[hidden].astype(float)
        if len(hidden) and lag_steps:
            entries.append(
                [g, float(hp.sum()), float(len(hidden)), 0.0, float((hp * (hp + 1) / 2).sum())]
            )
            hp = np.zeros(0)
        owner.append(len(entries))
        entries.append(
            [
                g,
                float(len(dec) + hp.sum()),
                float(len(dec) + len(hp)),
                float(ctx.sum()),
                float((ctx + 1).sum() + (hp * (hp + 1) / 2).sum()),
            ]
        )
    return _as_steps(entries, groups)


def _as_steps(entries: list[list[float]], groups: list[tuple[float, float]]) -> Steps:
    """The step entries ([group, tokens, seqs, kv, pairs]) and cluster gaps ((duration, decode
    batch)) as Steps; a gap is a prefill where its steps carried more tokens than its batch."""
    a = np.array(entries, dtype=float).reshape(-1, 5)
    d = np.array(groups, dtype=float).reshape(-1, 2)
    return Steps(
        group=a[:, 0].astype(np.int64),
        num_tokens=a[:, 1],
        num_seqs=a[:, 2],
        num_sampled=a[:, 2],
        kv_read_tokens=a[:, 3],
        attention_pairs=a[:, 4],
        duration_s=d[:, 0],
        batch=d[:, 1],
        prefill=np.bincount(a[:, 0].astype(np.int64), weights=a[:, 1], minlength=len(d)) > d[:, 1],
    )
