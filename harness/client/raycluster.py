"""Ray: the shards of a plan (`harness.client.shard`) as Ray actors, across machines.

`run --ray auto|ADDRESS` runs shard i of N (the same deterministic split as `--workers N`) in a
Ray actor (one CPU each). Records come back to the driver as encoded journal lines every
FLUSH_INTERVAL_S (harness.client.shard's; the driver collects them as often) and go into the
one journal, so the result and its HDR histograms are built from the union of the records
exactly as for one process. An actor numbers its batches and keeps each until the driver's next
`take` acknowledges it (`_Lines`): a reply lost on its way is sent again, never lost nor
written twice. No actor task is retried and no actor restarted (NO_RETRIES): a `run` run twice
would send its shard's requests twice.

`--ray auto` starts its own Ray unless RAY_ADDRESS or a `ray start` names a cluster
(`_join_or_start`): Ray's own "auto" joins any Ray running on the machine, whose end would end
this run without a word.

Clocks and skew: harness.client.ray_clock (the driver's wall clock is the start; each actor
measures its offset against it, NTP-style; a skew over the bound refuses the run).

Code: the actors run the driver's harness, shipped with the job as a Ray `runtime_env`
(harness.client.ray_ship: `py_modules`, plus pip for the dependencies a node lacks), so the
cluster's nodes need Ray and Python only; HARNESS_RAY_RUNTIME_ENV overrides it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness.client.engine import START_LEAD_NS, Engine, EngineConfig
from harness.client.ray_clock import (
    CLOCK_SAMPLES,
    ClockSample,
    best_offset,
    max_skew_ms,
    measure_clocks,
    skew_ms,
    worker_label,
)
from harness.client.shard import (
    FLUSH_INTERVAL_S,
    combined_counters,
    merge_outcomes,
    outcome_dict,
    run_shard,
)
from harness.client.state import (
    CallerStop,
    Control,
    Counters,
    Interrupts,
    RunOutcome,
)
from harness.errors import RunAborted, UsageError
from harness.workload.plan import Plan

STARTUP_LEAD_S = 1.0  # the start instant this far after the start calls: Ray calls to
# actors on other machines take milliseconds, scheduling more
READY_TIMEOUT_S = 300.0  # actors waiting for CPUs (or a node to join) longer than this fail


# --- actor side -------------------------------------------------------------------------------


class _Clock:
    """Lives on the driver's node: its time.time() is the driver's machine clock."""

    def now(self) -> float:
        return time.time()


class _ShardActor:
    """One shard. Threaded actor: `run` blocks in its own uvloop loop while `take` and `stop`
    are served from other threads."""

    def __init__(self, plan: Plan, cfg: EngineConfig) -> None:
        self.plan, self.cfg = plan, cfg
        self.batches: list[tuple[int, bytes]] = []  # (number, lines) not yet acknowledged
        self.shipped = 0  # batches numbered so far
        self.counters: dict[str, Any] = {}
        self.loop: Any = None
        self.control: Control | None = None
        self.pending_stop: tuple[str, bool] | None = None
        self.lock = threading.Lock()

    def measure(self, clock: Any) -> tuple[float, float]:
        import ray

        samples = []
        for _ in range(CLOCK_SAMPLES):
            t1 = time.time()
            d = ray.get(clock.now.remote())
            t2 = time.time()
            samples.append((t1, d, t2))
        s = best_offset(samples)
        return s.offset_s, s.rtt_s

    def host(self) -> str:
        import socket

        return socket.gethostname()

    def run(self, start_wall_s: float, offset_s: float) -> tuple[dict[str, Any], int]:
        """Run the shard from the driver's wall-clock instant start_wall_s (converted with this
        actor's measured offset to its own perf_counter_ns). Returns the outcome and how many
        batches of journal lines it shipped (the driver holds its acknowledgements to it)."""
        local_now_ns, local_wall = time.perf_counter_ns(), time.time()
        t0_ns = local_now_ns + round((start_wall_s - offset_s - local_wall) * 1e9)

        async def main() -> RunOutcome:
            import asyncio

            control = Control()
            with self.lock:
                self.loop, self.control = asyncio.get_running_loop(), control
                if self.pending_stop is not None:
                    control.hard = self.pending_stop[1]
                    control.stop(self.pending_stop[0])

            def ship(lines: bytes, counters: dict[str, Any]) -> None:
                with self.lock:
                    if lines:
                        self.shipped += 1
                        self.batches.append((self.shipped, lines))
                    self.counters = counters

            try:
                return await run_shard(
                    lambda sink, counters: Engine(
                        self.plan, self.cfg, sink, control, counters, events=sink.event
                    ).run(t0_ns=t0_ns, t0_wall_s=start_wall_s),
                    ship,
                )
            finally:
                with self.lock:
                    self.loop = None

        try:
            import uvloop

            outcome = uvloop.run(main())
        except ImportError:
            import asyncio

            outcome = asyncio.run(main())
        with self.lock:
            return outcome_dict(outcome), self.shipped

    def take(self, acked: int) -> tuple[list[tuple[int, bytes]], dict[str, Any]]:
        """The batches numbered above `acked` (those the driver has not written yet), oldest
        first, and the latest counters. A batch is dropped only once acknowledged: a reply
        lost on its way (the driver's get failed) is sent again by the next call."""
        with self.lock:
            self.batches = [b for b in self.batches if b[0] > acked]
            return list(self.batches), self.counters

    def stop(self, reason: str, hard: bool) -> None:
        with self.lock:
            if self.loop is None or self.control is None:
                self.pending_stop = (reason, hard)
                return
            control, loop = self.control, self.loop

        def do() -> None:
            control.hard = control.hard or hard
            control.stop(reason)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to stop
            loop.call_soon_threadsafe(do)


# --- driver side ------------------------------------------------------------------------------


def connect(address: str) -> Any:
    """ray.init for `--ray auto|ADDRESS`; reuses an initialised Ray (tests: ray.init(num_cpus=2)).
    `auto`: join the cluster this machine belongs to (RAY_ADDRESS or a local `ray start`), else
    start a local Ray instance."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray: Ray is not installed; pip install 'harness[ray]'") from None
    if ray.is_initialized():
        return ray
    if address == "auto":
        _join_or_start(ray)
    else:
        from harness.client.ray_ship import job_code_env

        code = job_code_env() if address.startswith("ray://") else None  # see ray_ship.uploaded
        try:
            ray.init(
                address=address,
                logging_level=logging.ERROR,
                log_to_driver=False,
                runtime_env=code,
            )
        except (ConnectionError, ValueError, RuntimeError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(
                f"--ray {address}: cannot join the Ray cluster: {msg}; "
                "expected auto, HOST:6379 or ray://HOST:10001"
            ) from None
    return ray


def _join_or_start(ray: Any) -> None:
    """`--ray auto`: RAY_ADDRESS, else the cluster a `ray start` on this machine recorded, else
    a new local Ray instance. Not Ray's own `address="auto"`: where neither is set it joins any
    Ray it finds running on the machine, such as another process's private `ray.init()`, and
    when that process ends, this run's actors and objects go with it and Ray ends this process
    with exit status 1 and no word of why (a CI run met it: a test's local Ray beside this one).
    """
    quiet: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    try:  # address None: RAY_ADDRESS, else `ray start`'s recorded address, else a new instance
        ray.init(include_dashboard=False, **quiet)
    except ConnectionError:  # a `ray start` cluster that is gone (its address file outlived it)
        ray.init(address="local", include_dashboard=False, **quiet)


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


@dataclass
class _Actors:
    """The run's shard actors, the clock actor on the driver's node, and each shard's host."""

    ray: Any
    shards: list[Any]
    clock: Any
    hosts: list[str]

    def measure(self) -> list[ClockSample]:
        refs = [a.measure.remote(self.clock) for a in self.shards]
        return [ClockSample(*x) for x in self.ray.get(refs)]

    def stop(self, reason: str, hard: bool) -> None:
        for a in self.shards:
            a.stop.remote(reason, hard)

    def kill(self) -> None:
        for a in [*self.shards, self.clock]:
            with contextlib.suppress(Exception):
                self.ray.kill(a)


# No task of an actor is ever run again, nor the actor restarted: a second `run` would send its
# shard's requests twice, and a lost `take` reply is asked for again by acknowledgement (_Lines).
NO_RETRIES: dict[str, Any] = {"max_restarts": 0, "max_task_retries": 0}


def _start_actors(ray: Any, plan: Plan, cfg: EngineConfig, n: int, quiet: bool) -> _Actors:
    """n shard actors (one CPU each) and the clock, started and answering; each says its host.
    Raises UsageError (one line) when they cannot start: runtime_env, import, no CPUs."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from harness.client.ray_ship import ENV_VAR, describe, runtime_env

    env = runtime_env(ray)  # the harness shipped with the job: no install on the nodes
    if not quiet:
        print(describe(env), file=sys.stderr, flush=True)
    shipped: dict[str, Any] = {"runtime_env": env} if env else {}
    driver_node = ray.get_runtime_context().get_node_id()
    Clock = ray.remote(num_cpus=0, **NO_RETRIES)(_Clock)  # noqa: N806 - Ray's wrapping idiom
    Shard = ray.remote(num_cpus=1, max_concurrency=4, **NO_RETRIES)(_ShardActor)  # noqa: N806
    clock = Clock.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(driver_node, soft=False), **shipped
    ).remote()
    plan_ref = ray.put(plan)
    shards = [
        Shard.options(name=None, **shipped).remote(plan_ref, replace(cfg, shard=(i, n)))
        for i in range(n)
    ]
    actors = _Actors(ray, shards, clock, [])
    try:
        actors.hosts = ray.get([a.host.remote() for a in shards], timeout=READY_TIMEOUT_S)
    except ray.exceptions.RuntimeEnvSetupError as exc:
        actors.kill()
        raise UsageError(
            f"--ray: the nodes could not set up the job's runtime_env ({_last_line(exc)}); "
            f"{ENV_VAR}=none where the harness is installed on every node"
        ) from None
    except ray.exceptions.RayActorError as exc:
        actors.kill()
        raise UsageError(
            f"--ray: the workers did not start ({_last_line(exc)}); with {ENV_VAR} set, check "
            "that it ships the harness or that every node has it installed"
        ) from None
    except ray.exceptions.GetTimeoutError:
        actors.kill()
        raise UsageError(
            f"--ray: {n} workers did not start within {READY_TIMEOUT_S:g}s: the cluster "
            f"has {ray.cluster_resources().get('CPU', 0):g} CPUs; use --workers N"
        ) from None
    return actors


COLLECT_TRIES = 5  # after the runs end, takes of a shard's last batches before giving up


class _Lines:
    """Every shard's journal lines, written once each and in order: a shard numbers its batches
    and keeps each until the driver acknowledges it (the next `take` says the last number
    written), so a reply lost on its way (the get raised) is sent again by the next take."""

    def __init__(self, actors: _Actors, write_lines: Callable[[bytes], None]) -> None:
        self.actors, self.write_lines = actors, write_lines
        n = len(actors.shards)
        self.acked = [0] * n
        self.counters: list[dict[str, Any]] = [{} for _ in range(n)]
        self.missed: list[str | None] = [None] * n  # why a shard's last take failed

    def collect(self) -> None:
        ray = self.actors.ray
        refs = [a.take.remote(self.acked[i]) for i, a in enumerate(self.actors.shards)]
        for i, ref in enumerate(refs):
            try:
                batches, counters = ray.get(ref)
            except ray.exceptions.RayError as exc:  # asked for again, acknowledged as before
                self.missed[i] = _last_line(exc)
                continue
            self.missed[i] = None
            for number, data in batches:
                if number > self.acked[i]:
                    self.write_lines(data)
                    self.acked[i] = number
            self.counters[i] = counters or self.counters[i]

    def finish(self, shipped: list[int | None]) -> None:
        """After the runs: take until every shard's `shipped` batches are written (None: a shard
        that failed, whose failure the run reports). Raises RunAborted when they cannot be."""
        for _ in range(COLLECT_TRIES):
            behind = [i for i, s in enumerate(shipped) if s is not None and self.acked[i] < s]
            if not behind:
                return
            self.collect()
        behind = [i for i, s in enumerate(shipped) if s is not None and self.acked[i] < s]
        if behind:
            i = behind[0]
            raise RunAborted(
                f"{worker_label(i)}: {(shipped[i] or 0) - self.acked[i]} batches of its records "
                f"could not be collected in {COLLECT_TRIES} tries ({self.missed[i]})"
            )


def run_ray(
    plan: Plan,
    cfg: EngineConfig,
    n: int,
    address: str,
    write_lines: Callable[[bytes], None],
    write_event: Callable[[dict[str, Any]], None],
    flush: Callable[[], None],
    quiet: bool,
    progress: Callable[[Counters, float], None] | None = None,
    stop: threading.Event | None = None,
) -> RunOutcome:
    """Run the plan as n Ray actors; journal lines go to write_lines as they come, the clock
    measurements to write_event as one `{"t": "clock", ...}` line. `stop`: as `run_workers`'.
    Raises UsageError before the start (no cluster, workers that cannot start, clock skew) and
    RunAborted when a worker fails or its records cannot be collected."""
    ray = connect(address)
    bound = max_skew_ms()
    actors = _start_actors(ray, plan, cfg, n, quiet)
    interrupts = Interrupts(cfg.grace_s, quiet)
    in_main = threading.current_thread() is threading.main_thread()
    in_main = in_main and not CallerStop(stop).holds_signals  # a long command holds them

    def on_signal(signum: int, _frame: Any) -> None:
        actors.stop(*interrupts.on(signum))

    old = (
        {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    )
    try:
        start = measure_clocks(actors.measure, bound)
        start_wall_s = time.time() + STARTUP_LEAD_S + START_LEAD_NS / 1e9
        t0_ns = time.perf_counter_ns() + round((start_wall_s - time.time()) * 1e9)
        runs = {
            a.run.remote(start_wall_s, s.offset_s): i
            for i, (a, s) in enumerate(zip(actors.shards, start, strict=True))
        }
        lines = _Lines(actors, write_lines)
        ended, error = _follow(actors, runs, lines, flush, progress, CallerStop(stop))
        if error is None:
            lines.finish([e[1] if e is not None else None for e in ended])
        end: list[ClockSample] | None = None
        with contextlib.suppress(ray.exceptions.RayError):  # a failed worker cannot answer
            end = actors.measure()
        write_event(_clock_event(address, bound, actors.hosts, start, end))
        flush()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        actors.kill()
    if error:
        raise RunAborted(f"a Ray worker failed: {error}")
    return merge_outcomes([e[0] for e in ended if e is not None], t0_ns, start_wall_s)


def _follow(
    actors: _Actors,
    runs: dict[Any, int],
    lines: _Lines,
    flush: Callable[[], None],
    progress: Callable[[Counters, float], None] | None,
    caller: CallerStop,
) -> tuple[list[tuple[dict[str, Any], int] | None], str | None]:
    """Collect lines and show progress until every run has returned: each shard's (outcome,
    batches shipped), None for a shard that failed, and the first failure (the others are
    stopped at once when one fails)."""
    ray = actors.ray
    ended: list[tuple[dict[str, Any], int] | None] = [None] * len(actors.shards)
    error: str | None = None
    pending = list(runs)
    t_start = last_progress = time.monotonic()
    while pending:
        if caller.due():
            actors.stop(*caller.what())
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=FLUSH_INTERVAL_S)
        for ref in done:
            try:
                ended[runs[ref]] = ray.get(ref)
            except ray.exceptions.RayError as exc:
                error = error or f"{worker_label(runs[ref])}: {_last_line(exc)}"
                actors.stop(f"{worker_label(runs[ref])} failed", True)
        lines.collect()
        flush()
        now = time.monotonic()
        if progress is not None and now - last_progress >= 1.0:
            progress(combined_counters(lines.counters), now - t_start)
            last_progress = now
    lines.collect()
    if progress is not None:  # the final counts, so the last line drawn says where it ended
        progress(combined_counters(lines.counters), time.monotonic() - t_start)
    return ended, error


def _clock_event(
    address: str,
    bound: float,
    hosts: list[str],
    start: list[ClockSample],
    end: list[ClockSample] | None,
) -> dict[str, Any]:
    """The journal's `{"t": "clock", ...}` line: each actor's offsets, round trips and drift
    (the end's figures left out where a failed worker could not be measured again)."""
    workers: list[dict[str, Any]] = [
        {
            "name": worker_label(i),
            "host": hosts[i],
            "offset_start_ms": s.offset_s * 1e3,
            "rtt_start_ms": s.rtt_s * 1e3,
        }
        for i, s in enumerate(start)
    ]
    for w, s, e in zip(workers, start, end or [], strict=False):
        w.update(
            offset_end_ms=e.offset_s * 1e3,
            rtt_end_ms=e.rtt_s * 1e3,
            drift_ms=(e.offset_s - s.offset_s) * 1e3,
        )
    event = {
        "t": "clock",
        "kind": "ray",
        "address": address,
        "max_skew_ms": bound,
        "skew_start_ms": skew_ms(start),
    }
    return {**event, **({"skew_end_ms": skew_ms(end)} if end else {}), "workers": workers}
