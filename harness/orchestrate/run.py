"""`run`: scenario -> plan -> (simulator) -> engine -> journal -> result -> report.

Orchestration only: each step is a call into the module that owns it. The result is always
built by reading the journal back, exactly as `report JOURNAL` would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness
from harness.analysis.accounting import account_sentence
from harness.analysis.numbers import plural
from harness.analysis.report_text import render_text
from harness.analysis.result import build_result, dump_result
from harness.analysis.slo_verdict import slo_exit_status
from harness.client.engine import Engine, EngineConfig
from harness.client.probe import probe_target
from harness.client.state import CALLER_STOP_REASON, Control, Counters, Interrupts, RunOutcome
from harness.client.transport import raise_open_file_limit
from harness.config.resolve import CliValues, Resolution, Sources, load_sources, resolve
from harness.config.target import Target
from harness.errors import HarnessError, RunAborted, UsageError
from harness.orchestrate.lengths import settle_prompt_lengths
from harness.orchestrate.outputs import check_output_file
from harness.orchestrate.progress import Goal, LiveFeed, ProgressView
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.servers import StartedServer, start_simulator
from harness.record.journal import JournalWriter, journal_path_for, read_journal
from harness.record.records import Record
from harness.safe_write import claim_journal, write_file
from harness.termtext import terminal_safe
from harness.units import MAX_DURATION_S
from harness.workload.plan import Plan, build_plan
from harness.workload.scenario import Scenario, check_endpoint_workload

RESULTS_DIR = Path("results")
MIN_FREE_BYTES = 64 * 1024 * 1024  # refuse to start a run that could not journal its records
STOP_POLL_S = 0.1  # a caller's stop is seen within this (the API's Ctrl-C, cancel)


@dataclass
class RunArgs:
    scenario: str | dict[str, Any]  # a scenario file, or a document in memory (a quick run's)
    target: str | None = None
    model: str | None = None
    endpoint: str | None = None
    out: str | None = None
    sets: list[str] = field(default_factory=list)
    seed: int | None = None
    # a command's own change to the scenario document after `sets` (a capacity probe's rate and
    # length: harness.orchestrate.virtual_capacity.ProbeForm); its errors never name --set
    adapt: Callable[[dict[str, Any]], None] | None = None
    quiet: bool = False
    grace_s: float = 10.0
    probe: bool = True
    settings: str | None = None  # settings.json (default ./settings.json when present)
    config: str | None = None  # config.toml (default ./config.toml when present)
    insecure: bool = False  # skip TLS certificate verification
    api_key_env: str | None = None  # the environment variable holding the key
    explain: bool = False  # print where each target value comes from, then stop
    http_client: str = "auto"  # fast | aiohttp | auto (fast for http://, aiohttp for https://)
    workers: str | None = None  # worker processes: N or "auto" (None: one process)
    ray: str | None = None  # run the shards as Ray tasks: "auto" or a cluster address
    html: str | None = None  # also write the HTML report here
    result_dir: str | None = None  # the results folder (None: config.toml [output] dir, results/)
    save_result: bool = False  # also write vllm bench serve's result JSON beside the result
    save_detailed: bool = False  # ... with its per-request lists
    result_filename: str | None = None  # ... under this name (default: vLLM's)
    brief: bool = False  # print the compact block (report_brief) instead of the full report
    percentile_metrics: tuple[str, ...] | None = None  # vLLM's names; None: its default
    metric_percentiles: tuple[float, ...] | None = None  # None: vLLM's default (99)
    strict_request: bool = False  # refuse to run when the target refuses part of the request shape
    prometheus_port: int | None = (
        None  # serve the client's live metrics on this port (0: any free one)
    )
    prometheus_host: str = "127.0.0.1"  # ... on this address
    prometheus_linger_s: float | None = None  # ... and keep it up this long after (None: default)
    # sweep / capacity --reset-prefix-cache: how the reset before this run went
    # (harness.orchestrate.prefix_reset.OUTCOMES); the result's options.prefix_cache_reset
    prefix_cache_reset: str | None = None
    slo_exit: bool = False  # exit SLO_FAIL_EXIT on a missed SLO (run's default; not a sweep's)


def resolve_run(args: RunArgs, scn: Scenario, src: Sources | None = None) -> Resolution:
    """`run`'s resolution (config.resolve merges; the run knows its arguments): the command line, the scenario's [target] and [workload], the files."""
    src = (
        src
        if src is not None
        else load_sources(getattr(args, "settings", None), getattr(args, "config", None))
    )
    cli = CliValues(
        args.target,
        args.model,
        args.endpoint,
        bool(getattr(args, "insecure", False)),
        getattr(args, "api_key_env", None),
    )
    res = resolve(cli, scn.target, scn.path, src, scn.workload)
    if res.retry is not None and (scn.retry.on or "retry" in scn.resolved):
        res.retry = None  # the scenario's [retry] wins
    return res


def resolve_target(args: RunArgs, scn: Scenario) -> Target | None:
    """Command line over the scenario's [target] over the files; None means: start the simulator."""
    return resolve_run(args, scn).target


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


def default_out_path(name: str, now: datetime | None = None, folder: Path = RESULTS_DIR) -> Path:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return folder / f"{name}-{stamp}.json"


def out_path(args: RunArgs, res: Resolution, name: str) -> tuple[Path, str]:
    """(where the result goes, the flag or key that decided it): `--out FILE`, else
    `<folder>/<name>-<UTC time>.json` in `--result-dir`, config.toml's `[output] dir` or
    results/ (relative folders: to the working directory)."""
    result_dir = getattr(args, "result_dir", None)
    if args.out:
        if result_dir:
            raise UsageError(
                f"--out {args.out} names the result file and --result-dir {result_dir} its "
                "folder: give one (--out DIR/NAME.json, or --result-dir DIR)"
            )
        return Path(args.out), "--out"
    if result_dir:
        folder, why = result_dir, "--result-dir"
    elif res.output_dir:
        folder, why = res.output_dir, "config.toml [output] dir"
    else:
        folder, why = str(RESULTS_DIR), "--out"
    return default_out_path(name, folder=Path(os.path.expanduser(folder))), why


def check_writable(out: Path, flag: str = "--out") -> None:
    """Fail before the run if the results folder cannot take the result and the journal."""
    folder = out.parent if str(out.parent) else Path(".")
    check_output_file(flag, out)
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise UsageError(
            f"{flag} {out}: only {free // (1024 * 1024)} MiB free in {folder}; "
            f"a run needs at least {MIN_FREE_BYTES // (1024 * 1024)} MiB for its journal"
        )


def environment() -> dict[str, Any]:
    import aiohttp
    import numpy

    try:
        import uvloop

        uv = uvloop.__version__
    except ImportError:
        uv = None
    return {
        "harness_version": harness.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "aiohttp": aiohttp.__version__,
        "uvloop": uv,
        "numpy": numpy.__version__,
    }


def journal_header(
    scn: Scenario,
    plan: Plan,
    target: Target,
    started_at: str,
    options: dict[str, Any],
    server: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The journal's header line: what the result is built from besides the records (the
    scenario, the target, the planned phases and SLOs). `predict` writes the same header."""
    phases = []
    for ph, pp in zip(scn.phases, plan.phases, strict=True):
        phases.append(
            {
                "name": ph.name,
                "warmup": ph.warmup,
                "closed": pp.closed,
                "max_concurrency": ph.max_concurrency,
                "arrival": str(ph.arrival),
                "planned_duration_s": pp.duration_s,
                "planned_requests": None if (pp.closed and pp.requests is None) else pp.count,
                **(
                    {
                        "planned_sessions": None
                        if (pp.closed and pp.requests is None)
                        else pp.sessions.count
                    }
                    if pp.sessions is not None
                    else {}
                ),
            }
        )
    slo = [
        {"name": s.name, "metric": s.metric, "stat": s.stat, "limit_s": s.limit_s} for s in scn.slo
    ]
    resolved = dict(scn.resolved)
    resolved["seed"] = scn.seed
    described = target.describe()
    if server is not None:  # what was started, so a result says which settings it measured
        described["server"] = server
    return {
        "scenario": resolved,
        "scenario_name": scn.name,
        "target": described,
        "environment": environment(),
        "started_at": started_at,
        "phases": phases,
        "slo": slo,
        "plan": {
            "digest": plan.digest(),
            "requests_planned": plan.total_requests,
            "seed": plan.seed,
            "workload": plan.workload,
        },
        "options": options,
    }


async def _watch_stop(
    stop: threading.Event, control: Control, stop_now: Callable[[], None]
) -> None:
    """A caller's stop (the Python API: Ctrl-C in a notebook, a cancelled `arun`), as a first
    Ctrl-C would be: sending stops, requests in flight get the grace period. A long command's
    stop (`harness.orchestrate.stopping.CommandStop`, `hard`) stops at once, with its reason."""
    while not stop.is_set():
        await asyncio.sleep(STOP_POLL_S)
    if getattr(stop, "hard", False):
        control.hard = True
        control.stop(str(getattr(stop, "reason", "") or CALLER_STOP_REASON))
        stop_now()
    else:
        control.stop(CALLER_STOP_REASON)


async def _execute(
    plan: Plan,
    cfg: EngineConfig,
    journal: JournalWriter,
    quiet: bool,
    scraper: Any = None,
    monitor: Any = None,
    feed: LiveFeed | None = None,
    stop: threading.Event | None = None,
) -> RunOutcome:
    control = Control()
    counters = Counters()
    feed = feed or LiveFeed(ProgressView(Goal.of(plan), quiet))
    loop = asyncio.get_running_loop()
    interrupts = Interrupts(cfg.grace_s, quiet)

    def cancel_in_flight() -> None:
        for t in list(engine._tasks):
            t.cancel()

    def on_signal(signum: int) -> None:
        reason, hard = interrupts.on(signum)
        if hard:
            control.hard = True
        control.stop(reason)
        if hard:
            cancel_in_flight()

    # Ctrl-C and SIGTERM stop the run gracefully -- where this is the main thread; a run started
    # from a worker thread (the Python API inside a notebook's loop) is stopped by its caller, and
    # so is a long command's run (capacity's probes, a sweep's points: they hold the signals).
    in_main = threading.current_thread() is threading.main_thread() and stop is None
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
    sink: Callable[[Record], None] = journal.write_record
    if monitor is not None or feed.metrics is not None:

        def observed(rec: Record) -> None:
            journal.write_record(rec)
            feed.observe(rec)
            if monitor is not None:
                monitor.observe(rec)

        sink = observed

    engine = Engine(plan, cfg, sink, control, counters)

    def on_journal_failure(msg: str) -> None:
        control.hard = True
        control.stop(msg)

    flusher = asyncio.create_task(journal.run_flusher(on_journal_failure))
    prog = asyncio.create_task(feed.run(counters))
    side = [flusher, prog] + ([asyncio.create_task(scraper.run())] if scraper is not None else [])
    if stop is not None:
        side.append(asyncio.create_task(_watch_stop(stop, control, cancel_in_flight)))
    if monitor is not None:
        latest = scraper.latest_values if scraper is not None else (lambda: (None, 0.0))
        interval_s = scraper.interval_s if scraper is not None else 1.0
        side.append(asyncio.create_task(monitor.watch(counters, control, latest, interval_s)))
    try:
        if scraper is not None:  # the server's histograms are read from this first poll on
            await scraper.wait_ready()
        outcome = await engine.run()
    finally:
        for t in side:
            t.cancel()
        await asyncio.gather(*side, return_exceptions=True)
        feed.close()
        if in_main:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
    return outcome


def _run_loop(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


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


def run_command(
    args: RunArgs,
    *,
    server: StartedServer | None = None,
    monitor: Any = None,
    warn: Callable[[str], None] = warn_stderr,
    stop: threading.Event | None = None,
) -> int:
    """`run`: returns the exit status (0, or 1 when the run was incomplete or every request failed).

    `server`: a server the caller started and stops (a sweep's or capacity's), which the result
    records (its kind, and under target.server what was started); `args.target` is its URL.
    `monitor`: capacity's live watch, `.observe(record)` and async `.watch(counters, control,
    server_values)` beside the engine (harness.orchestrate.probe_monitor).
    `stop`: a long command's stop (harness.orchestrate.stopping), as for `measure`.
    It measures (`measure`), then prints the report and writes the HTML."""
    measured = measure(args, server=server, monitor=monitor, warn=warn, stop=stop)
    if measured is None:  # --explain: printed, nothing run
        return 0
    result, out = measured
    if not args.quiet:
        if args.brief:
            from harness.analysis.report_brief import render_brief

            text = render_brief(result, args.percentile_metrics, args.metric_percentiles)
        else:
            text = render_text(result)
        print(terminal_safe(text))
    if args.save_result:
        print(f"vllm bench serve result: {write_vllm_result(args, result, out).absolute()}")
    if args.html is not None:  # "" means: next to the result, r.json -> r.html
        print(f"HTML report: {write_result_html(result, out, args.html).absolute()}")
    failed_all = every_request_failed(result)
    if failed_all:
        print(f"error: {terminal_safe(failed_all)}", file=sys.stderr, flush=True)
    if not result["complete"]:  # exit 1 always says why, on stderr (the report may be quiet)
        why = result.get("stop_reason") or account_sentence(result.get("accounting") or {})
        print(
            f"error: the result is incomplete: {terminal_safe(str(why or 'unknown'))}",
            file=sys.stderr,
            flush=True,
        )
    print(
        out.absolute(), flush=True
    )  # the last line printed is always the result's path (absolute)
    from harness.orchestrate.live_metrics import wait_lingering

    wait_lingering(None if args.quiet else warn_stderr)
    status = 0 if result["complete"] and not failed_all else 1
    return slo_exit_status(status, result, args.slo_exit, None if args.quiet else warn_stderr)


def vllm_result_path(args: RunArgs, out: Path, doc: dict[str, Any]) -> Path:
    """Where `--save-result` writes: beside the result, as `--result-filename` or vLLM's
    default name."""
    from harness.config.vllm_flags import result_filename

    return out.parent / (args.result_filename or result_filename(doc))


def write_vllm_result(args: RunArgs, result: dict[str, Any], out: Path) -> Path:
    """`--save-result`: the run as vllm bench serve's JSON (harness.analysis.export), with
    `--percentile-metrics` / `--metric-percentiles` (vLLM's defaults when not given)."""
    import json

    from harness.analysis.export import vllm_result
    from harness.config.vllm_flags import VLLM_DEFAULT_METRICS, VLLM_DEFAULT_PERCENTILES

    doc = vllm_result(
        read_journal(journal_path_for(out)),
        result,
        args.percentile_metrics or VLLM_DEFAULT_METRICS,
        args.metric_percentiles or VLLM_DEFAULT_PERCENTILES,
        detailed=args.save_detailed,
    )
    dest = vllm_result_path(args, out, doc)
    try:
        write_file(dest, json.dumps(doc, indent=2) + "\n")  # harness.safe_write
    except OSError as exc:
        raise RunAborted(
            f"cannot write --save-result {dest}: {exc.strerror or exc}; the run's result is "
            f"{out.absolute()} (python -m harness export {out} --format vllm --out FILE)"
        ) from None
    return dest


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


def write_result_html(result: dict[str, Any], out: Path, html: str) -> Path:
    """The HTML report of a result at `html` ("": next to the result, r.json -> r.html)."""
    from harness.analysis.html import render_result_html, write_html

    dest = html_path(out, html)
    write_html(dest, render_result_html(result, out))
    return dest


def html_path(out: Path, html: str) -> Path:
    """Where `--html` writes: the path given, or ("") next to the result, r.json -> r.html."""
    return Path(html) if html else out.with_suffix(".html")


def measure(
    args: RunArgs,
    *,
    server: StartedServer | None = None,
    monitor: Any = None,
    stop: threading.Event | None = None,
    warn: Callable[[str], None] = warn_stderr,
) -> tuple[dict[str, Any], Path] | None:
    """The run itself: scenario -> plan -> (simulator) -> engine -> journal -> result, written
    to its path. Prints nothing on stdout (progress and notes go to stderr unless quiet), so the
    Python API (harness.api) calls it too. None for --explain (the explanation is printed).
    `server`, `monitor`: as for `run_command`. `stop`: set from another thread, it stops the
    run (one process, workers or Ray) as a first Ctrl-C does (the Python API's interrupt and cancel). `warn`
    prints a warning (`WarnOnce` for a sweep's or capacity's repeated runs)."""
    linger_seconds(args.prometheus_linger_s)  # checked before anything starts
    if not 0 <= args.grace_s <= MAX_DURATION_S:  # NaN and inf too
        raise UsageError(
            f"--grace: expected seconds >= 0 and at most {MAX_DURATION_S:g}, got {args.grace_s:g}"
        )
    scn = load_scenario(args.scenario, args.sets, args.seed, args.adapt)
    res = resolve_run(args, scn)
    if res.target is None and server is None:  # the simulator decides the model: say so
        sim_model, sim_src = simulator_model(args, scn)
        res.explain = [
            (n, sim_model, sim_src) if n == "model" else (n, v, src) for n, v, src in res.explain
        ]
    if args.explain:
        print(terminal_safe(res.explain_text()))
        return None
    for w in res.warnings:
        warn(w)
    target = res.target
    scn = dataclasses.replace(
        scn, workload=res.workload or scn.workload, retry=res.retry or scn.retry
    )
    if target is not None and server is not None:
        target = dataclasses.replace(target, kind=server.target_kind)
    check_endpoint_workload(
        scn,
        target.endpoint if target is not None else args.endpoint or scn.target.endpoint or "chat",
    )
    out, out_flag = out_path(args, res, scn.name)
    check_writable(out, out_flag)
    replacing = out.exists()  # a regular file (check_writable refuses anything else)
    if args.html is not None:  # written after the run: checked now
        check_output_file("--html", html_path(out, args.html))
    plan = build_plan(scn)
    from harness.client.workers import parse_workers

    try:
        n_workers = parse_workers(
            args.workers
            if args.workers is not None
            else res.workers
            if res.workers is not None
            else (None if args.ray is None else "auto"),
            plan,
        )
    except ValueError as exc:
        raise UsageError(f"--workers: {exc}") from None
    raise_open_file_limit()
    live_metrics = metrics_server = None
    finished = False  # the run reached its end (an endpoint lingers only then)
    sim: StartedServer | None = None
    journal: JournalWriter | None = None
    server_info = server.info if server is not None else None

    def say(*parts: object) -> None:
        if not args.quiet:
            print(terminal_safe(" ".join(map(str, parts))), file=sys.stderr, flush=True)

    for note in plan.notes:  # where times and prompts come from (trace format, dataset, reuse)
        say(note)
    # locked before anything is sent: a second run with this --out refuses (harness.safe_write)
    claim = claim_journal(journal_path_for(out))
    if replacing:
        say(f"replacing {out}")
    try:
        if args.prometheus_port is not None:
            from harness.orchestrate.live_metrics import LiveMetrics, MetricsServer

            live_metrics = LiveMetrics(run=out.stem, scenario=scn.name)
            metrics_server = MetricsServer(live_metrics, args.prometheus_port, args.prometheus_host)
            try:
                port = metrics_server.start()
            except OSError as exc:
                metrics_server = None
                raise UsageError(
                    f"--prometheus-port {args.prometheus_port}: cannot serve on "
                    f"{args.prometheus_host}: {exc.strerror or exc}"
                ) from None
            say(f"live metrics: http://{args.prometheus_host}:{port}/metrics")
        if target is None:
            log_path = out.with_name(out.stem + ".sim.log")
            sim = start_simulator(scn.sim, scn.path, log_path)
            server_info = sim.info
            say(f"no target given: started {sim.description}; log: {log_path.absolute()}")
            target = Target(
                "simulator",
                sim.base_url,
                simulator_model(args, scn)[0],
                args.endpoint or scn.target.endpoint or "chat",
            )
        continuous = True
        max_tokens_key = "max_tokens"
        adaptations: list[dict[str, str]] = []
        if args.probe:
            probe = _run_loop(probe_target(target, scn.workload))
            if probe.adaptations and (args.strict_request or probe.error):
                _refuse_adaptations(probe, args.strict_request, warn)
            if probe.error:
                raise RunAborted(
                    f"the target {target.base_url} failed a first request: {probe.error}"
                    + (f"; fix: {probe.fix}" if probe.fix else "")
                )
            continuous = probe.continuous_usage
            if probe.shape is not None:  # what the target accepts is what the run sends
                scn = dataclasses.replace(
                    scn,
                    workload=dataclasses.replace(
                        scn.workload,
                        ignore_eos=probe.shape.ignore_eos,
                        extra_body=dict(probe.shape.extra),
                    ),
                )
                max_tokens_key = probe.shape.max_tokens_key
            for a in probe.adaptations:
                warn(a.line())
            adaptations = [a.to_dict() for a in probe.adaptations]
            if probe.model and not target.model:
                target = dataclasses.replace(target, model=probe.model)
        plan = _run_loop(settle_prompt_lengths(plan, scn.workload, target, say))
        from harness.client.transport import choose_http_client

        try:
            http_client = choose_http_client(args.http_client, target.base_url)
        except ValueError as exc:
            raise UsageError(f"--http-client: {exc}") from None
        started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        jpath = journal_path_for(out)
        header = journal_header(
            scn,
            plan,
            target,
            started,
            {
                "continuous_usage_stats": continuous,
                "grace_s": args.grace_s,
                "http_client": http_client,
                "workers": n_workers,
                "ray": args.ray,
                "ignore_eos": scn.workload.ignore_eos,
                "max_tokens_key": max_tokens_key,
                **(
                    {"prefix_cache_reset": args.prefix_cache_reset}
                    if args.prefix_cache_reset is not None
                    else {}
                ),
            },
            server_info,
        )
        header["request_adaptations"] = adaptations
        if live_metrics is not None:  # its histograms in the result's time base
            from harness.analysis.clock import sim_speedup

            live_metrics.set_speedup(sim_speedup(header))
        journal = JournalWriter(jpath, header, claim)
        cfg = EngineConfig(
            target,
            scn.workload,
            scn.retry,
            continuous,
            args.grace_s,
            request_id_prefix=f"{scn.name}-{int(time.time())}",
            http_client=http_client,
            max_tokens_key=max_tokens_key,
        )
        say(
            f"running {scn.name}: {plural(len(plan.phases), 'phase')}, "
            f"{plural(plan.total_requests, 'request')} planned, "
            f"against {target.base_url} ({target.model}, {target.endpoint})"
        )
        scraper = None
        if res.metrics.scrape:
            from harness.server.scrape import Scraper

            scraper = Scraper(
                target.base_url,
                journal.write_line,
                res.metrics.scrape_interval_s,
                res.metrics.path,
                target.tls_verify,
            )
        feed = LiveFeed(ProgressView(Goal.of(plan), args.quiet, workers=n_workers), live_metrics)
        if n_workers > 1 or args.ray is not None:
            from harness.orchestrate.sharded import execute

            outcome = execute(
                plan,
                cfg,
                n_workers,
                journal,
                args.quiet,
                args.ray,
                scraper,
                progress=feed.tick,
                on_lines=feed.observe_lines if live_metrics else None,
                stop=stop,
            )
            feed.close()
        else:
            outcome = _run_loop(
                _execute(plan, cfg, journal, args.quiet, scraper, monitor, feed, stop)
            )
        sim_info = None
        if sim is not None:  # stopped now, so its own account of the run lands in the journal
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
        finished = True
    finally:
        if journal is not None:  # closed already, or a failure midway: what was measured is kept
            journal.close()
        if not finished:
            claim.close()
        if sim is not None:
            sim.stop()
        if metrics_server is not None:  # the final counts stay up for a scraper to read
            metrics_server.linger(linger_seconds(args.prometheus_linger_s) if finished else 0.0)
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
    return result, out


def _refuse_adaptations(probe: Any, strict: bool, warn: Callable[[str], None]) -> None:
    """`--strict-request` (or a probe that failed after dropping arguments): stop, naming what
    the target refused and what dropping it would cost."""
    what = "; ".join(f"{a.line()} (server: {a.evidence})" for a in probe.adaptations)
    if strict:
        raise UsageError(
            f"--strict-request: {what}; run without --strict-request to send the "
            "request without it, or change [workload] (ignore_eos = false, extra_body)"
        )
    warn(what)


def every_request_failed(result: dict[str, Any]) -> str | None:
    """A plain sentence when no request of the run succeeded (None otherwise): how many failed
    and the servers' most frequent messages."""
    from harness.analysis.failures import headline

    blocks = result.get("phases") or []
    failed = sum(b["requests"]["failed"] for b in blocks)
    if failed == 0 or any(b["requests"]["completed"] for b in blocks):
        return None
    return headline(blocks, failed)


__all__ = ["RunArgs", "WarnOnce", "run_command", "HarnessError"]
