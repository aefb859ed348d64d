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
client is perfect (`_Client`): an open-loop request is sent at its intended time, or, under a
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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.errors import UsageError
from harness.record.metrics import Columns
from harness.record.records import Channel
from harness.sim.app import ChunkSizes
from harness.sim.engine import output_target
from harness.sim.protocol import block_hashes, chat_tokens, completion_tokens
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from harness.sim.settings import ResolvedSim
from harness.sim.virtual import run_virtual_steps
from harness.workload.plan import Plan, build_plan
from harness.workload.scenario import Scenario

NS_PER_S = 1_000_000_000
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
    planned end (0 long here): the client (`_Client`) closes its window when its last answer
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


class _Client:
    """The client side of a virtual run: when each planned request is sent.

    Phases run back to back. An open-loop phase sends at its planned times; with
    `max_concurrency` a request waits for a free slot (sent when an earlier one of its phase
    ends, never before its planned time). A closed loop starts `users` requests at its phase's
    start and sends the next one of its length pool when one ends, plus the think time, until
    the pool is used up (a count-bound loop) or the phase's planned end (a duration-bound one;
    its pool is not cycled). A phase after a count-bound closed loop starts when that loop's
    last answer ends, and its planned times move with it. Times are model seconds (`speedup`
    times real ones); `windows` (ns) are updated to the phases' actual starts."""

    def __init__(
        self,
        plan: Plan,
        windows: list[tuple[int, int]],
        phase: np.ndarray,
        t_int: np.ndarray,
        speedup: float,
        make: Callable[[int, float], SimRequest | None],
    ) -> None:
        self.make = make  # row, send time (model s) -> the request, None if refused at once
        self.speedup = speedup
        self.phases = plan.phases
        self.windows = windows
        self.phase = phase
        self.t_int = t_int  # planned send ns (open loop); overwritten by the actual send
        self.sent = np.zeros(len(phase), bool)
        self.rows = {pp.index: np.flatnonzero(phase == pp.index) for pp in plan.phases}
        self.live = dict.fromkeys(self.rows, 0)  # phase -> requests sent and not ended
        self.pending: dict[int, deque[int]] = {}  # gated phase -> rows not sent yet, in order
        self.think_s: dict[int, float] = {}
        self.until_s: dict[int, float] = {}  # phase -> no send after this (model s)
        self.gated: set[int] = set()
        self.count_bound = {pp.index for pp in plan.phases if pp.closed and pp.duration_s is None}
        self.started: set[int] = set()
        for pp in plan.phases:
            if pp.closed or pp.max_concurrency:
                self.gated.add(pp.index)
                self.pending[pp.index] = deque(self.rows[pp.index].tolist())
                self.think_s[pp.index] = pp.think_s * speedup if pp.closed else 0.0

    def _s(self, ns: float) -> float:
        return float(ns) / NS_PER_S * self.speedup

    def _send(self, row: int, at_s: float) -> SimRequest | None:
        self.sent[row] = True
        self.t_int[row] = int(round(at_s / self.speedup * NS_PER_S))
        req = self.make(row, at_s)
        if req is not None:
            self.live[int(self.phase[row])] += 1
        return req

    def _next(self, ph: int, free_s: float) -> list[tuple[float, SimRequest]]:
        """A slot of phase `ph` is free at `free_s`: send its next request (and the next,
        while the server refuses them at once)."""
        out: list[tuple[float, SimRequest]] = []
        queue = self.pending[ph]
        while queue:
            row = queue[0]
            at = max(free_s, self._s(self.t_int[row]))
            if at > self.until_s[ph]:
                queue.clear()
                break
            queue.popleft()
            req = self._send(row, at)
            if req is not None:
                out.append((at, req))
                break
            free_s = at + self.think_s[ph]
        return out

    def _start_from(self, k: int, start_ns: int, free_s: float) -> list[tuple[float, SimRequest]]:
        """Phase k starts at `start_ns`, and each after it at its predecessor's planned end, up
        to and including the next count-bound closed loop (whose end is not planned)."""
        out: list[tuple[float, SimRequest]] = []
        for pp in self.phases[k:]:
            i = pp.index
            old_start, old_end = self.windows[i]
            self.windows[i] = (start_ns, start_ns + old_end - old_start)
            rows = self.rows[i]
            if pp.closed:
                self.t_int[rows] = start_ns
            else:
                self.t_int[rows] += start_ns - old_start
            self.until_s[i] = (
                self._s(self.windows[i][1]) if pp.closed and pp.duration_s is not None else np.inf
            )
            self.started.add(i)
            if i in self.gated:
                slots = pp.users if pp.closed else int(pp.max_concurrency or 0)
                for _ in range(slots):
                    queue = self.pending[i]
                    if not queue:
                        break
                    out += self._next(i, max(free_s, self._s(self.t_int[queue[0]])))
            else:
                for row in rows[np.argsort(self.t_int[rows], kind="stable")].tolist():
                    at = self._s(self.t_int[row])
                    req = self._send(row, at)
                    if req is not None:
                        out.append((at, req))
            if i in self.count_bound:
                out += self._advance(i, free_s)
                break
            start_ns = self.windows[i][1]
        return out

    def _advance(self, ph: int, at_s: float) -> list[tuple[float, SimRequest]]:
        """After count-bound closed loop `ph` has sent and ended everything: the next phase."""
        nxt = ph + 1
        if self.pending[ph] or self.live[ph] or nxt >= len(self.phases) or nxt in self.started:
            return []
        end_ns = int(round(at_s / self.speedup * NS_PER_S))
        self.windows[ph] = (self.windows[ph][0], max(self.windows[ph][0], end_ns))
        return self._start_from(nxt, self.windows[ph][1], at_s)

    def initial(self) -> list[tuple[float, SimRequest]]:
        """The requests sent before any answer."""
        return self._start_from(0, self.windows[0][0], 0.0) if self.phases else []

    def follow(self, finished: list[int], at_s: float) -> list[tuple[float, SimRequest]]:
        out: list[tuple[float, SimRequest]] = []
        for rid in finished:
            ph = int(self.phase[rid])
            self.live[ph] -= 1
            if ph in self.gated:
                out += self._next(ph, at_s + self.think_s[ph])
            if ph in self.count_bound:
                out += self._advance(ph, at_s)
        return out


def _channel_draws(
    scn: Scenario, resolved: ResolvedSim, seq: np.ndarray, endpoint: str
) -> tuple[ChunkSizes | None, np.ndarray]:
    """The simulator's reasoning-length stream (None: no reasoning mode, or not chat) and, per
    row, whether its answer is a tool call (`harness.sim.app.channels_of`)."""
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


def virtual_run(scn: Scenario, resolved: ResolvedSim) -> VirtualProbe:
    """Run the scenario's plan on the simulator described by `resolved`: open loops, closed
    loops and concurrency caps (`_Client`). Raises UsageError for multi-turn sessions (their
    later turns carry the answers' text)."""
    plan = build_plan(scn)
    windows = _windows(scn, plan)
    endpoint = scn.target.endpoint or "chat"
    system = plan.system_prompt_tokens
    added = _template_tokens(endpoint)
    bs = resolved.block_size
    caching = resolved.settings.enable_prefix_caching
    eos_rng = np.random.default_rng([resolved.settings.seed, 0xE05])
    ignore_eos = scn.workload.ignore_eos
    limit = min(resolved.kv_capacity_tokens, resolved.max_model_len)
    speedup = resolved.settings.speedup  # model seconds per real second
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

    seqs, phases, intended, planned_p, planned_o = [], [], [], [], []
    for pp, (start, _) in zip(plan.phases, windows, strict=True):
        offsets = pp.offsets_s if not pp.closed else np.zeros(pp.count)
        t = start + np.round(offsets * NS_PER_S).astype(np.int64)
        seqs.append(pp.first_seq + np.arange(pp.count, dtype=np.int64))
        phases.append(np.full(pp.count, pp.index, np.int64))
        intended.append(t)
        planned_p.append(pp.prompt_tokens + system)
        planned_o.append(pp.output_tokens)
    seq = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
    phase = np.concatenate(phases) if phases else np.zeros(0, np.int64)
    t_int = np.concatenate(intended) if intended else np.zeros(0, np.int64)
    ppt = np.concatenate(planned_p).astype(np.int64) if planned_p else np.zeros(0, np.int64)
    pot = np.concatenate(planned_o).astype(np.int64) if planned_o else np.zeros(0, np.int64)
    n = len(seq)
    server_p = ppt + added
    hashes_of: dict[int, tuple[int, ...]] = {}
    for i in np.flatnonzero(np.isin(phase, list(exact_phases))).tolist():
        server_p[i], hashes_of[i] = _sim_view(
            plan, int(seq[i]), int(ppt[i] - system), endpoint, bs, caching, key
        )
    target_o = pot.copy()
    accepted = (server_p + pot) <= limit
    thinking, calls = _channel_draws(scn, resolved, seq, endpoint)
    reasoning_o = np.zeros(n, np.int64)

    def make(i: int, at_s: float) -> SimRequest | None:
        """Row i as the simulator takes it (None: refused at once, a 400). The server draws
        EOS in the order requests reach it."""
        if not accepted[i]:
            return None
        reason = "length"
        if not ignore_eos:
            target_o[i], reason = output_target(int(pot[i]), False, eos_rng)
        if thinking is not None:  # the simulator's order: a draw per request that reaches it
            reasoning_o[i] = thinking.next()
            if reason == "stop":  # the answer's natural end comes after the thinking
                target_o[i] = min(int(pot[i]), int(target_o[i]) + int(reasoning_o[i]))
        p = int(server_p[i])
        hashes = hashes_of.get(i, ())
        if caching and i not in hashes_of:  # a request's own words: blocks nobody else has
            hashes = tuple(hash(("request", int(seq[i]), k)) for k in range(p // bs))
        return SimRequest(i, p, int(target_o[i]), hashes)

    planned_ns = t_int.copy()
    planned_windows = list(windows)
    client = _Client(plan, windows, phase, t_int, speedup, make)
    arrivals = client.initial()
    sched = Scheduler(SchedulerConfig.from_resolved(resolved), resolved.roofline)
    steps = run_virtual_steps(sched, arrivals, follow=client.follow)

    rid = steps.emitted_rid
    tok_order = np.argsort(rid, kind="stable")
    stamps = np.round(steps.token_end_s[tok_order] / speedup * NS_PER_S).astype(np.int64)
    n_chunks = np.bincount(rid, minlength=n).astype(np.int64) if n else np.zeros(0, np.int64)
    # Rows a closed loop never sent (its phase ended first) are not requests of the run; they
    # emitted nothing, so dropping them leaves the token stamps as they are.
    keep = client.sent
    closed_rows = np.isin(phase, [pp.index for pp in plan.phases if pp.closed])
    sent_ns = t_int
    moved = np.zeros(len(phase), np.int64)  # each phase's planned times, from its actual start
    for pp, planned_w, actual_w in zip(plan.phases, planned_windows, windows, strict=True):
        moved[client.rows[pp.index]] = actual_w[0] - planned_w[0]
    intended_ns = np.where(closed_rows, sent_ns, planned_ns + moved)  # closed: no schedule
    seq, phase, n_chunks, accepted = seq[keep], phase[keep], n_chunks[keep], accepted[keep]
    reasoning_o, calls = reasoning_o[keep], calls[keep]
    sent_ns, intended_ns, ppt, pot = sent_ns[keep], intended_ns[keep], ppt[keep], pot[keep]
    server_p = server_p[keep]
    n = len(seq)
    starts = np.zeros(n, np.int64)
    if n:
        starts[1:] = np.cumsum(n_chunks)[:-1]
    has = n_chunks > 0
    end = np.where(has, 0, sent_ns)
    end[has] = stamps[starts[has] + n_chunks[has] - 1]
    cols = Columns(
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
        if thinking is not None
        else None,
    )
    last_ns = int(end.max()) if n else 0
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
