"""The steps of `harness.orchestrate.run.measure`, one function each, and what they hand on:
`Setup` (the run settled before anything starts), `Shape` (the request the target accepts, as
its probe found it), `Held` (what a run holds while it measures: the live-metrics endpoint, the
simulator, the journal; released whatever happened). Also a run's notes and warnings on stderr
(`stderr_say`, `warn_stderr`, `WarnOnce`)."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.analysis.result import build_result, dump_result
from harness.client.engine import EngineConfig
from harness.client.probe import probe_target
from harness.client.state import RunOutcome
from harness.client.workers import WorkerChoice
from harness.config.resolve import Resolution
from harness.config.target import Target
from harness.errors import RunAborted, UsageError
from harness.orchestrate.run_args import RunArgs
from harness.orchestrate.run_engine import run_loop
from harness.orchestrate.run_header import journal_header
from harness.orchestrate.servers import StartedServer, start_simulator
from harness.record.journal import JournalWriter, read_journal
from harness.safe_write import JournalClaim
from harness.termtext import terminal_safe
from harness.units import MAX_DURATION_S
from harness.workload.plan import Plan
from harness.workload.scenario import Scenario


def simulator_model(args: RunArgs, scn: Scenario) -> tuple[str, str]:
    """(model, where it comes from) of a run against the built-in simulator: `--model`, else
    the model the simulator serves (the scenario's `[sim] model`, or its default preset). The
    files' [inference] model and [model] name describe a real server, not the simulator."""
    if args.model:
        return args.model, "--model"
    from harness.sim.settings import SimSettings

    model = SimSettings.from_mapping(scn.sim, scn.path).model
    where = f"{scn.path} [sim] model" if "model" in scn.sim else "the built-in simulator's default"
    return model, where


def warn_stderr(message: str) -> None:
    """A warning on stderr; it may quote the server (a refused argument's evidence)."""
    print(f"warning: {terminal_safe(message)}", file=sys.stderr, flush=True)


class WarnOnce:
    """A warning printer that says each distinct warning once: a sweep or a capacity search runs
    the same scenario against the same target many times, and its warnings (a refused
    `ignore_eos`, a deprecated key) would otherwise repeat for every run."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self.seen:
            self.seen.add(message)
            warn_stderr(message)


def linger_seconds(value: float | None) -> float:
    """`--prometheus-linger` in seconds (None: DEFAULT_LINGER_S). Raises UsageError."""
    from harness.orchestrate.live_metrics import DEFAULT_LINGER_S

    if value is None:
        return DEFAULT_LINGER_S
    if not 0 <= value <= MAX_DURATION_S:  # NaN and inf too
        raise UsageError(
            f"--prometheus-linger: expected seconds >= 0 and at most {MAX_DURATION_S:g}, "
            f"got {value:g}"
        )
    return value


@dataclass
class Setup:
    """A run settled before anything starts: the scenario as resolved, its plan, its target
    (None: the simulator is started), where its result goes and how many worker processes."""

    scn: Scenario
    res: Resolution
    target: Target | None
    plan: Plan
    out: Path
    n_workers: int
    replacing: bool  # the result replaces a file (a regular one: check_writable refuses others)
    workers_chosen: str = ""  # how n_workers was chosen (the result's client.scale_out.chosen)


@dataclass
class Shape:
    """The request the target accepts, as its probe found it (the defaults without a probe)."""

    scn: Scenario
    target: Target
    continuous: bool = True
    max_tokens_key: str = "max_tokens"
    adaptations: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Held:
    """What a run holds while it measures; `measure` releases it whatever happened."""

    live_metrics: Any = None  # harness.orchestrate.live_metrics.LiveMetrics
    metrics_server: Any = None  # ... and its MetricsServer
    sim: StartedServer | None = None
    journal: JournalWriter | None = None

    def release(self, finished: bool, claim: JournalClaim, args: RunArgs) -> None:
        # the journal closed already, or a failure midway: what was measured is kept
        if self.journal is not None:
            self.journal.close()
        if not finished:
            claim.close()
        if self.sim is not None:
            self.sim.stop()
        if self.metrics_server is not None:  # the final counts stay up for a scraper to read
            self.metrics_server.linger(
                linger_seconds(args.prometheus_linger_s) if finished else 0.0
            )


def check_run_args(args: RunArgs) -> None:
    """The arguments checked before anything starts. Raises UsageError."""
    linger_seconds(args.prometheus_linger_s)
    if not 0 <= args.grace_s <= MAX_DURATION_S:  # NaN and inf too
        raise UsageError(
            f"--grace: expected seconds >= 0 and at most {MAX_DURATION_S:g}, got {args.grace_s:g}"
        )


def stderr_say(quiet: bool) -> Callable[..., None]:
    """A run's notes on stderr (nothing when quiet)."""

    def say(*parts: object) -> None:
        if not quiet:
            print(terminal_safe(" ".join(map(str, parts))), file=sys.stderr, flush=True)

    return say


def worker_count(
    args: RunArgs, res: Resolution, plan: Plan, simulator_here: bool = False
) -> WorkerChoice:
    """How many worker processes, and how chosen (harness.client.workers.WorkerChoice):
    `--workers`, else config.toml's, else one (`auto` for Ray); `auto` leaves a CPU to the
    built-in simulator when it runs on this machine (`simulator_here`)."""
    from harness.client.workers import choose_workers

    value: str | int | None = args.workers
    source = "--workers"
    if value is None and res.workers is not None:
        value, source = res.workers, "config.toml [client] workers ="
    elif value is None and args.ray is not None:
        value = "auto"
    try:
        return choose_workers(value, plan, source, reserved=1 if simulator_here else 0)
    except ValueError as exc:
        raise UsageError(f"--workers: {exc}") from None


def serve_live_metrics(args: RunArgs, setup: Setup, held: Held, say: Callable[..., None]) -> None:
    """`--prometheus-port`: the client's live metrics served from now on."""
    if args.prometheus_port is None:
        return
    from harness.orchestrate.live_metrics import LiveMetrics, MetricsServer

    held.live_metrics = LiveMetrics(run=setup.out.stem, scenario=setup.scn.name)
    held.metrics_server = MetricsServer(
        held.live_metrics, args.prometheus_port, args.prometheus_host
    )
    try:
        port = held.metrics_server.start()
    except OSError as exc:
        held.metrics_server = None
        raise UsageError(
            f"--prometheus-port {args.prometheus_port}: cannot serve on "
            f"{args.prometheus_host}: {exc.strerror or exc}"
        ) from None
    say(f"live metrics: http://{args.prometheus_host}:{port}/metrics")


def start_target(
    args: RunArgs,
    setup: Setup,
    server: StartedServer | None,
    held: Held,
    say: Callable[..., None],
) -> tuple[Target, dict[str, Any] | None]:
    """(the target, what the result keeps under target.server): the resolved one, else the
    simulator started now (held, so that it is stopped whatever happens)."""
    if setup.target is not None:
        return setup.target, server.info if server is not None else None
    scn = setup.scn
    log_path = setup.out.with_name(setup.out.stem + ".sim.log")
    held.sim = sim = start_simulator(scn.sim, scn.path, log_path)
    say(f"no target given: started {sim.description}; log: {log_path.absolute()}")
    target = Target(
        "simulator",
        sim.base_url,
        simulator_model(args, scn)[0],
        args.endpoint or scn.target.endpoint or "chat",
    )
    return target, sim.info


def probe_shape(args: RunArgs, scn: Scenario, target: Target, warn: Callable[[str], None]) -> Shape:
    """One first request (unless --no-probe): what the target accepts is what the run sends.
    Raises RunAborted when it fails, UsageError under --strict-request when it refused part."""
    if not args.probe:
        return Shape(scn, target)
    probe = run_loop(probe_target(target, scn.workload))
    if probe.adaptations and (args.strict_request or probe.error):
        refuse_adaptations(probe, args.strict_request, warn)
    if probe.error:
        raise RunAborted(
            f"the target {target.base_url} failed a first request: {probe.error}"
            + (f"; fix: {probe.fix}" if probe.fix else "")
        )
    shape = Shape(scn, target, probe.continuous_usage)
    if probe.shape is not None:
        shape.scn = dataclasses.replace(
            scn,
            workload=dataclasses.replace(
                scn.workload, ignore_eos=probe.shape.ignore_eos, extra_body=dict(probe.shape.extra)
            ),
        )
        shape.max_tokens_key = probe.shape.max_tokens_key
    for a in probe.adaptations:
        warn(a.line())
    shape.adaptations = [a.to_dict() for a in probe.adaptations]
    if probe.model and not target.model:
        shape.target = dataclasses.replace(target, model=probe.model)
    return shape


def http_client_for(args: RunArgs, target: Target) -> str:
    """`--http-client` chosen for the target's URL. Raises UsageError."""
    from harness.client.transport import choose_http_client

    try:
        return choose_http_client(args.http_client, target.base_url)
    except ValueError as exc:
        raise UsageError(f"--http-client: {exc}") from None


def run_header(
    args: RunArgs,
    setup: Setup,
    shape: Shape,
    plan: Plan,
    http_client: str,
    server_info: dict[str, Any] | None,
) -> dict[str, Any]:
    """The journal's header (`journal_header`) with this run's options and adaptations."""
    started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    options: dict[str, Any] = {
        "continuous_usage_stats": shape.continuous,
        "grace_s": args.grace_s,
        "http_client": http_client,
        "workers": setup.n_workers,
        "workers_chosen": setup.workers_chosen,  # harness.analysis.scale_out
        "ray": args.ray,
        "ignore_eos": shape.scn.workload.ignore_eos,
        "max_tokens_key": shape.max_tokens_key,
    }
    if args.prefix_cache_reset is not None:
        options["prefix_cache_reset"] = args.prefix_cache_reset
    header = journal_header(shape.scn, plan, shape.target, started, options, server_info)
    header["request_adaptations"] = shape.adaptations
    return header


def engine_config(args: RunArgs, shape: Shape, http_client: str) -> EngineConfig:
    scn = shape.scn
    return EngineConfig(
        shape.target,
        scn.workload,
        scn.retry,
        shape.continuous,
        args.grace_s,
        request_id_prefix=f"{scn.name}-{int(time.time())}",
        http_client=http_client,
        max_tokens_key=shape.max_tokens_key,
    )


def end_journal(
    journal: JournalWriter, sim: StartedServer | None, outcome: RunOutcome, cfg: EngineConfig
) -> None:
    """The simulator stopped (its own account of the run lands in the journal) and the journal's
    end line written. Raises RunAborted when the journal failed."""
    sim_info = None
    if sim is not None:
        from harness.server.launcher import sim_summary

        sim.stop()
        sim_info = sim_summary(sim.handle.log_path)
    journal.close(
        {
            "end_ns": outcome.end_ns,
            "complete": outcome.complete,
            "simulator": sim_info,
            "stop_reason": outcome.stop_reason,
            "phase_starts_ns": outcome.phase_starts_ns,
            "phase_ends_ns": outcome.phase_ends_ns,
            "cpu_s": outcome.cpu_s,
            "loop_lag_ns": outcome.loop_lag_ns,
            "t0_wall_s": outcome.t0_wall_s,
            "t0_ns": outcome.t0_ns,
            "request_id_prefix": cfg.request_id_prefix,
            "accounts": outcome.accounts,
        }
    )
    if journal.failed:
        raise RunAborted(journal.failed)


def write_result(jpath: Path, out: Path, claim: JournalClaim) -> dict[str, Any]:
    """The result built from the journal, as `report JOURNAL` would, and written to `out`."""
    try:  # still locked: no second run empties the journal before the result is built
        result = build_result(read_journal(jpath), str(jpath))
        dump_result(result, out)
    except OSError as exc:
        raise RunAborted(
            f"cannot write the result {out}: {exc.strerror or exc}; the journal keeps the "
            f"records: python -m harness report {jpath} --out RESULT.json"
        ) from None
    finally:
        claim.close()
    return result


def refuse_adaptations(probe: Any, strict: bool, warn: Callable[[str], None]) -> None:
    """`--strict-request` (or a probe that failed after dropping arguments): stop, naming what
    the target refused and what dropping it would cost."""
    what = "; ".join(f"{a.line()} (server: {a.evidence})" for a in probe.adaptations)
    if strict:
        raise UsageError(
            f"--strict-request: {what}; run without --strict-request to send the "
            "request without it, or change [workload] (ignore_eos = false, extra_body)"
        )
    warn(what)
