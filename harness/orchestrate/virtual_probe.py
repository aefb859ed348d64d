"""A scenario's plan through the simulator's scheduler on its virtual clock: the records a run
over HTTP would have journaled, without HTTP and without real time.

Requests are what the engine would send (the plan's arrival times, prompt and answer lengths,
traces and datasets included) as the simulator would see them: its chat template around the
prompt, its EOS draw when `ignore_eos` is off, and its 400 for a request that cannot fit the
KV cache. Where prompts can share text (a system prompt, a trace's prefix blocks, prefix
groups, dataset rows, a tokenizer's text) each request's text is made as the engine makes it
and counted and block-hashed with the simulator's own functions (`chat_tokens`,
`block_hashes`), so its prefix cache hits exactly as over HTTP; otherwise each request's own
words share nothing, and only their count and the template's are needed. Each token's time is
when the API server delivers it (the end of the step that produced it, plus streaming). The
client is perfect (`VirtualClient`): an open-loop request is sent at its intended time, or, under a
phase's `max_concurrency`, when a slot frees; a closed loop's users send their next request
when the last one ends, plus think time. The simulator's `speedup` is kept: arrivals are in real
seconds and the model runs `speedup` times faster, so a virtual run and a run over HTTP against
the same `[sim]` see the same schedule. What this leaves out: network and client time, and
multi-turn sessions (refused: their later turns carry the answers' text).

Token channels are the simulator's: in reasoning mode (`[sim] reasoning_tokens`) each chat
request's first tokens are reasoning, drawn from the same seeded stream in the order requests
reach the server (and a natural "stop" comes after the thinking); a request with `tools` calls
one as the simulator decides (`tool_choice` "required" or a named function: always; "auto": at
`tool_call_share`), so TTFO, the first tool call and the per-channel ITL are measured as over
HTTP. The "auto" draw is seeded per request, not by the prompt's words as over HTTP: the same
share of calls, not always the same requests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from harness.errors import UsageError
from harness.orchestrate.virtual_client import NS_PER_S, VirtualClient
from harness.record.metrics import Columns
from harness.record.records import Channel
from harness.sim.engine import output_target
from harness.sim.protocol import block_hashes, chat_tokens, completion_tokens
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from harness.sim.settings import ResolvedSim
from harness.sim.state import ChunkSizes
from harness.sim.virtual import VirtualSteps, run_virtual_steps
from harness.workload.plan import Plan, build_plan
from harness.workload.scenario import Scenario

SIM_VIEW_CACHE_MAX = 500_000  # requests whose simulator view is kept between virtual runs
REASONING_STREAM = 0x7EA5  # the simulator's seeded stream of reasoning lengths (harness.sim.app)
TOOL_STREAM = 0x7001  # the virtual run's own stream of "auto" tool-call draws
_sim_view_cache: dict[tuple[object, ...], tuple[int, tuple[int, ...]]] = {}


@dataclass(frozen=True)
class VirtualProbe:
    """One virtual run. Times in ns from the run's start, like a journal's."""

    columns: Columns
    phase_windows_ns: tuple[tuple[int, int], ...]  # planned start and end of every phase
    measured: tuple[int, ...]  # indices of the non-warm-up phases
    end_ns: int  # the last token of the run
    waiting: tuple[np.ndarray, np.ndarray]  # (step start ns, requests waiting) per step
    steps: int
    ignored: tuple[str, ...]  # scenario features the virtual run leaves out

    @property
    def span_ns(self) -> tuple[int, int]:
        """From the first measured phase's start to the last one's planned end."""
        w = [self.phase_windows_ns[i] for i in self.measured]
        return (w[0][0], w[-1][1])


def _template_tokens(endpoint: str) -> int:
    """Tokens the simulator adds around a lone user message (its chat template), or 0."""
    return (
        len(chat_tokens([{"role": "user", "content": ""}]))
        if endpoint in ("chat", "responses")
        else 0
    )


def _sim_view(
    plan: Plan,
    seq: int,
    n_tokens: int,
    endpoint: str,
    block_size: int,
    caching: bool,
    key: tuple[object, ...],
) -> tuple[int, tuple[int, ...]]:
    """(prompt tokens as the simulator counts them, its prefix-cache block hashes) of request
    `seq`, from the very text the engine would send. Cached: probes at other rates reuse it."""
    ck = (*key, seq, n_tokens)
    hit = _sim_view_cache.get(ck)
    if hit is not None:
        return hit
    text = plan.prompt_text(n_tokens, seq)
    if endpoint in ("chat", "responses"):
        msgs = [{"role": "system", "content": plan.system_prompt}] if plan.system_prompt else []
        words = chat_tokens([*msgs, {"role": "user", "content": text}])
    else:
        words = completion_tokens(f"{plan.system_prompt} {text}" if plan.system_prompt else text)
    view = (len(words), block_hashes(words, block_size) if caching else ())
    if len(_sim_view_cache) >= SIM_VIEW_CACHE_MAX:
        _sim_view_cache.clear()
    _sim_view_cache[ck] = view
    return view


def _windows(scn: Scenario, plan: Plan) -> list[tuple[int, int]]:
    """Each phase's planned (start, end) in ns, back to back. A count-bound closed loop has no
    planned end (0 long here): the client (`VirtualClient`) closes its window when its last answer
    ends and moves the phases after it."""
    out, t = [], 0
    for pp in plan.phases:
        if pp.sessions is not None:
            raise UsageError(
                f"{scn.path}: workload.conversation: a session's later turns wait for the answers "
                "the server streams back, which the virtual clock does not produce; run the "
                "scenario over HTTP (python -m harness run) instead"
            )
        d = int(round((pp.duration_s or 0.0) * NS_PER_S))
        out.append((t, t + d))
        t += d
    return out


def _channel_draws(
    scn: Scenario, resolved: ResolvedSim, seq: np.ndarray, endpoint: str
) -> tuple[ChunkSizes | None, np.ndarray]:
    """The simulator's reasoning-length stream (None: no reasoning mode, or not chat) and, per
    row, whether its answer is a tool call (`harness.sim.state.channels_of`)."""
    s = resolved.settings
    calls = np.zeros(len(seq), bool)
    if endpoint != "chat":
        return None, calls
    thinking = (
        ChunkSizes(s.reasoning_tokens, s.seed, REASONING_STREAM) if s.reasoning_tokens else None
    )
    body = scn.workload.extra_body
    choice = body.get("tool_choice", "auto")
    if body.get("tools") and choice != "none":
        if choice == "auto":
            u = np.random.default_rng([s.seed, TOOL_STREAM]).random(
                int(seq.max()) + 1 if len(seq) else 0
            )
            calls = u[seq] < s.tool_call_share
        else:  # "required" or a named function
            calls = np.ones(len(seq), bool)
    return thinking, calls


def _channels(
    n_chunks: np.ndarray, starts: np.ndarray, reasoning: np.ndarray, calls: np.ndarray
) -> np.ndarray | None:
    """The Channel of every stamp (one token each): a request's first `reasoning` tokens, then
    its tool call or its answer; None when every token is an answer."""
    if not reasoning.any() and not calls.any():
        return None
    pos = np.arange(int(n_chunks.sum())) - np.repeat(starts, n_chunks)
    after = np.where(np.repeat(calls, n_chunks), int(Channel.TOOL), int(Channel.ANSWER))
    return np.where(pos < np.repeat(reasoning, n_chunks), int(Channel.REASONING), after).astype(
        np.int8
    )


@dataclass
class _Rows:
    """The plan as one row per request, phases back to back: its seq, phase, planned send time
    (ns; the client overwrites it with the actual send) and planned lengths (the prompt with
    the system prompt)."""

    seq: np.ndarray
    phase: np.ndarray
    t_int: np.ndarray
    prompt: np.ndarray
    output: np.ndarray

    @classmethod
    def of(cls, plan: Plan, windows: list[tuple[int, int]]) -> _Rows:
        system = plan.system_prompt_tokens
        seqs, phases, intended, planned_p, planned_o = [], [], [], [], []
        for pp, (start, _) in zip(plan.phases, windows, strict=True):
            offsets = pp.offsets_s if not pp.closed else np.zeros(pp.count)
            t = start + np.round(offsets * NS_PER_S).astype(np.int64)
            seqs.append(pp.first_seq + np.arange(pp.count, dtype=np.int64))
            phases.append(np.full(pp.count, pp.index, np.int64))
            intended.append(t)
            planned_p.append(pp.prompt_tokens + system)
            planned_o.append(pp.output_tokens)
        empty = np.zeros(0, np.int64)
        return cls(
            np.concatenate(seqs) if seqs else empty,
            np.concatenate(phases) if phases else empty,
            np.concatenate(intended) if intended else empty,
            np.concatenate(planned_p).astype(np.int64) if planned_p else empty,
            np.concatenate(planned_o).astype(np.int64) if planned_o else empty,
        )


def _server_prompts(
    scn: Scenario, plan: Plan, resolved: ResolvedSim, rows: _Rows, endpoint: str
) -> tuple[np.ndarray, dict[int, tuple[int, ...]]]:
    """(each row's prompt as the simulator counts it, the block hashes of the rows whose text
    can share a prefix with another's: made as the engine makes them, `_sim_view`)."""
    system = plan.system_prompt_tokens
    bs = resolved.block_size
    caching = resolved.settings.enable_prefix_caching
    exact_phases = {
        pp.index
        for pp in plan.phases
        if pp.prompts is not None or plan.system_prompt or scn.workload.tokenizer
    }
    key = (
        plan.seed,
        plan.system_prompt,
        endpoint,
        bs,
        caching,
        scn.workload.tokenizer,
        tuple(
            hashlib.sha1(pp.prompts.digest_bytes()).hexdigest() if pp.prompts is not None else ""
            for pp in plan.phases
        ),
    )
    server_p = rows.prompt + _template_tokens(endpoint)
    hashes_of: dict[int, tuple[int, ...]] = {}
    for i in np.flatnonzero(np.isin(rows.phase, list(exact_phases))).tolist():
        server_p[i], hashes_of[i] = _sim_view(
            plan, int(rows.seq[i]), int(rows.prompt[i] - system), endpoint, bs, caching, key
        )
    return server_p, hashes_of


class _Admission:
    """Each row as the simulator takes it when it reaches the server (`make`): refused at once
    when it cannot fit, its EOS and reasoning length drawn in arrival order."""

    def __init__(
        self,
        scn: Scenario,
        resolved: ResolvedSim,
        rows: _Rows,
        server_p: np.ndarray,
        hashes_of: dict[int, tuple[int, ...]],
        thinking: ChunkSizes | None,
    ) -> None:
        limit = min(resolved.kv_capacity_tokens, resolved.max_model_len)
        self.rows, self.server_p, self.hashes_of, self.thinking = (
            rows,
            server_p,
            hashes_of,
            thinking,
        )
        self.bs = resolved.block_size
        self.caching = resolved.settings.enable_prefix_caching
        self.eos_rng = np.random.default_rng([resolved.settings.seed, 0xE05])
        self.ignore_eos = scn.workload.ignore_eos
        self.target_o = rows.output.copy()
        self.accepted = (server_p + rows.output) <= limit
        self.reasoning_o = np.zeros(len(rows.seq), np.int64)

    def make(self, i: int, at_s: float) -> SimRequest | None:
        """Row i as the simulator takes it (None: refused at once, a 400). The server draws
        EOS in the order requests reach it."""
        if not self.accepted[i]:
            return None
        pot, target_o, reasoning_o = self.rows.output, self.target_o, self.reasoning_o
        reason = "length"
        if not self.ignore_eos:
            target_o[i], reason = output_target(int(pot[i]), False, self.eos_rng)
        if self.thinking is not None:  # the simulator's order: a draw per request that reaches it
            reasoning_o[i] = self.thinking.next()
            if reason == "stop":  # the answer's natural end comes after the thinking
                target_o[i] = min(int(pot[i]), int(target_o[i]) + int(reasoning_o[i]))
        p = int(self.server_p[i])
        hashes = self.hashes_of.get(i, ())
        if self.caching and i not in self.hashes_of:  # a request's own words: nobody else's blocks
            # consecutive names from a per-request 64-bit start: distinct from every other
            # request's (the cache only compares names; as likely to collide as one hash each)
            start = hash(("request", int(self.rows.seq[i])))
            hashes = tuple(range(start, start + p // self.bs))
        return SimRequest(i, p, int(target_o[i]), hashes)


def virtual_run(scn: Scenario, resolved: ResolvedSim) -> VirtualProbe:
    """Run the scenario's plan on the simulator described by `resolved`: open loops, closed
    loops and concurrency caps (`VirtualClient`). Raises UsageError for multi-turn sessions (their
    later turns carry the answers' text)."""
    plan = build_plan(scn)
    windows = _windows(scn, plan)
    endpoint = scn.target.endpoint or "chat"
    speedup = resolved.settings.speedup  # model seconds per real second
    rows = _Rows.of(plan, windows)
    server_p, hashes_of = _server_prompts(scn, plan, resolved, rows, endpoint)
    thinking, calls = _channel_draws(scn, resolved, rows.seq, endpoint)
    admission = _Admission(scn, resolved, rows, server_p, hashes_of, thinking)
    planned_ns = rows.t_int.copy()
    planned_windows = list(windows)
    client = VirtualClient(plan, windows, rows.phase, rows.t_int, speedup, admission.make)
    arrivals = client.initial()
    sched = Scheduler(SchedulerConfig.from_resolved(resolved), resolved.roofline)
    steps = run_virtual_steps(sched, arrivals, follow=client.follow)
    # each phase's planned times, from its actual start; closed loops have no schedule
    moved = np.zeros(len(rows.phase), np.int64)
    for pp, planned_w, actual_w in zip(plan.phases, planned_windows, windows, strict=True):
        moved[client.rows[pp.index]] = actual_w[0] - planned_w[0]
    closed_rows = np.isin(rows.phase, [pp.index for pp in plan.phases if pp.closed])
    intended_ns = np.where(closed_rows, rows.t_int, planned_ns + moved)
    cols = _columns(rows, intended_ns, client.sent, steps, admission, calls, speedup)
    last_ns = int(cols.end.max()) if len(cols.seq) else 0
    if windows and plan.phases[-1].duration_s is None:  # a count-bound closed loop, last
        windows[-1] = (windows[-1][0], max(windows[-1][0], last_ns))
    end_ns = int(max(last_ns, windows[-1][1] if windows else 0))
    return VirtualProbe(
        columns=cols,
        phase_windows_ns=tuple(windows),
        measured=tuple(i for i, ph in enumerate(scn.phases) if not ph.warmup),
        end_ns=end_ns,
        waiting=(np.round(steps.start_s / speedup * NS_PER_S).astype(np.int64), steps.num_waiting),
        steps=steps.steps,
        ignored=(),
    )


def _columns(
    rows: _Rows,
    intended_ns: np.ndarray,
    keep: np.ndarray,
    steps: VirtualSteps,
    admission: _Admission,
    calls: np.ndarray,
    speedup: float,
) -> Columns:
    """The run's records as a journal's columns: one token per stamp, each at the end of the
    step that made it. Rows a closed loop never sent (its phase ended first) are not requests
    of the run; they emitted nothing, so dropping them leaves the token stamps as they are."""
    n = len(rows.seq)
    rid = steps.emitted_rid
    tok_order = np.argsort(rid, kind="stable")
    stamps = np.round(steps.token_end_s[tok_order] / speedup * NS_PER_S).astype(np.int64)
    n_chunks = np.bincount(rid, minlength=n).astype(np.int64) if n else np.zeros(0, np.int64)
    seq, phase, n_chunks = rows.seq[keep], rows.phase[keep], n_chunks[keep]
    accepted = admission.accepted[keep]
    reasoning_o, calls = admission.reasoning_o[keep], calls[keep]
    sent_ns, intended_ns = rows.t_int[keep], intended_ns[keep]
    ppt, pot, server_p = rows.prompt[keep], rows.output[keep], admission.server_p[keep]
    n = len(seq)
    starts = np.zeros(n, np.int64)
    if n:
        starts[1:] = np.cumsum(n_chunks)[:-1]
    has = n_chunks > 0
    end = np.where(has, 0, sent_ns)
    end[has] = stamps[starts[has] + n_chunks[has] - 1]
    return Columns(
        seq=seq,
        phase=phase,
        intended=intended_ns,
        sent=sent_ns.copy(),
        end=end,
        ok=accepted.copy(),
        retried=np.zeros(n, bool),
        prompt_tokens=np.where(accepted, server_p, 0),
        output_tokens=n_chunks.copy(),
        planned_prompt=ppt,
        planned_output=pot,
        usage_per_chunk=np.ones(n, bool),
        error_class=[None if a else "http_400" for a in accepted.tolist()],
        n_chunks=n_chunks,
        chunk_start=starts,
        stamps=stamps,
        tokens=np.ones(len(stamps), np.int64),
        channel=_channels(n_chunks, starts, reasoning_o, calls),
        usage_reasoning=np.where(accepted, np.minimum(reasoning_o, n_chunks), -1)
        if admission.thinking is not None
        else None,
    )
