"""vLLM V1-style scheduler: one pure `step()` per engine iteration, on a model clock that
its callers drive (`add(req, at_s)`, `step(now_s)`).

Theory of operation
-------------------
Every request is a token count that grows: `tokens` = prompt + output so far, of which
`computed` already have KV in the cache. Each step hands out a token budget
(`max_num_batched_tokens`):

1. Running requests first, in admission order, each asking for `tokens - computed` (the
   rest of its prompt, chunked by the budget, or 1 to decode). Each must get KV blocks for
   `computed + scheduled` tokens; when the pool is short, the most recently admitted
   running request is preempted (blocks freed, `computed` reset to 0, back to the front of
   the queue) -- vLLM's recompute preemption -- until the block fits or the request itself
   was the victim.
2. If nothing was preempted, waiting requests are admitted in order while fewer than
   `max_num_seqs` run, budget is left and blocks can be allocated. With prefix caching,
   full blocks of a cached prompt prefix are reused and not recomputed. Without chunked
   prefill, a prompt that does not fit the remaining budget waits.
3. A request whose `computed` reaches `tokens` samples one token this step. It finishes
   when its output reaches its target length.

`--batching static` admits a batch only when nothing runs; finished members stay in the batch
as padding (they cost a decode token each and keep their blocks) until its longest member ends.

The step's duration comes from the roofline over the work done, times seeded jitter.

The API server
--------------
vLLM's API server (one Python process in front of the engine) is modelled by
harness.sim.api_server: requests pass its intake before they wait here, and the tokens a step
emits are delivered when it has streamed them (`StepOutput.delivered_s`). The real-time loop
(engine.py) and the virtual clock (virtual.py) both drive this one mechanism: they pass arrival
and step-start times in model seconds, sleep/advance to `next_intake_s` when only intake is
pending, and deliver tokens at `delivered_s`. Called without times, the scheduler keeps its own
clock (the end of the last step) and jumps it to the next intake completion when nothing else
can run.

The running set lives in numpy arrays indexed by slot, so a decode step over 1,000 sequences
is a handful of vector operations; the Python-level loop only runs on the rare preemption
path and for requests being admitted or prefilled. A batch of a few requests (FEW_SEQUENCES),
most steps of a light load, runs the same step in Python ints (`_step_few`), where those vector
operations' fixed costs would dominate; tests/sim/test_sim_scheduler.py holds the two to the
same outputs. Each slot's state is one row of one int64 table (`_state`: computed, tokens,
blocks, target, hashed, rid; the `_computed`... fields are views of its columns), so the few
path reads its running set in one call. When the whole running set fits the token budget (any
step of decodes alone), each request gets all it asks and samples, and the vector step skips the clamp and
the filters that only matter when it does not. These shortcuts keep every result byte-identical:
benchmarks/virtual_identity.py writes a fixed set of virtual runs exactly, to compare two trees.

Why one module past ~500 lines: `Scheduler` is one state machine over per-slot numpy arrays,
and its two step paths (`_step` in vectors, `_step_few` in ints) and the admission, preemption
and release helpers they share must read and write those arrays the same way; split across
modules, that one invariant would be spread over files that each see half of it. Each step is
a few named phases (schedule running, admit, cost, apply, stream); the API server's model
(harness.sim.api_server) is its own module.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from harness.sim.api_server import ApiServer
from harness.sim.kvcache import BlockPool
from harness.sim.roofline import Roofline
from harness.sim.settings import ResolvedSim

JITTER_SIGMA = 0.03  # step times vary by a few percent, as measured on real GPUs
JITTER_CLIP = 0.10
FEW_SEQUENCES = 12  # up to this many running, `_step_few` (Python ints) outruns the numpy step
# the columns of `Scheduler._state`, one row per slot
COMPUTED, TOKENS, BLOCKS, TARGET, HASHED, RID = range(6)
STATE_FIELDS = 6
JITTER_DRAWS = 1024  # jitter is drawn this many at a time: the same stream as one draw per step


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    num_blocks: int
    block_size: int
    chunked_prefill: bool = True
    prefix_caching: bool = True
    static: bool = False
    seed: int = 0
    jitter: bool = True

    @classmethod
    def from_resolved(cls, r: ResolvedSim, jitter: bool = True) -> SchedulerConfig:
        s = r.settings
        return cls(
            max_num_seqs=r.max_num_seqs,
            max_num_batched_tokens=r.max_num_batched_tokens,
            num_blocks=r.num_gpu_blocks,
            block_size=s.block_size,
            chunked_prefill=s.enable_chunked_prefill,
            prefix_caching=s.enable_prefix_caching,
            static=s.batching == "static",
            seed=s.seed,
            jitter=jitter,
        )


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request as the scheduler sees it. `target_output` is where generation stops."""

    rid: int
    prompt_tokens: int
    target_output: int
    block_hashes: tuple[int, ...] = ()
    output: int = 0
    preemptions: int = 0
    state: str = "waiting"  # intake | waiting | running | finished | aborted
    slot: int = -1
    shared: list[int] = field(default_factory=list)  # hashes of shared blocks it references
    ever_scheduled: bool = False
    # prompt tokens found in the prefix cache when first scheduled (vLLM's num_cached_tokens:
    # the request's num_computed_tokens then; later preemptions do not change it); -1: not yet
    cached_tokens: int = -1


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What one step did. Request ids are `SimRequest.rid`s."""

    duration_s: float
    emitted: np.ndarray  # rids that sampled one token this step (int64)
    finished: list[int]
    admitted: list[int]  # rids scheduled for the first time ever
    preempted: list[int]
    num_scheduled_tokens: int
    num_scheduled_seqs: int
    start_s: float = 0.0  # model time the step began
    delivered_s: float = 0.0  # model time its tokens are out of the API server (>= its end)

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


class Scheduler:
    """Pure scheduler + cost model. Feed it with `add`, call `step` until `idle`."""

    def __init__(self, config: SchedulerConfig, roofline: Roofline) -> None:
        self.config = config
        self.roofline = roofline
        self.pool = BlockPool(config.num_blocks)
        self.waiting: deque[SimRequest] = deque()
        self.api: ApiServer[SimRequest] = ApiServer(roofline)  # (module docstring)
        self.clock_s = 0.0  # the model clock
        self.running: list[int] = []  # slots, in admission order
        self._running_arr: np.ndarray | None = None  # `running` as an array (None: out of date)
        self._rng = np.random.default_rng(config.seed)
        self._jitter: list[float] = []  # drawn ahead, used from the end (`_jittered`)
        n = config.max_num_seqs
        # Per slot, one row (`_step_few` reads a slot's whole state in one call); the fields
        # are views of its columns.
        self._state = np.zeros((n, STATE_FIELDS), np.int64)
        self._computed = self._state[:, COMPUTED]
        self._tokens = self._state[:, TOKENS]
        self._blocks = self._state[:, BLOCKS]
        self._target_total = self._state[:, TARGET]  # prompt + target output
        self._hashed_tokens = self._state[:, HASHED]  # tokens covered by prompt block hashes
        self._rid = self._state[:, RID]
        self._rid[:] = -1
        self._done = np.zeros(n, bool)  # static batching: finished, kept as padding
        self._req: list[SimRequest | None] = [None] * n
        self._free_slots = list(range(n - 1, -1, -1))
        # running slots whose computed tokens are still short of their hashed prompt blocks
        # (`_apply` promotes their full blocks to the prefix cache)
        self._filling: set[int] = set()
        self.requests: dict[int, SimRequest] = {}
        self.num_preemptions = 0
        self.steps = 0
        # vLLM's prefix-cache counters: tokens looked up and tokens found, at admission, for
        # requests never preempted (vllm/v1/core/kv_cache_manager.py record_prefix_cache_stats)
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    # ---- queries -------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running and not len(self.api)

    @property
    def num_intake(self) -> int:
        """Requests the API server has not admitted yet."""
        return len(self.api)

    @property
    def next_intake_s(self) -> float | None:
        """Model time the next request leaves the API server for the waiting queue."""
        return self.api.next_s

    @property
    def num_running(self) -> int:
        if not self.config.static:
            return len(self.running)
        return int(np.count_nonzero(~self._done[self.running])) if self.running else 0

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        return self.pool.used / self.pool.num_blocks

    def reset_prefix_cache(self) -> bool:
        """vLLM's POST /reset_prefix_cache: drop every cached block; False (nothing dropped)
        while a running request holds blocks, as vLLM refuses then."""
        return self.pool.reset()

    # ---- input ---------------------------------------------------------------------------

    def add(self, req: SimRequest, at_s: float | None = None) -> None:
        """A request arrives at model time `at_s` (default: the clock). It goes through the API
        server's intake, then joins the waiting queue (lengths already validated against the
        cache and max_model_len)."""
        self.requests[req.rid] = req
        req.state = "intake"
        self.api.take(req, req.prompt_tokens, self.clock_s if at_s is None else at_s)

    def _admit_intake(self) -> None:
        """Move requests that reached the scheduler by the clock to the waiting queue."""
        for req in self.api.arrived(self.clock_s):
            req.state = "waiting"
            self.waiting.append(req)

    def abort(self, rid: int) -> bool:
        """Drop a request (its client went away). True if it was still queued or running."""
        req = self.requests.pop(rid, None)
        if req is None or req.state in ("finished", "aborted"):
            return False
        if req.state == "intake":
            self.api.drop(req)
        elif req.state == "waiting":
            self.waiting.remove(req)
        else:
            slot = req.slot
            self.running.remove(slot)
            self._running_arr = None
            self._release(slot)
        req.state = "aborted"
        return True

    # ---- the step ------------------------------------------------------------------------

    def step(self, now_s: float | None = None) -> StepOutput:
        """Schedule and run one iteration starting at model time `now_s` (default: the end of
        the previous step, or the next intake completion when only intake is pending).
        Returns its duration, when its tokens are delivered, and what it produced."""
        if now_s is not None:
            self.clock_s = max(self.clock_s, now_s)
        elif not self.waiting and not self.running and len(self.api):
            self.clock_s = max(self.clock_s, self.next_intake_s or self.clock_s)
        if len(self.api):
            self._admit_intake()
        start_s = self.clock_s
        out = self._step(start_s)
        self.clock_s = start_s + out.duration_s
        return out

    def _step(self, start_s: float) -> StepOutput:
        if not self.config.static and len(self.running) <= FEW_SEQUENCES:
            return self._step_few(start_s)
        cfg = self.config
        preempted: list[int] = []
        self.steps += 1
        batch_was_empty = not self.running

        # 1. running requests, vectorised when the blocks suffice for all of them: the slots,
        # their tokens this step, their computed tokens before it and the tokens they ask for
        slots, counts, before, want, budget = self._schedule_running(
            cfg.max_num_batched_tokens, preempted
        )

        # 2. admission (a request admitted with no budget left is not scheduled this step).
        admitted: list[int] = []
        may_admit = not preempted and (not cfg.static or batch_was_empty)
        if may_admit and self.waiting and len(self.running) < cfg.max_num_seqs:
            new = self._admit(budget, admitted)
            budget = new[4]
            rows = [(s, n, c, t - c) for s, n, c, t in zip(*new[:4], strict=True) if n > 0]
            if rows:
                cols = np.array(rows, np.int64).T
                slots = np.concatenate([slots, cols[0]])
                counts = np.concatenate([counts, cols[1]])
                before = np.concatenate([before, cols[2]])
                want = np.concatenate([want, cols[3]])

        # 3. cost of the step (a request samples when its tokens are all computed).
        sampled = counts == want
        duration = self._cost(counts, before, sampled)

        # 4. apply: computed tokens, prefix-cache blocks, sampled tokens, finished requests.
        emitted, finished = self._apply(slots, counts, before, sampled)
        return self._stream(
            start_s,
            duration,
            emitted,
            finished,
            admitted,
            preempted,
            int(counts.sum()),
            int(slots.size),
        )

    def _schedule_running(
        self, budget: int, preempted: list[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """Step 1 in vectors: each running request asks for the rest of its tokens while
        budget is left; one by one (`_schedule_running_slow`) where the blocks run short.
        Returns the slots scheduled, their token counts, their computed tokens before the step,
        the tokens each asked for, and the budget left.

        A running request always asks for at least one token (its `computed` is below its
        `tokens`: a step that computes them all samples one more), so when the whole running
        set fits the budget each gets what it asks and none is dropped."""
        cfg = self.config
        run = self._running_arr
        if run is None:
            run = self._running_arr = np.array(self.running, np.int64)
        if cfg.static and run.size:
            run = run[~self._done[run]]
        computed = self._computed[run]
        want = self._tokens[run] - computed
        cum = np.cumsum(want)
        asked = int(cum[-1]) if run.size else 0
        fits = asked <= budget
        # np.minimum/np.maximum, not np.clip: the same integers, without clip's per-call cost
        sched = want if fits else np.minimum(np.maximum(budget - (cum - want), 0), want)
        need = np.maximum(-(-(computed + sched) // cfg.block_size) - self._blocks[run], 0)
        need_total = int(need.sum())
        if not need_total or need_total <= self.pool.allocatable:
            if need_total:
                self.pool.allocate(need_total)
                self._blocks[run] += need
            budget -= asked if fits else int(sched.sum())
        else:
            run, sched, budget = self._schedule_running_slow(budget, preempted)
            computed = self._computed[run]
            want = self._tokens[run] - computed
            fits = False
        if fits:
            return run, sched, computed, want, budget
        keep = sched > 0
        return run[keep], sched[keep], computed[keep], want[keep], budget

    def _cost(self, counts: np.ndarray, before: np.ndarray, sampled: np.ndarray) -> float:
        """Step 3: the step's modelled time over its work (a static batch's finished members
        still run a padded decode token each)."""
        n_tok = int(counts.sum())
        kv_read = int(before.sum())
        n_seqs, n_sampled = counts.size, int(np.count_nonzero(sampled))
        if n_tok == n_seqs:  # a decode step: every count is 1 (none is 0), each pair term b + 1
            pairs = float(kv_read + n_seqs)
        else:
            # sum of counts x before + counts (counts + 1) / 2, in one pass (counts (counts + 1)
            # is even)
            pairs = float((counts * (2 * before + counts + 1) // 2).sum())
        if self.config.static and self.running:
            pad = np.array(self.running, np.int64)
            pad = pad[self._done[pad]]
            if pad.size:
                ctx = self._computed[pad]
                n_tok += pad.size
                n_seqs += pad.size
                n_sampled += pad.size
                kv_read += int(ctx.sum())
                pairs += float((ctx + 1).sum())
        return self._jittered(self.roofline.step_time_s(n_tok, n_seqs, n_sampled, kv_read, pairs))

    def _apply(
        self, slots: np.ndarray, counts: np.ndarray, before: np.ndarray, sampled: np.ndarray
    ) -> tuple[np.ndarray, list[int]]:
        """Step 4: computed tokens, prefix-cache blocks, sampled tokens, finished requests.
        Returns the rids that sampled a token and those that finished."""
        after = before + counts
        self._computed[slots] = after
        if self._filling:  # only those can fill prefix-cache blocks
            filling = slots[before < self._hashed_tokens[slots]]
            for s in filling.tolist():
                self._promote_blocks(s)
        # a request that sampled had `after` tokens; it has one more now
        if sampled.all():
            out_slots, out_tokens = slots, after + 1
        else:
            out_slots, out_tokens = slots[sampled], after[sampled] + 1
        self._tokens[out_slots] = out_tokens
        emitted = self._rid[out_slots]
        done_mask = out_tokens >= self._target_total[out_slots]
        finished: list[int] = []
        for s in out_slots[done_mask].tolist():
            finished.append(int(self._rid[s]))
            self._finish(s)
        if self.config.static and self.running and bool(self._done[self.running].all()):
            for s in self.running:
                self._release(s)
            self.running.clear()
            self._running_arr = None
        return emitted, finished

    def _jittered(self, duration: float) -> float:
        """The step's time with its seeded jitter (one draw per step that did work)."""
        if self.config.jitter and duration > 0:
            if not self._jitter:  # the next JITTER_DRAWS of the stream, last one first
                self._jitter = self._rng.standard_normal(JITTER_DRAWS).tolist()[::-1]
            jit = self._jitter.pop() * JITTER_SIGMA
            duration *= 1.0 + min(max(jit, -JITTER_CLIP), JITTER_CLIP)
        return duration

    def _stream(
        self,
        start_s: float,
        duration: float,
        emitted: np.ndarray,
        finished: list[int],
        admitted: list[int],
        preempted: list[int],
        scheduled: int,
        n_seqs: int,
    ) -> StepOutput:
        """5. The API server streams the emitted tokens (module docstring)."""
        delivered = self.api.stream(emitted.size, start_s + duration)
        return StepOutput(
            duration_s=duration,
            emitted=emitted,
            finished=finished,
            admitted=admitted,
            preempted=preempted,
            num_scheduled_tokens=scheduled,
            num_scheduled_seqs=n_seqs,
            start_s=start_s,
            delivered_s=delivered,
        )

    def _step_few(self, start_s: float) -> StepOutput:
        """`_step` for a continuous batch of at most FEW_SEQUENCES running requests, one
        request at a time in Python ints: the same steps and the same arithmetic, without the
        fixed cost of some forty small numpy calls (most steps of a light load run a few
        requests). The slots' rows are read in one numpy call and written in one."""
        preempted: list[int] = []
        admitted: list[int] = []
        self.steps += 1
        slots, counts, rows = self._schedule_few(preempted, admitted)  # 1. and 2.

        # 3. cost of the step.
        kept: list[int] = []  # the slots scheduled, and their (computed, tokens) after it
        written: list[tuple[int, int]] = []
        filling: list[int] = []  # those still computing hashed prompt blocks
        out: list[tuple[int, int, int, int]] = []  # (slot, rid, tokens, target) of each sampler
        kv_read = scheduled = pairs = 0
        for s, n, row in zip(slots, counts, rows, strict=True):
            if n <= 0:
                continue
            c, t, _, target, hashed, rid = row  # COMPUTED, TOKENS, BLOCKS, TARGET, HASHED, RID
            kept.append(s)
            scheduled += n
            kv_read += c
            pairs += n * (2 * c + n + 1) // 2
            if c < hashed:
                filling.append(s)
            if c + n == t:
                out.append((s, rid, t + 1, target))
                written.append((c + n, t + 1))
            else:
                written.append((c + n, t))
        duration = self._jittered(
            self.roofline.step_time_s(scheduled, len(kept), len(out), kv_read, float(pairs))
        )

        # 4. apply: computed tokens, prefix-cache blocks, sampled tokens, finished requests.
        emitted, finished = self._apply_few(kept, written, filling, out)
        return self._stream(
            start_s, duration, emitted, finished, admitted, preempted, scheduled, len(kept)
        )

    def _schedule_few(
        self, preempted: list[int], admitted: list[int]
    ) -> tuple[list[int], list[int], list[list[int]]]:
        """Steps 1 and 2 in Python ints: the running requests, each asking for the rest of its
        tokens while budget is left, then admission. Returns the slots, the tokens each is
        scheduled, and each one's `_state` row before the step (its blocks before allocation)."""
        bs = self.config.block_size
        budget = self.config.max_num_batched_tokens
        blocks = self._blocks
        slots = list(self.running)
        rows: list[list[int]] = self._state[slots].tolist()
        counts: list[int] = []
        grow: list[tuple[int, int]] = []  # (slot, blocks it needs more)
        need_total = 0
        left = budget
        for s, row in zip(slots, rows, strict=True):
            c, t, b, _, _, _ = row  # COMPUTED, TOKENS, BLOCKS, TARGET, HASHED, RID
            want = t - c
            n = want if left >= want else max(left, 0)  # min(max(left, 0), want)
            left -= want
            counts.append(n)
            need = -(-(c + n) // bs) - b
            if need > 0:
                grow.append((s, need))
                need_total += need
        if not need_total or need_total <= self.pool.allocatable:
            if need_total:
                self.pool.allocate(need_total)
                for s, need in grow:
                    blocks[s] += need
            budget -= sum(counts)
        else:
            run, sched, budget = self._schedule_running_slow(budget, preempted)
            slots, counts = run.tolist(), sched.tolist()
            rows = self._state[slots].tolist()
        if not preempted and self.waiting and len(self.running) < self.config.max_num_seqs:
            new_slots, new_counts, _, _, budget = self._admit(budget, admitted)
            if new_slots:
                slots += new_slots
                counts += new_counts
                rows += self._state[new_slots].tolist()
        return slots, counts, rows

    def _apply_few(
        self,
        kept: list[int],
        written: list[tuple[int, int]],
        filling: list[int],
        out: list[tuple[int, int, int, int]],
    ) -> tuple[np.ndarray, list[int]]:
        """`_apply` in Python ints: `written` holds each kept slot's computed tokens and tokens
        after the step, `out` each sampler's (slot, rid, tokens, target total). Returns the rids
        that sampled a token and those that finished."""
        if kept:
            self._state[kept, COMPUTED : TOKENS + 1] = written
        for s in filling:
            self._promote_blocks(s)
        emitted = np.array([o[1] for o in out], np.int64)
        finished: list[int] = []
        for s, rid, total, goal in out:
            if total >= goal:
                finished.append(rid)
                self._finish(s)
        return emitted, finished

    # ---- helpers -------------------------------------------------------------------------

    def _schedule_running_slow(
        self, budget: int, preempted: list[int]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Running requests one by one, preempting from the tail when blocks run out."""
        bs = self.config.block_size
        out_slots: list[int] = []
        out_counts: list[int] = []
        gone: set[int] = set()
        running = list(self.running)
        # Their rows, read once: a request's row changes here only when it is preempted (then
        # it is gone and skipped) or after its own turn (its blocks).
        rows = self._state[running].tolist()
        done = self._done[running].tolist() if self.config.static else [False] * len(running)
        for s, row, finished in zip(running, rows, done, strict=True):
            if s in gone or finished:
                continue
            if budget <= 0:
                break
            c, t, b, _, _, _ = row  # COMPUTED, TOKENS, BLOCKS, TARGET, HASHED, RID
            n = min(t - c, budget)
            need = max(-(-(c + n) // bs) - b, 0)
            while need > self.pool.allocatable:
                victim = self._pick_victim()
                gone.add(victim)
                preempted.append(int(self._rid[victim]))
                self._preempt(victim)
                if victim == s:
                    break
            if s in gone:
                break  # it preempted itself: nothing after it is running any more
            if need:
                self.pool.allocate(need)
                self._blocks[s] += need
            out_slots.append(s)
            out_counts.append(n)
            budget -= n
        return np.array(out_slots, np.int64), np.array(out_counts, np.int64), budget

    def _pick_victim(self) -> int:
        for s in reversed(self.running):
            if not self._done[s]:
                return s
        raise AssertionError("no running request to preempt")  # pragma: no cover

    def _admit(
        self, budget: int, admitted: list[int]
    ) -> tuple[list[int], list[int], list[int], list[int], int]:
        """Admit waiting requests in order while they fit. Returns their slots, the tokens each
        is scheduled, each one's computed (cached) and total tokens, and the budget left."""
        cfg = self.config
        bs = cfg.block_size
        slots: list[int] = []
        counts: list[int] = []
        befores: list[int] = []
        totals: list[int] = []
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            if budget <= 0 and not cfg.static:
                break
            req = self.waiting[0]
            total = req.prompt_tokens + req.output
            hits = 0
            if cfg.prefix_caching and req.block_hashes:
                hits = self.pool.lookup(req.block_hashes, (total - 1) // bs)
            computed = hits * bs
            looked_up = cfg.prefix_caching and not req.preemptions
            n = total - computed
            if not cfg.chunked_prefill and n > budget and not cfg.static:
                break
            n = min(n, max(budget, 0))
            hit_hashes = req.block_hashes[:hits]
            new_blocks = -(-(computed + n) // bs) - hits
            if new_blocks > self.pool.allocatable - self.pool.evictable_among(hit_hashes):
                break
            self.pool.acquire(hit_hashes)
            self.pool.allocate(new_blocks)
            self.waiting.popleft()
            if looked_up:
                self.prefix_cache_queries += total
                self.prefix_cache_hits += computed
            s = self._free_slots.pop()
            req.slot, req.state, req.shared = s, "running", list(hit_hashes)
            if not req.ever_scheduled:
                req.ever_scheduled = True
                req.cached_tokens = computed
                admitted.append(req.rid)
            self._req[s] = req
            hashed = len(req.block_hashes) * bs if cfg.prefix_caching else 0
            target = req.prompt_tokens + req.target_output
            # the slot's row: COMPUTED, TOKENS, BLOCKS, TARGET, HASHED, RID
            self._state[s] = (computed, total, hits + new_blocks, target, hashed, req.rid)
            if computed < hashed:
                self._filling.add(s)
            self._done[s] = False
            self.running.append(s)
            self._running_arr = None
            slots.append(s)
            counts.append(n)
            befores.append(computed)
            totals.append(total)
            budget -= n
        return slots, counts, befores, totals, budget

    def _promote_blocks(self, s: int) -> None:
        req = self._req[s]
        assert req is not None
        bs = self.config.block_size
        computed = int(self._computed[s])
        hashes = req.block_hashes
        full = min(computed // bs, len(hashes))
        first = len(req.shared)
        for i in range(first, full):
            if not self.pool.promote(hashes[i]):
                break  # someone else cached it first; keep the rest private
            req.shared.append(hashes[i])
        if computed >= len(hashes) * bs:  # its hashed blocks are all computed
            self._filling.discard(s)

    def _sync_back(self, s: int) -> SimRequest:
        req = self._req[s]
        assert req is not None
        req.output = int(self._tokens[s]) - req.prompt_tokens
        return req

    def _release(self, s: int) -> None:
        """Free slot `s` and its blocks (the caller removes it from `running`)."""
        req = self._sync_back(s)
        self.pool.release(int(self._blocks[s]) - len(req.shared), req.shared)
        req.shared = []
        self._blocks[s] = 0
        self._rid[s] = -1
        self._req[s] = None
        self._done[s] = False
        self._filling.discard(s)
        self._free_slots.append(s)

    def _preempt(self, s: int) -> None:
        req = self._req[s]
        assert req is not None
        self.running.remove(s)
        self._running_arr = None
        self._release(s)
        req.state, req.slot = "waiting", -1
        req.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def _finish(self, s: int) -> None:
        req = self._sync_back(s)
        req.state = "finished"
        self.requests.pop(req.rid, None)
        if self.config.static:
            self._done[s] = True  # padding until the whole batch is done
            return
        self.running.remove(s)
        self._running_arr = None
        self._release(s)
