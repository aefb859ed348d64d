"""The capacity search run against a live server: each probe a `run` of the scenario at one
rate, judged on its steady part, until the bracket is narrow enough; then confirmed and, with
`verify`, checked at the answer and above it. `harness capacity` parses the command line and
prints; everything between is here.

Each probe is a `run` (same code path) of the scenario with every measured phase's arrival rate
set to the probe rate (a trace: replayed faster or slower); it is judged on its steady part
(`harness.analysis.steady`) and stopped early only by a runaway queue
(`harness.orchestrate.probe_monitor`). Probes are written as results in the output folder, with
`capacity.json` summing up the search: the answer, its bracket and the evidence
(`harness.orchestrate.capacity_answer`). SIGINT or SIGTERM stops the search within a second or
two: the run in progress is cut short and never judged, and capacity.json holds the probes that
finished, `interrupted` and no answer (harness.orchestrate.stopping).

With `reset_prefix_cache` the server's prefix cache is emptied before every probe
(harness.orchestrate.prefix_reset): each probe's result records how that went
(`options.prefix_cache_reset`), as does its entry in capacity.json.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from harness.analysis import capacity as cap
from harness.analysis.result import load_result
from harness.analysis.steady import steady_part
from harness.errors import RunAborted
from harness.orchestrate.capacity_answer import (
    VERIFY_OVERLOAD,
    CapacityAnswer,
    CapacityRequest,
    interrupted_report,
)
from harness.orchestrate.capacity_answer import report as _report
from harness.orchestrate.capacity_progress import SearchProgress
from harness.orchestrate.stopping import CommandStop, Interrupted
from harness.workload.scenario import Scenario

MIN_GRACE_S = 10.0  # requests in flight at a probe's end get this long, or 2x the p99 E2E
MIN_DRAIN_S = 30.0  # ... to finish after a probe's end, or 3x the p99 E2E, before it is stopped
DEFAULT_MAX_PROBE_S = 600.0  # no probe runs longer, whatever its E2E asks for
SUSPECT_LAG_SHARE = 0.1  # a client late by 10 % of the tightest latency SLO spoils a probe
SUSPECT_SIM_BEHIND_SHARE = (
    0.01  # ... and so does our simulator falling behind its model by 1 % of it
)


def _sim_lost_s(base_url: str) -> float:
    """Seconds the built-in simulator has fallen behind its model so far (its /sim/truth)."""
    import urllib.request

    with urllib.request.urlopen(base_url.rstrip("/") + "/sim/truth", timeout=10) as resp:  # noqa: S310 - our own 127.0.0.1 server
        return float(orjson.loads(resp.read())["engine"]["lost_s"])


def _say_probe(say: Any, p: cap.Probe) -> None:
    v = p.verdict
    figures = ", ".join(
        f"{k} {'-' if x is None else (f'{x:.2%}' if k == cap.ERROR_SHARE else f'{x:.1f} ms')}"
        for k, x in v.values.items()
    )
    share = p.part.served_share
    served = (
        f"served {p.part.served_requests_per_s:.3g}/{p.part.offered_requests_per_s:.3g} req/s"
        + (f" ({share:.0%})" if share is not None else "")
    )
    say(
        f"  {p.kind:7} {p.rate:8.4g} req/s: {'pass' if v.passed else 'FAIL'}  {figures}; {served} after "
        f"{p.part.fill_s:.1f}s fill-up" + (f"\n      ({v.reason})" if v.reason else "")
    )


def find_capacity(
    a: CapacityRequest,
    scn: Scenario,
    say: Callable[[str], None],
    progress: SearchProgress | None = None,
    signals: CommandStop | None = None,
) -> CapacityAnswer:
    """Run the search (probe results and capacity.json in `a.out`), showing it on `progress`.
    Raises RunAborted when a probe ends before its measured phases ran. `signals`: the
    command's SIGINT/SIGTERM stop (harness.orchestrate.stopping): the run in progress stops at
    once, is not judged, and capacity.json holds the probes that finished and no answer."""
    from harness.orchestrate.prefix_reset import PrefixCacheReset
    from harness.orchestrate.probe_monitor import ProbeMonitor
    from harness.orchestrate.run import RunArgs, WarnOnce, measure
    from harness.orchestrate.virtual_capacity import probe_form
    from harness.record.journal import journal_path_for, read_journal

    warn = WarnOnce()  # the probes' warnings (a refused ignore_eos...) once, not once per probe

    form = probe_form(scn)
    measured = list(form.measured)
    out, probe_s, max_probe_s, confirm_s = a.out, a.probe_s, a.max_probe_s, a.confirm_s

    server, target, kind, model = None, a.target, None, a.model
    if target is None and scn.target.url is None:
        from harness.orchestrate.servers import start_simulator

        server = start_simulator(scn.sim, scn.path, out / "server.log")
        target, kind, model = server.base_url, server.target_kind, a.model or server.model
        say(f"capacity: started {server.description}")
    resetter = None
    if a.reset_prefix_cache:
        where = target or _target_url(a, scn)
        if where is None:
            say("--reset-prefix-cache: no target URL to reset; the probes run as they are")
        else:
            resetter = PrefixCacheReset(where, say)
    sizer = cap.ProbeSizer(probe_s, max_probe_s)
    count = [0]
    search = cap.RateSearch(a.start_rate, a.max_rate, a.tolerance, a.max_probes)
    confirms = [0]

    slos = a.slos
    tightest_ms = min(s.limit_ms for s in slos if s.limit_ms is not None)

    def probe(rate: float, label: str) -> cap.Probe:
        duration = sizer.duration_s(rate)
        if label != "probe":
            duration = max(duration, confirm_s)
        p = probe_once(rate, label, duration)
        if not p.verdict.passed and p.detail.get("suspect"):
            say(
                f"  the harness itself was short of CPU (client late by {p.detail['client_lag_ms']:.0f} ms, simulator "
                f"behind its model by {p.detail.get('simulator_behind_s', 0.0):.2f} s): running it again"
            )
            p = probe_once(rate, label, duration)
        for _ in range(cap.LONGER_RETRIES):
            if duration >= max_probe_s or not cap.worth_a_longer_run(p.verdict, p.part):
                break
            duration = min(2 * duration, max_probe_s)
            say(
                f"  short only of served-vs-offered: running it again for {duration:g}s (a slow fill-up or a slow runaway?)"
            )
            p = probe_once(rate, label, duration)
        sizer.observe(rate, p.part, p.verdict.passed)
        finished.append(p)
        cut.clear()
        return p

    def probe_once(rate: float, label: str, duration: float) -> cap.Probe:
        if progress is not None:
            nxt = search.next_rate()
            progress.start_run(
                label, rate, duration, search, confirms[0], sizer.duration_s(nxt or rate)
            )
        try:
            p = _probe_once(rate, label, duration)
        finally:
            if progress is not None:
                progress.end_run()
        if label == "confirm":
            confirms[0] += 1
        _say_probe(say, p)
        return p

    def _probe_once(rate: float, label: str, duration: float) -> cap.Probe:
        path = out / f"{count[0]:02d}-{label}-rate={rate:.4g}.json"
        # Each run its own seed: repeated prompts would come back from the server's prefix cache
        # (vLLM's, llama.cpp's, the simulator's) and make every probe after the first look faster.
        seed = scn.seed + count[0]
        count[0] += 1
        grace = max(MIN_GRACE_S, 2 * (sizer.e2e_p99_s or 0.0))
        drain = max(MIN_DRAIN_S, 3 * (sizer.e2e_p99_s or 0.0))
        span = None if form.traces else duration  # a trace: its own
        monitor = ProbeMonitor(
            rate,
            measured,
            scn.phases[measured[0]].name,
            span_s=span,
            drain_limit_s=drain,
            on_sample=progress.sample if progress is not None else None,
        )
        lost0 = _sim_lost_s(server.base_url) if server is not None else 0.0
        reset = resetter.reset() if resetter is not None else None
        cut.update(kind=label, rate=rate, result=path.name)
        try:
            with signals.deferred() if signals is not None else contextlib.nullcontext():
                measure(  # as `run` does, less its report and the result's path on stdout
                    RunArgs(
                        scenario=a.scenario,
                        target=target,
                        model=model,
                        endpoint=a.endpoint,
                        out=str(path),
                        sets=a.sets,
                        adapt=form.at(rate, duration),
                        quiet=True,
                        settings=a.settings,
                        config=a.config,
                        grace_s=grace,
                        seed=seed,
                        prefix_cache_reset=reset,
                    ),
                    server=server,
                    monitor=monitor,
                    warn=warn,
                    stop=signals,
                )
        except RunAborted as exc:
            jp = journal_path_for(path)  # claimed (created empty) before the run starts
            if not jp.is_file() or jp.stat().st_size == 0:  # it stopped before it measured
                raise RunAborted(f"the probe at {rate:.4g} req/s could not run: {exc}") from None
            say(f"  {label} at {rate:.4g} req/s: {exc}")
        j = read_journal(journal_path_for(path))
        end = j.end or {}
        starts, ends = end.get("phase_starts_ns") or [], end.get("phase_ends_ns") or []
        if len(ends) <= measured[-1]:
            raise RunAborted(
                f"the probe at {rate:.4g} req/s ended before its measured phases ran: "
                f"{end.get('stop_reason') or 'no end line in its journal'}"
            )
        part = steady_part(
            j.columns(), (int(starts[measured[0]]), int(ends[measured[-1]])), measured
        )
        stop = None if end.get("complete") else str(end.get("stop_reason"))
        verdict = cap.judge(part, slos, stop)
        detail: dict[str, Any] = {"duration_s": duration, "seed": seed, "result": path.name}
        if reset is not None:
            detail["prefix_cache_reset"] = reset
        client = load_result(path)["client"] if path.is_file() else {}
        lag_ms = cap.client_lag_ms(client)  # wall time, as the probe is judged (its stamps)
        detail["client_lag_ms"] = lag_ms
        if lag_ms > SUSPECT_LAG_SHARE * tightest_ms:  # the harness, not the server, was late
            detail["suspect"] = True
        if server is not None:
            behind = _sim_lost_s(server.base_url) - lost0
            detail["simulator_behind_s"] = behind
            if behind > SUSPECT_SIM_BEHIND_SHARE * duration:
                detail["suspect"] = True
        if monitor.evidence is not None:
            detail["early_stop"] = monitor.evidence.as_dict()
        return cap.Probe(rate, label, verdict, part, detail)

    verification: list[cap.Probe] = []
    finished: list[cap.Probe] = []  # every probe judged so far, for an interrupted search
    cut: dict[str, Any] = {}  # the run in progress, not judged yet
    try:
        found = cap.search_capacity(probe, search, a.confirm_runs)
        if found.answer is not None and a.verify:
            verification = [
                probe(found.answer, "verify"),
                probe(found.answer * VERIFY_OVERLOAD, "verify"),
            ]
    except Interrupted as exc:  # no answer: what finished, the run cut short, exit 130/143
        return interrupted_report(a, scn.name, finished, search, cut, kind, exc.stop)
    finally:
        if server is not None:
            server.stop()
    return _report(a, scn.name, slos, found, verification, kind, target)


def _target_url(a: CapacityRequest, scn: Scenario) -> str | None:
    """The base URL the probes go to when neither --target nor a started simulator gave it
    (the scenario's [target], settings.json, config.toml)."""
    from harness.orchestrate.run import RunArgs, resolve_target

    t = resolve_target(
        RunArgs(scenario=a.scenario, endpoint=a.endpoint, settings=a.settings, config=a.config),
        scn,
    )
    return None if t is None else str(t.base_url)


@dataclass(frozen=True)
class Estimate:
    """The same search on the simulator's virtual clock, before the one over HTTP."""

    found: cap.SearchResult
    cpu_s: float  # what the virtual search took
    expected_runs: int  # runs the search over HTTP makes if it goes as the virtual one did
    expected_s: float  # ... and their planned seconds (warm-ups, probes, confirmations)

    def line(self) -> str:
        answer = self.found.answer
        what = f"~{answer:.3g} req/s" if answer is not None else "no rate met the SLOs"
        return (
            f"virtual-clock estimate: {what} ({len(self.found.probes)} virtual probes in "
            f"{self.cpu_s:.1f}s); the search over HTTP: about {self.expected_runs} runs, "
            f"~{self.expected_s / 60:.1f} min of probes"
        )


def virtual_search(a: CapacityRequest, scn: Scenario) -> Estimate:
    """The search `a` asks for, on the simulator the scenario's [sim] (and --set) describes, on
    the virtual clock: no server, no HTTP, seconds of CPU. Its probes' lengths say how long the
    same search takes over HTTP: each run is the scenario's warm-up phases and the probe."""
    import time

    from harness.orchestrate.virtual_capacity import virtual_capacity

    t0 = time.process_time()
    found = virtual_capacity(
        a.scenario,
        a.slos,
        a.sets,
        min_duration_s=a.probe_s,
        start_rate=a.start_rate,
        max_rate=a.max_rate,
        tolerance=a.tolerance,
        max_probes=a.max_probes,
    )
    cpu = time.process_time() - t0
    warm = sum(ph.duration_s or 0.0 for ph in scn.phases if ph.warmup)
    planned = [warm + float(str(p.detail.get("duration_s") or a.probe_s)) for p in found.probes]
    confirms = a.confirm_runs if found.answer is not None else 0
    return Estimate(
        found,
        cpu,
        len(planned) + confirms,
        sum(planned) + confirms * (warm + a.confirm_s),
    )


def virtual_answer(a: CapacityRequest, scn: Scenario, estimate: Estimate) -> CapacityAnswer:
    """`capacity --virtual`: the virtual-clock search reported as the search over HTTP is."""
    return _report(a, scn.name, a.slos, estimate.found, [], "virtual", None)


__all__ = [
    "CapacityAnswer",
    "CapacityRequest",
    "Estimate",
    "VERIFY_OVERLOAD",
    "find_capacity",
    "virtual_answer",
    "virtual_search",
]
