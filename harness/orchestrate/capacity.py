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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from harness.analysis import capacity as cap
from harness.analysis.result import load_result
from harness.analysis.steady import SteadyPart, steady_part
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

if TYPE_CHECKING:
    from harness.orchestrate.prefix_reset import PrefixCacheReset
    from harness.orchestrate.servers import StartedServer

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
    s = _HttpSearch(a, scn, say, progress, signals)
    s.start()
    verification: list[cap.Probe] = []
    try:
        found = cap.search_capacity(s.probe, s.search, a.confirm_runs)
        if found.answer is not None and a.verify:
            verification = [
                s.probe(found.answer, "verify"),
                s.probe(found.answer * VERIFY_OVERLOAD, "verify"),
            ]
    except Interrupted as exc:  # no answer: what finished, the run cut short, exit 130/143
        return interrupted_report(a, scn.name, s.finished, s.search, s.cut, s.kind, exc.stop)
    finally:
        if s.server is not None:
            s.server.stop()
    return _report(a, scn.name, a.slos, found, verification, s.kind, s.target)


class _HttpSearch:
    """The search over HTTP under way: the server it started (if any), the probe sizer, the
    rate search, and every probe judged so far. `probe` is what `cap.search_capacity` calls."""

    def __init__(
        self,
        a: CapacityRequest,
        scn: Scenario,
        say: Callable[[str], None],
        progress: SearchProgress | None,
        signals: CommandStop | None,
    ) -> None:
        from harness.orchestrate.run import WarnOnce
        from harness.orchestrate.virtual_capacity import probe_form

        self.a, self.scn, self.say, self.progress, self.signals = a, scn, say, progress, signals
        self.warn = WarnOnce()  # the probes' warnings (a refused ignore_eos...) once, not per probe
        self.form = probe_form(scn)
        self.measured = list(self.form.measured)
        self.server: StartedServer | None = None
        self.target, self.model = a.target, a.model
        self.kind: str | None = None  # the started server's target kind (None: as resolved)
        self.resetter: PrefixCacheReset | None = None
        self.sizer = cap.ProbeSizer(a.probe_s, a.max_probe_s)
        self.count = 0
        self.search = cap.RateSearch(a.start_rate, a.max_rate, a.tolerance, a.max_probes)
        self.confirms = 0
        self.tightest_ms = min(s.limit_ms for s in a.slos if s.limit_ms is not None)
        self.finished: list[cap.Probe] = []  # every probe judged so far, for an interrupted search
        self.cut: dict[str, Any] = {}  # the run in progress, not judged yet

    def start(self) -> None:
        """The simulator started when no target is given; the prefix-cache reset set up."""
        a, scn = self.a, self.scn
        if self.target is None and scn.target.url is None:
            from harness.orchestrate.servers import start_simulator

            self.server = server = start_simulator(scn.sim, scn.path, a.out / "server.log")
            self.target, self.kind = server.base_url, server.target_kind
            self.model = a.model or server.model
            self.say(f"capacity: started {server.description}")
        if a.reset_prefix_cache:
            from harness.orchestrate.prefix_reset import PrefixCacheReset

            where = self.target or _target_url(a, scn)
            if where is None:
                self.say("--reset-prefix-cache: no target URL to reset; the probes run as they are")
            else:
                self.resetter = PrefixCacheReset(where, self.say)

    def probe(self, rate: float, label: str) -> cap.Probe:
        """One probe judged, run again when the harness itself was short of CPU, and longer
        when it fell short only of served-vs-offered."""
        say, max_probe_s = self.say, self.a.max_probe_s
        duration = self.sizer.duration_s(rate)
        if label != "probe":
            duration = max(duration, self.a.confirm_s)
        p = self._probe_once(rate, label, duration)
        if not p.verdict.passed and p.detail.get("suspect"):
            say(
                f"  the harness itself was short of CPU (client late by {p.detail['client_lag_ms']:.0f} ms, simulator "
                f"behind its model by {p.detail.get('simulator_behind_s', 0.0):.2f} s): running it again"
            )
            p = self._probe_once(rate, label, duration)
        for _ in range(cap.LONGER_RETRIES):
            if duration >= max_probe_s or not cap.worth_a_longer_run(p.verdict, p.part):
                break
            duration = min(2 * duration, max_probe_s)
            say(
                f"  short only of served-vs-offered: running it again for {duration:g}s (a slow fill-up or a slow runaway?)"
            )
            p = self._probe_once(rate, label, duration)
        self.sizer.observe(rate, p.part, p.verdict.passed)
        self.finished.append(p)
        self.cut.clear()
        return p

    def _probe_once(self, rate: float, label: str, duration: float) -> cap.Probe:
        """One run, shown on the progress view and said when judged."""
        progress = self.progress
        if progress is not None:
            nxt = self.search.next_rate()
            progress.start_run(
                label,
                rate,
                duration,
                self.search,
                self.confirms,
                self.sizer.duration_s(nxt or rate),
            )
        try:
            p = self._run(rate, label, duration)
        finally:
            if progress is not None:
                progress.end_run()
        if label == "confirm":
            self.confirms += 1
        _say_probe(self.say, p)
        return p

    def _run(self, rate: float, label: str, duration: float) -> cap.Probe:
        """The probe's `run` at `rate` for `duration`, written to the output folder, judged on
        its steady part."""
        from harness.orchestrate.probe_monitor import ProbeMonitor

        path = self.a.out / f"{self.count:02d}-{label}-rate={rate:.4g}.json"
        # Each run its own seed: repeated prompts would come back from the server's prefix cache
        # (vLLM's, llama.cpp's, the simulator's) and make every probe after the first look faster.
        seed = self.scn.seed + self.count
        self.count += 1
        e2e_p99_s = self.sizer.e2e_p99_s or 0.0
        progress = self.progress
        monitor = ProbeMonitor(
            rate,
            self.measured,
            self.scn.phases[self.measured[0]].name,
            span_s=None if self.form.traces else duration,  # a trace: its own
            drain_limit_s=max(MIN_DRAIN_S, 3 * e2e_p99_s),
            on_sample=progress.sample if progress is not None else None,
        )
        lost0 = _sim_lost_s(self.server.base_url) if self.server is not None else 0.0
        reset = self.resetter.reset() if self.resetter is not None else None
        self.cut.update(kind=label, rate=rate, result=path.name)
        grace = max(MIN_GRACE_S, 2 * e2e_p99_s)
        self._measure(rate, label, duration, path, seed, grace, monitor, reset)
        detail: dict[str, Any] = {"duration_s": duration, "seed": seed, "result": path.name}
        if reset is not None:
            detail["prefix_cache_reset"] = reset
        verdict, part = self._judge(rate, path)
        self._suspect(detail, path, duration, lost0)
        if monitor.evidence is not None:
            detail["early_stop"] = monitor.evidence.as_dict()
        return cap.Probe(rate, label, verdict, part, detail)

    def _measure(
        self,
        rate: float,
        label: str,
        duration: float,
        path: Path,
        seed: int,
        grace: float,
        monitor: Any,
        reset: str | None,
    ) -> None:
        """The run itself, as `run` does less its report and the result's path on stdout.
        Raises RunAborted when it stopped before it measured anything."""
        from harness.orchestrate.run import RunArgs, measure
        from harness.record.journal import journal_path_for

        a, signals = self.a, self.signals
        try:
            with signals.deferred() if signals is not None else contextlib.nullcontext():
                measure(
                    RunArgs(
                        scenario=a.scenario,
                        target=self.target,
                        model=self.model,
                        endpoint=a.endpoint,
                        out=str(path),
                        sets=a.sets,
                        adapt=self.form.at(rate, duration),
                        quiet=True,
                        settings=a.settings,
                        config=a.config,
                        grace_s=grace,
                        seed=seed,
                        prefix_cache_reset=reset,
                    ),
                    server=self.server,
                    monitor=monitor,
                    warn=self.warn,
                    stop=signals,
                )
        except RunAborted as exc:
            jp = journal_path_for(path)  # claimed (created empty) before the run starts
            if not jp.is_file() or jp.stat().st_size == 0:  # it stopped before it measured
                raise RunAborted(f"the probe at {rate:.4g} req/s could not run: {exc}") from None
            self.say(f"  {label} at {rate:.4g} req/s: {exc}")

    def _judge(self, rate: float, path: Path) -> tuple[cap.Verdict, SteadyPart]:
        """(the verdict, the steady part) of the probe's journal. Raises RunAborted when it
        ended before its measured phases ran."""
        from harness.record.journal import journal_path_for, read_journal

        measured = self.measured
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
        return cap.judge(part, self.a.slos, stop), part

    def _suspect(self, detail: dict[str, Any], path: Path, duration: float, lost0: float) -> None:
        """The harness's own lateness in `detail`, `suspect` when it, not the server, was late:
        the client behind its schedule, or the simulator behind its model."""
        client = load_result(path)["client"] if path.is_file() else {}
        lag_ms = cap.client_lag_ms(client)  # wall time, as the probe is judged (its stamps)
        detail["client_lag_ms"] = lag_ms
        if lag_ms > SUSPECT_LAG_SHARE * self.tightest_ms:  # the harness, not the server, was late
            detail["suspect"] = True
        if self.server is not None:
            behind = _sim_lost_s(self.server.base_url) - lost0
            detail["simulator_behind_s"] = behind
            if behind > SUSPECT_SIM_BEHIND_SHARE * duration:
                detail["suspect"] = True


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
