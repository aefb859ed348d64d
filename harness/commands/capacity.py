"""`harness capacity SCENARIO.toml --slo ttft_p99=2s [--target-load 50rps]`: the highest
sustainable request rate meeting every SLO, found with probe runs and confirmed.

This module parses the command line and prints; the search is `harness.orchestrate.capacity`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.analysis import capacity as cap
from harness.argtable import Option, add_options, opt
from harness.config.scenario import ENDPOINTS
from harness.config.sources import FILE_OPTIONS, load_sources
from harness.config.target import target_arg
from harness.errors import UsageError
from harness.orchestrate.capacity import (
    DEFAULT_MAX_PROBE_S,
    VERIFY_OVERLOAD,
    CapacityAnswer,
    CapacityRequest,
    find_capacity,
    virtual_answer,
    virtual_search,
)
from harness.orchestrate.capacity_answer import interrupted_report
from harness.orchestrate.capacity_progress import SearchProgress
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.stopping import CommandStop, Interrupted, stop_on_signals
from harness.termtext import terminal_safe
from harness.units import parse_duration_s, parse_percent


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "capacity",
        help="find the highest request rate that meets the SLOs; size replicas",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness capacity scenarios/steady.toml --slo ttft_p99=1s --slo itl_p99=80ms\n"
        "  python -m harness capacity s.toml --slo ttft_p99=1s --target-load 50rps --headroom 25%\n"
        "  python -m harness capacity s.toml --slo e2e_p99=10s --slo error_share=0.5% --verify\n"
        "  python -m harness capacity s.toml --slo e2e_p99=10s --target http://127.0.0.1:8000",
    )
    add_options(p, CAPACITY_TABLE)
    p.set_defaults(func=_main)


def _html_path(text: str) -> str:
    if text and not text.lower().endswith((".html", ".htm")):
        raise argparse.ArgumentTypeError(
            f"expected a path ending in .html, got {text!r} (the scenario goes before --html, "
            "or write --html=OUT.html)"
        )
    return text


CAPACITY_TABLE: tuple[Option, ...] = (
    opt("scenario", help="scenario TOML (open-loop arrivals with a rate, or a trace)"),
    opt(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC_STAT=LIMIT",
        help="e.g. ttft_p99=2s or error_share=1%% (repeatable); default: the scenario's aggregate [slo]",
    ),
    opt(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario value for every probe, e.g. sim.gpu=L40S (repeatable)",
    ),
    opt(
        "--target-load",
        metavar="RATE",
        help="requests/s to serve, e.g. 50rps: prints replicas needed",
    ),
    opt("--headroom", default="20%", help="spare capacity per replica (default 20%%)"),
    opt("--start-rate", type=float, help="first probe rate, req/s (default: the scenario's)"),
    opt("--max-rate", type=float, default=100_000.0, help="never probe above this (req/s)"),
    opt(
        "--probe-duration",
        default="10s",
        help="shortest probe (default 10s; longer where the E2E asks for it, see docs/capacity.md)",
    ),
    opt(
        "--max-probe-duration",
        default=f"{DEFAULT_MAX_PROBE_S:g}s",
        help="longest probe (default 10m)",
    ),
    opt("--confirm-duration", help="length of a confirmation run (default 3x the probe)"),
    opt("--confirm-runs", type=int, default=2, help="confirmation runs at the answer (default 2)"),
    opt(
        "--verify",
        action="store_true",
        help=f"then run at the answer (must pass) and at {VERIFY_OVERLOAD:g}x it (must fail)",
    ),
    opt("--tolerance", default="5%", help="stop when the bracket is this narrow (default 5%%)"),
    opt("--max-probes", type=int, default=cap.DEFAULT_MAX_PROBES),
    opt(
        "--max-error-share",
        default="1%",
        help="the error_share SLO when --slo does not give one (default 1%%)",
    ),
    opt(
        "--target",
        type=target_arg,
        help="base URL (default: the scenario's, else the built-in simulator)",
    ),
    opt("--model"),
    opt("--endpoint", choices=ENDPOINTS),
    opt(
        "--out",
        metavar="DIR",
        help="folder for probe results (default results/capacity-<name>-<time>)",
    ),
    opt(
        "--virtual",
        action="store_true",
        help="only the search on the simulator's virtual clock (the scenario's [sim]): seconds "
        "of CPU, no server, no HTTP",
    ),
    opt(
        "--no-estimate",
        action="store_true",
        help="on the built-in simulator, skip the virtual-clock estimate that runs first (its "
        "CPU, seconds to a minute on a long scenario, is spent before the first probe)",
    ),
    opt(
        "--html",
        nargs="?",
        const="",
        default=None,
        type=_html_path,
        metavar="OUT.html",
        help="also draw the search: probes on a rate axis, the SLO lines, the answer, its bracket "
        "and the failing evidence (default: capacity.html in the --out folder)",
    ),
    opt("--quiet", action="store_true"),
    opt(
        "--reset-prefix-cache",
        action="store_true",
        help="empty the server's prefix cache before each probe (vLLM's POST "
        "/reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1); where the target has no such "
        "route the warm-up phase decides what each probe finds cached",
    ),
    *FILE_OPTIONS,
)


def _pct(text: str, flag: str) -> float:
    try:
        return parse_percent(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _seconds(text: str, flag: str) -> float:
    try:
        return parse_duration_s(text, allow_zero=False)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _slos(a: argparse.Namespace, scn: Any) -> list[cap.Slo]:
    return cap.slos_from(a.slo, scn.slo, _pct(a.max_error_share, "--max-error-share"))


def _main(a: argparse.Namespace) -> int:
    load_sources(a.settings, a.config)  # bad files are refused before any server starts
    from harness.orchestrate.virtual_capacity import probe_form

    scn = load_scenario(a.scenario, a.set)
    slos = _slos(a, scn)
    form = probe_form(scn)  # what cannot run as a probe is refused here, before any server starts
    request = _request(a, scn, slos, form)
    say = _sayer(a.quiet)
    if form.describe():
        say(form.describe())
    with stop_on_signals() as signals:  # SIGINT/SIGTERM: what finished, no answer, 130/143
        try:
            answer = _search(a, scn, request, request.confirm_s, say, signals)
        except Interrupted as exc:  # before the search began (the estimate, a server start)
            answer = interrupted_report(request, scn.name, [], None, {}, None, exc.stop)
        _print_answer(a, answer)
    return answer.status


def _request(a: argparse.Namespace, scn: Any, slos: list[cap.Slo], form: Any) -> CapacityRequest:
    """The search the flags ask for, each flag checked (exit 2) before anything runs; the first
    probe's scenario is loaded, and the --out folder made."""
    probe_s = max(_seconds(a.probe_duration, "--probe-duration"), form.min_probe_s)
    max_probe_s = max(_seconds(a.max_probe_duration, "--max-probe-duration"), probe_s)
    confirm_s = (
        _seconds(a.confirm_duration, "--confirm-duration") if a.confirm_duration else 3 * probe_s
    )
    tol = _pct(a.tolerance, "--tolerance")
    if not 0 < tol < 1:
        raise UsageError(f"--tolerance {a.tolerance}: expected more than 0% and less than 100%")
    headroom = _pct(a.headroom, "--headroom")
    if not 0 <= headroom < 1:
        raise UsageError(f"--headroom {a.headroom}: expected 0%..99%")
    if a.confirm_runs < 0 or a.max_probes < 1:
        raise UsageError("--confirm-runs must be >= 0 and --max-probes >= 1")
    target_load = cap.parse_target_load(a.target_load) if a.target_load else None
    start = a.start_rate if a.start_rate is not None else form.start_rate
    if not (math.isfinite(start) and math.isfinite(a.max_rate)) or start <= 0 or a.max_rate < start:
        raise UsageError(
            f"--start-rate {start:g} / --max-rate {a.max_rate:g}: expected 0 < start <= max"
        )
    load_scenario(a.scenario, a.set, adapt=form.at(start, probe_s))  # the first probe loads
    _check_virtual(a, scn)
    out = (
        Path(a.out)
        if a.out
        else Path("results")
        / f"capacity-{scn.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    )
    out.mkdir(parents=True, exist_ok=True)
    return CapacityRequest(
        scenario=a.scenario,
        sets=list(a.set),
        slos=slos,
        out=out,
        probe_s=probe_s,
        max_probe_s=max_probe_s,
        confirm_s=confirm_s,
        tolerance=tol,
        headroom=headroom,
        confirm_runs=a.confirm_runs,
        max_probes=a.max_probes,
        start_rate=start,
        max_rate=a.max_rate,
        verify=a.verify,
        target_load=target_load,
        target=a.target,
        model=a.model,
        endpoint=a.endpoint,
        settings=a.settings,
        config=a.config,
        reset_prefix_cache=a.reset_prefix_cache,
    )


def _check_virtual(a: argparse.Namespace, scn: Any) -> None:
    """--virtual's conflicts with the other flags, and what its clock cannot run (exit 2)."""
    if a.virtual and a.target is not None:
        raise UsageError(
            "--virtual searches the simulator the scenario's [sim] describes, on its virtual "
            "clock; it cannot measure --target (leave one out)"
        )
    if a.virtual and a.no_estimate:
        raise UsageError("--virtual is the estimate that --no-estimate skips (leave one out)")
    if a.virtual and a.verify:
        raise UsageError("--verify runs over HTTP; --virtual runs none (leave one out)")
    if a.virtual:
        from harness.orchestrate.virtual_capacity import probe_form

        probe_form(scn, virtual=True)  # sessions cannot run there: refused before anything runs


def _sayer(quiet: bool) -> Callable[..., None]:
    """The search's progress lines on stderr (nothing with --quiet)."""

    def say(*parts: object) -> None:
        if not quiet:
            print(terminal_safe(" ".join(map(str, parts))), file=sys.stderr, flush=True)

    return say


def _print_answer(a: argparse.Namespace, answer: CapacityAnswer) -> None:
    """The answer's text, its HTML page when asked (not for an interrupted search), its path."""
    print(terminal_safe("\n".join(answer.text)))
    if a.html is not None and "interrupted" not in answer.report:
        from harness.analysis.html import write_html
        from harness.analysis.html_capacity import render_capacity_html

        dest = Path(a.html) if a.html else answer.path.with_suffix(".html")
        write_html(dest, render_capacity_html(answer.report, answer.path.parent))
        print(f"HTML: {dest}")
    print(answer.path)


def _search(
    a: argparse.Namespace,
    scn: Any,
    request: CapacityRequest,
    confirm_s: float,
    say: Callable[[str], None],
    signals: CommandStop,
) -> CapacityAnswer:
    """The virtual-clock estimate (or, with --virtual, the answer), then the search over HTTP."""
    # The simulator the search would start (no target given anywhere) has a virtual clock: the
    # same search there first, for what to expect. Sessions cannot run on it; they go straight on.
    on_simulator = a.target is None and scn.target.url is None
    estimate = None
    if a.virtual:
        estimate = virtual_search(request, scn)
    elif on_simulator and scn.workload.sources.conversation is None and not a.no_estimate:
        try:
            estimate = virtual_search(request, scn)
        except UsageError as exc:  # what the virtual clock cannot run, HTTP still can
            say(f"no virtual-clock estimate: {exc}")
        if estimate is not None:
            say(estimate.line())
            request = dataclasses.replace(request, expected=estimate.found.answer)
    if a.virtual:
        assert estimate is not None
        return virtual_answer(request, scn, estimate)
    progress = SearchProgress(
        a.confirm_runs, confirm_s, request.expected, quiet=a.quiet, stream=sys.stderr
    )
    return find_capacity(request, scn, say, progress, signals)
