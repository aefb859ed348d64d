"""`harness capacity SCENARIO.toml --slo ttft_p99=2s [--target-load 50rps]`: the highest
sustainable request rate meeting every SLO, found with short probe runs and confirmed.

Each probe is a `run` (same code path) of the scenario with every measured phase's arrival rate
set to the probe rate and its duration to --probe-duration; probes are written as results in
the output folder, with `capacity.json` summing up the search.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from harness.analysis import capacity as cap
from harness.analysis.result import load_result
from harness.config.resolve import add_file_args, load_sources
from harness.config.scenario import load_scenario
from harness.errors import RunAborted, UsageError
from harness.units import parse_duration_s, parse_percent

MONITOR_INTERVAL_S = 0.25


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("capacity", help="find the highest request rate that meets the SLOs; size replicas",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n"
                       "  python -m harness capacity scenarios/burst.toml --slo ttft_p99=2s --slo itl_p99=80ms\n"
                       "  python -m harness capacity s.toml --slo ttft_p99=1s --target-load 50rps --headroom 25%\n"
                       "  python -m harness capacity s.toml --slo e2e_p99=10s --target http://127.0.0.1:8000")
    p.add_argument("scenario", help="scenario TOML (open-loop arrivals with a rate)")
    p.add_argument("--slo", action="append", default=[], metavar="METRIC_STAT=DURATION",
                   help="e.g. ttft_p99=2s (repeatable); default: the scenario's aggregate [slo] entries")
    p.add_argument("--target-load", metavar="RATE", help="requests/s to serve, e.g. 50rps: prints replicas needed")
    p.add_argument("--headroom", default="20%", help="spare capacity per replica (default 20%%)")
    p.add_argument("--start-rate", type=float, help="first probe rate, req/s (default: the scenario's)")
    p.add_argument("--max-rate", type=float, default=100_000.0, help="never probe above this (req/s)")
    p.add_argument("--probe-duration", default="10s", help="length of a probe run (default 10s)")
    p.add_argument("--confirm-duration", help="length of a confirmation run (default 3x the probe)")
    p.add_argument("--confirm-runs", type=int, default=2, help="confirmation runs at the answer (default 2)")
    p.add_argument("--tolerance", default="5%", help="stop when the bracket is this narrow (default 5%%)")
    p.add_argument("--max-probes", type=int, default=cap.DEFAULT_MAX_PROBES)
    p.add_argument("--max-error-share", default="1%", help="a probe with more failed requests fails (default 1%%)")
    p.add_argument("--target", help="base URL (default: the scenario's, else the built-in simulator)")
    p.add_argument("--model")
    p.add_argument("--endpoint", choices=("chat", "completions"))
    p.add_argument("--out", metavar="DIR", help="folder for probe results (default results/capacity-<name>-<time>)")
    p.add_argument("--quiet", action="store_true")
    add_file_args(p)
    p.set_defaults(func=_main)


def _pct(text: str, flag: str) -> float:
    try:
        return parse_percent(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def make_monitor(offered_rate: float) -> Any:
    """An async watcher for runner.RunArgs.monitor: stops the probe when its queue runs away."""
    async def monitor(counters: Any, control: Any) -> None:
        watch = cap.QueueWatch(offered_rate)
        t0 = time.monotonic()
        while not control.stopped:
            await asyncio.sleep(MONITOR_INTERVAL_S)
            why = watch.add(time.monotonic() - t0, counters.completed, counters.in_flight)
            if why:
                control.stop(f"probe stopped early: {why}")
                return
    return monitor


def _main(a: argparse.Namespace) -> int:
    load_sources(a.settings, a.config)   # bad files are refused before any server starts
    from harness.runner import RunArgs, run_command
    from harness.workload.arrivals import Closed, Trace

    scn = load_scenario(a.scenario)
    slos = [cap.parse_slo(s) for s in a.slo]
    if not slos:
        slos = [cap.Slo(s.name, s.metric, s.stat, s.limit_s * 1e3) for s in scn.slo if s.stat is not None]
    if not slos:
        raise UsageError("give at least one --slo METRIC_STAT=DURATION (e.g. ttft_p99=2s); the scenario has no aggregate [slo]")
    measured = [i for i, ph in enumerate(scn.phases) if not ph.warmup]
    for i in measured:
        if isinstance(scn.phases[i].arrival, Closed | Trace) or not hasattr(scn.phases[i].arrival, "rate"):
            raise UsageError(f"{a.scenario}: phases.{i}.arrival is {scn.phases[i].arrival}; capacity needs an "
                             "open-loop process with a rate (constant, poisson, gamma)")
    try:
        probe_s = parse_duration_s(a.probe_duration, allow_zero=False)
        confirm_s = parse_duration_s(a.confirm_duration, allow_zero=False) if a.confirm_duration else 3 * probe_s
    except ValueError as exc:
        raise UsageError(f"--probe-duration/--confirm-duration: {exc}") from None
    tol = _pct(a.tolerance, "--tolerance")
    headroom = _pct(a.headroom, "--headroom")
    max_err = _pct(a.max_error_share, "--max-error-share")
    if not 0 <= headroom < 1:
        raise UsageError(f"--headroom {a.headroom}: expected 0%..99%")
    if a.confirm_runs < 0 or a.max_probes < 1:
        raise UsageError("--confirm-runs must be >= 0 and --max-probes >= 1")
    target_load = cap.parse_target_load(a.target_load) if a.target_load else None
    start = a.start_rate or float(scn.phases[measured[0]].arrival.rate)
    if start <= 0 or a.max_rate < start:
        raise UsageError(f"--start-rate {start:g} / --max-rate {a.max_rate:g}: expected 0 < start <= max")
    out = Path(a.out) if a.out else Path("results") / f"capacity-{scn.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    out.mkdir(parents=True, exist_ok=True)
    say = (lambda *x: None) if a.quiet else (lambda *x: print(*x, file=sys.stderr, flush=True))

    server, target, kind, model = None, a.target, None, a.model
    if target is None and scn.target.url is None:
        from harness.server.launcher import start_sim
        from harness.sim.settings import SimSettings

        settings = SimSettings.from_mapping(scn.sim, scn.path)
        server = start_sim(settings.to_argv(), out / "server.log")
        target, kind, model = server.base_url, "simulator", a.model or settings.model
        say(f"capacity: started the built-in simulator at {server.base_url} ({settings.gpu}, {settings.model})")
    probes: list[dict[str, Any]] = []

    def probe(rate: float, duration_s: float, label: str) -> dict[str, Any]:
        sets = [f"phases.{i}.arrival.rate={rate!r}" for i in measured] + \
               [f"phases.{i}.duration=\"{duration_s:g}s\"" for i in measured]
        path = out / f"{len(probes):02d}-{label}-rate={rate:.4g}.json"
        try:
            run_command(RunArgs(scenario=a.scenario, target=target, model=model, endpoint=a.endpoint,
                                out=str(path), sets=sets, quiet=True, target_kind=kind,
                                settings=a.settings, config=a.config,
                                monitor=make_monitor(rate)))
        except RunAborted as exc:
            say(f"  {label} at {rate:.4g} req/s: {exc}")
        r = load_result(path)
        v = cap.judge(r, slos, max_err)
        entry = {"kind": label, "rate": rate, "duration_s": duration_s, "passed": v.passed,
                 "reason": v.reason, "values_ms": v.values_ms, "ratios": v.ratios, "binding": v.binding,
                 "achieved_requests_per_s": r["summary"]["throughput"]["requests_per_s"],
                 "result": path.name}
        probes.append(entry)
        say(f"  {label} {rate:8.3g} req/s: {'pass' if v.passed else 'FAIL'}  "
            + ", ".join(f"{k} {'-' if x is None else f'{x:.1f}'} ms" for k, x in v.values_ms.items())
            + (f"  ({v.reason})" if v.reason else ""))
        return entry

    search = cap.RateSearch(start, a.max_rate, tol, a.max_probes)
    answer: float | None = None
    confirmed: list[dict[str, Any]] = []
    try:
        while True:
            rate = search.next_rate()
            while rate is not None:
                search.record(rate, probe(rate, probe_s, "probe")["passed"])
                rate = search.next_rate()
            answer = search.lo
            if answer is None or a.confirm_runs == 0:
                break
            confirmed = [probe(answer, confirm_s, "confirm") for _ in range(a.confirm_runs)]
            if all(c["passed"] for c in confirmed):
                break
            search.record(answer, False)   # failed confirmation: search below it
            search.max_probes = search.probes + a.max_probes // 2
            answer = None
    finally:
        if server is not None:
            server.stop()
    report = {"kind": "capacity", "scenario": a.scenario, "slos": [asdict(s) for s in slos],
              "answer_requests_per_s": answer, "bracket": [search.lo, search.hi], "probes": probes,
              "target_kind": kind or "http", "tolerance": tol}
    text = [f"capacity of {scn.name} ({'simulator' if kind == 'simulator' else target}) at "
            + ", ".join(f"{s.name} <= {s.limit_ms:g} ms" for s in slos)]
    status = 0
    if answer is None:
        text.append(f"no rate met the SLOs (lowest probed {min(p['rate'] for p in probes):.3g} req/s failed)")
        status = 1
    else:
        last = confirmed or [p for p in probes if p["rate"] == answer and p["passed"]]
        binding = max(last[-1]["ratios"], key=lambda k: last[-1]["ratios"][k])
        worst = max(c["ratios"][binding] for c in last)
        hi = f"; fails at {search.hi:.3g} req/s" if search.hi else f"; not broken up to --max-rate {a.max_rate:g}"
        text.append(f"sustainable: {answer:.3g} req/s{hi}; binding SLO {binding}: "
                    f"{worst * 100:.0f}% of its limit ({(1 - worst) * 100:.0f}% margin)"
                    + (f", confirmed by {len(confirmed)} runs of {confirm_s:g}s" if confirmed else ""))
        report["binding_slo"] = binding
        report["margin"] = 1 - worst
        if target_load is not None:
            n = cap.replicas_needed(target_load, answer, headroom)
            report["replicas"] = {"target_requests_per_s": target_load, "headroom": headroom, "replicas": n}
            text.append(f"for {target_load:g} req/s: {n} replicas (each at most {(1 - headroom) * 100:.0f}% of "
                        f"{answer:.3g} req/s = {answer * (1 - headroom):.3g} req/s)")
    if kind == "simulator":
        text.append("(simulated server: the capacity of the simulator's model, not of a real GPU)")
    (out / "capacity.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print("\n".join(text))
    print(out / "capacity.json")
    return status
