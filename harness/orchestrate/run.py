"""`run`: scenario -> plan -> (simulator) -> engine -> journal -> result -> report.

Orchestration only: each step is a call into the module that owns it. The result is always
built by reading the journal back, exactly as `report JOURNAL` would. `measure` is the run
itself, as a few named steps (settle, serve live metrics, start the target, probe it, journal
header, drive the engine, end the journal, build the result); `run_command` prints what it
measured. Beside it: `run_args` (`RunArgs`), `run_files` (where the result goes, the HTML and
vLLM files), `run_header` (the journal's header). Their names are re-exported here for the
code that imports them from `harness.orchestrate.run`.
"""

from __future__ import annotations

import dataclasses
import shutil  # noqa: F401  (tests patch `run.shutil.disk_usage`; check_writable reads it)
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.analysis.accounting import account_sentence
from harness.analysis.numbers import plural
from harness.analysis.report_text import render_text
from harness.analysis.slo_verdict import slo_exit_status
from harness.client.engine import EngineConfig
from harness.client.state import RunOutcome
from harness.client.transport import raise_open_file_limit
from harness.config.resolve import CliValues, Resolution, Sources, load_sources, resolve
from harness.config.target import Target
from harness.errors import HarnessError
from harness.orchestrate.lengths import settle_prompt_lengths
from harness.orchestrate.outputs import check_output_file
from harness.orchestrate.progress import Goal, LiveFeed, ProgressView
from harness.orchestrate.run_args import RunArgs
from harness.orchestrate.run_engine import execute_one_process, run_loop
from harness.orchestrate.run_files import (
    MIN_FREE_BYTES,
    RESULTS_DIR,
    check_writable,
    default_out_path,
    html_path,
    out_path,
    vllm_result_path,
    write_result_html,
    write_vllm_result,
)
from harness.orchestrate.run_header import environment, journal_header
from harness.orchestrate.run_steps import (
    Held,
    Setup,
    WarnOnce,
    check_run_args,
    end_journal,
    engine_config,
    http_client_for,
    probe_shape,
    run_header,
    serve_live_metrics,
    simulator_model,
    start_target,
    stderr_say,
    warn_stderr,
    worker_count,
    write_result,
)
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.servers import StartedServer
from harness.record.journal import JournalWriter, journal_path_for
from harness.safe_write import claim_journal
from harness.termtext import terminal_safe
from harness.workload.plan import Plan, build_plan
from harness.workload.scenario import Scenario, check_endpoint_workload


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
    check_run_args(args)
    setup = _settle(args, server, warn)
    if setup is None:  # --explain: printed, nothing run
        return None
    say = stderr_say(args.quiet)
    for note in setup.plan.notes:  # where times and prompts come from (trace format, dataset...)
        say(note)
    jpath = journal_path_for(setup.out)
    # locked before anything is sent: a second run with this --out refuses (harness.safe_write)
    claim = claim_journal(jpath)
    if setup.replacing:
        say(f"replacing {setup.out}")
    held = Held()
    finished = False  # the run reached its end (an endpoint lingers only then)
    try:
        serve_live_metrics(args, setup, held, say)
        target, server_info = start_target(args, setup, server, held, say)
        shape = probe_shape(args, setup.scn, target, warn)
        plan = run_loop(settle_prompt_lengths(setup.plan, shape.scn.workload, shape.target, say))
        http_client = http_client_for(args, shape.target)
        header = run_header(args, setup, shape, plan, http_client, server_info)
        if held.live_metrics is not None:  # its histograms in the result's time base
            from harness.analysis.clock import sim_speedup

            held.live_metrics.set_speedup(sim_speedup(header))
        held.journal = journal = JournalWriter(jpath, header, claim)
        cfg = engine_config(args, shape, http_client)
        say(
            f"running {shape.scn.name}: {plural(len(plan.phases), 'phase')}, "
            f"{plural(plan.total_requests, 'request')} planned, "
            f"against {shape.target.base_url} ({shape.target.model}, {shape.target.endpoint})"
        )
        outcome = _drive(args, setup, plan, cfg, journal, held.live_metrics, monitor, stop)
        end_journal(journal, held.sim, outcome, cfg)
        finished = True
    finally:
        held.release(finished, claim, args)
    return write_result(jpath, setup.out, claim), setup.out


def _settle(
    args: RunArgs, server: StartedServer | None, warn: Callable[[str], None]
) -> Setup | None:
    """The scenario loaded and resolved, its plan built, the outputs checked: everything that
    can refuse the run before anything starts. None for --explain (the explanation printed)."""
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
    simulator_here = target is None or (server is not None and server.target_kind == "simulator")
    workers = worker_count(args, res, plan, simulator_here)
    raise_open_file_limit()
    return Setup(scn, res, target, plan, out, workers.n, replacing, workers.why)


def _drive(
    args: RunArgs,
    setup: Setup,
    plan: Plan,
    cfg: EngineConfig,
    journal: JournalWriter,
    live_metrics: Any,
    monitor: Any,
    stop: threading.Event | None,
) -> RunOutcome:
    """The engine over the plan, in this process or sharded (workers, Ray), with the `/metrics`
    scraper and the progress line (and `--prometheus-port`'s live metrics) beside it."""
    scraper = None
    if setup.res.metrics.scrape:
        from harness.server.scrape import Scraper

        metrics = setup.res.metrics
        scraper = Scraper(
            cfg.target.base_url,
            journal.write_line,
            metrics.scrape_interval_s,
            metrics.path,
            cfg.target.tls_verify,
        )
    n_workers = setup.n_workers
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
        return outcome
    return run_loop(
        execute_one_process(plan, cfg, journal, args.quiet, scraper, monitor, feed, stop)
    )


def every_request_failed(result: dict[str, Any]) -> str | None:
    """A plain sentence when no request of the run succeeded (None otherwise): how many failed
    and the servers' most frequent messages."""
    from harness.analysis.failures import headline

    blocks = result.get("phases") or []
    failed = sum(b["requests"]["failed"] for b in blocks)
    if failed == 0 or any(b["requests"]["completed"] for b in blocks):
        return None
    return headline(blocks, failed)


__all__ = [
    "MIN_FREE_BYTES",
    "RESULTS_DIR",
    "HarnessError",
    "RunArgs",
    "WarnOnce",
    "check_writable",
    "default_out_path",
    "environment",
    "html_path",
    "journal_header",
    "journal_path_for",
    "measure",
    "run_command",
    "vllm_result_path",
    "write_result_html",
    "write_vllm_result",
]
