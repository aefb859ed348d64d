"""The capacity search run against a live server: each probe a `run` of the scenario at one
rate, judged on its steady part, until the bracket is narrow enough; then confirmed and, with
`verify`, checked at the answer and above it. `harness capacity` parses the command line and
prints; everything between is here.

Each probe is a `run` (same code path) of the scenario with every measured phase's arrival rate
set to the probe rate (a trace: replayed faster or slower); it is judged on its steady part
(`harness.analysis.steady`) and stopped early only by a runaway queue
(`harness.orchestrate.probe_monitor`). Probes are written as results in the output folder, with
`capacity.json` summing up the search: the answer, its bracket and the evidence.

With `reset_prefix_cache` the server's prefix cache is emptied before every probe
(harness.orchestrate.prefix_reset): each probe's result records how that went
(`options.prefix_cache_reset`), as does its entry in capacity.json.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.analysis import capacity as cap
from harness.analysis.numbers import plural
from harness.analysis.result import load_result
from harness.analysis.steady import steady_part
from harness.errors import RunAborted
from harness.orchestrate.capacity_progress import SearchProgress
from harness.workload.scenario import Scenario

VERIFY_OVERLOAD = 1.3  # --verify: a run at the answer, and one at 1.3x it that must fail
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


@dataclass(frozen=True)
class CapacityRequest:
    """What `harness capacity` asks for, checked and in units."""

    scenario: str
    sets: list[str]
    slos: list[cap.Slo]
    out: Path
    probe_s: float
    max_probe_s: float
    confirm_s: float
    tolerance: float
    headroom: float
    confirm_runs: int
    max_probes: int
    start_rate: float
    max_rate: float
    verify: bool
    target_load: float | None = None
    target: str | None = None  # None: the scenario's, else the built-in simulator
    model: str | None = None
    endpoint: str | None = None
    settings: str | None = None
    config: str | None = None
    expected: float | None = None  # the virtual-clock estimate of the answer, when there is one
    reset_prefix_cache: bool = False  # empty the server's prefix cache before every probe


@dataclass(frozen=True)
class CapacityAnswer:
    report: dict[str, Any]  # capacity.json
    text: list[str]  # what the command prints
    status: int  # 0: an answer (verified when asked); 1: none, or not verified
    path: Path  # where capacity.json was written


def _harness_late_line(
    head: str, tail: str, late: list[cap.Probe], kind: str | None, expected: float | None
) -> str:
    """The report's line for an answer the harness's own lateness leaves open: how late it was in
    the runs `late`, and what to do about it."""
    simulator = kind == "simulator"
    lag = max(cap.detail_number(p, "client_lag_ms") for p in late)
    behind = max(cap.detail_number(p, "simulator_behind_s") for p in late)
    return (
        f"{head} the harness short of CPU (client late by up to {lag:.0f} ms"
        + (f", the simulator behind its model by up to {behind:.2f} s" if simulator else "")
        + f"): {tail}; free CPUs"
        + (" or lower the simulator's speedup" if simulator else "")
        + (f" (virtual-clock estimate: {expected:.3g} req/s)" if expected is not None else "")
    )


def _probe_entry(p: cap.Probe) -> dict[str, Any]:
    v = p.verdict
    return {
        "kind": p.kind,
        "rate": p.rate,
        "passed": v.passed,
        "reason": v.reason,
        "failed_checks": list(v.failed_checks),
        "values": v.values,
        "ratios": v.ratios,
        "binding": v.binding,
        "steady": p.part.describe(),
        **p.detail,
    }


def _speed_change_entry(change: cap.SpeedChange | None, runs: list[cap.Probe]) -> Any:
    """capacity.json's `speed_change`: the two runs that disagree about the server's speed, on
    which check, with their figures for it."""
    if change is None:
        return None
    unit = "served_requests_per_s" if change.check == cap.SERVED else "value_ms"

    def which(i: int, value: float) -> dict[str, Any]:
        return {"run": i, "kind": runs[i].kind, "rate": runs[i].rate, unit: value}

    return {
        "check": change.check,
        "ratio": change.ratio,
        "slowed": change.slowed,
        "fast": which(change.fast, change.fast_value),
        "slow": which(change.slow, change.slow_value),
    }


def _speed_change_line(change: cap.SpeedChange, runs: list[cap.Probe]) -> str:
    """The text line that says the runs disagree about the server's speed, with the runs."""
    fast, slow = runs[change.fast], runs[change.slow]
    when = "later" if change.slowed else "earlier"
    if change.check == cap.SERVED:
        return (
            f"UNSTABLE SERVER: its speed changed during the command by {change.ratio - 1:.0%}, more "
            f"than the runs' own noise (at most {cap.SPEED_CHANGE - 1:.0%}): the {fast.kind} at "
            f"{fast.rate:.3g} req/s served {change.fast_value:.3g} req/s, the {slow.kind} at "
            f"{slow.rate:.3g} req/s fell behind at {change.slow_value:.3g} req/s {when}; an answer "
            "holds only at the speed it was measured at (another tenant, GPU clocks, a shared machine)"
        )
    return (
        f"UNSTABLE SERVER: the {fast.kind} at {fast.rate:.3g} req/s met {change.check} at "
        f"{change.fast_value:.0f} ms, the {slow.kind} at {slow.rate:.3g} req/s missed it at "
        f"{change.slow_value:.0f} ms {when} ({change.ratio:.2f}x as high, at no higher rate): "
        "the server's speed changed during the command, or its latency at this load varies more "
        "than one run resolves; an answer holds only as far as its runs agree"
    )


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
) -> CapacityAnswer:
    """Run the search (probe results and capacity.json in `a.out`), showing it on `progress`.
    Raises RunAborted when a probe ends before its measured phases ran."""
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
        try:
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
            )
        except RunAborted as exc:
            if not journal_path_for(path).is_file():  # it stopped before it measured anything
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
    try:
        found = cap.search_capacity(probe, search, a.confirm_runs)
        if found.answer is not None and a.verify:
            verification = [
                probe(found.answer, "verify"),
                probe(found.answer * VERIFY_OVERLOAD, "verify"),
            ]
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


def _report(
    a: CapacityRequest,
    name: str,
    slos: list[cap.Slo],
    found: cap.SearchResult,
    verification: list[cap.Probe],
    kind: str | None,
    target: str | None,
) -> CapacityAnswer:
    target_load, headroom, tol, out = a.target_load, a.headroom, a.tolerance, a.out
    search, answer = found.search, found.answer
    report: dict[str, Any] = {
        "kind": "capacity",
        "scenario": a.scenario,
        "sets": a.sets,
        "slos": [asdict(s) for s in slos],
        "answer_requests_per_s": answer,
        "bracket": [search.lo, search.hi],
        "bracket_requests_per_s": {"passed": search.lo, "failed": search.hi},
        "service_rate_cap_requests_per_s": found.service_rate_cap,
        "probes": [_probe_entry(p) for p in found.probes],
        "notes": found.notes,
        "target_kind": kind or "http",
        "tolerance": tol,
        "virtual_estimate_requests_per_s": a.expected,
        "lower_bound": False,  # set below when the failure above the answer may be the harness's
        "unreliable": False,  # ... and when the pass at the answer may be too (either way, then)
    }
    where = {"simulator": "simulator", "virtual": "simulator, virtual clock"}.get(
        kind or "", str(target)
    )
    text = [
        "capacity of "
        + name
        + f" ({where}) at "
        + ", ".join(f"{s.name} <= {s.limit_text()}" for s in slos)
    ]
    status = 0
    if answer is None:
        probed = [p.rate for p in found.probes]
        text.append(
            "no rate met the SLOs"
            + (f" (lowest probed {min(probed):.3g} req/s failed)" if probed else "")
        )
        status = 1
    else:
        at = [p for p in found.probes if p.rate == answer and p.verdict.passed]
        failed = [
            p
            for p in found.probes
            if search.hi is not None and p.rate == search.hi and not p.verdict.passed
        ]
        # Bounded by the service-rate cap, not by a failure at the bracket's rate: the evidence
        # is the probe that fell behind (a gateway's 429s there name error_share as binding).
        capped = (
            cap.service_rate_probe(found.probes) if search.hi is not None and not failed else None
        )
        evidence = failed[-1] if failed else capped
        binding = cap.binding_slo([p.verdict for p in at], evidence.verdict if evidence else None)
        worst = max(p.verdict.ratios[binding] for p in at)
        if search.hi is None:
            hi = f"; not broken up to --max-rate {a.max_rate:g}"
        elif failed:
            runs = sum(p.rate == search.hi for p in found.probes)
            seen = (
                ", seen twice"
                if len(failed) == runs == 2
                else f", failed {len(failed)} of {runs} runs"
                if runs > 1
                else ""
            )
            hi = f"; fails at {search.hi:.3g} req/s ({failed[-1].verdict.reason}{seen})"
        else:  # set by the service-rate cap, not by a probe that failed there
            hi = (
                f"; {search.hi:.3g} req/s and above count as failed: above the "
                f"{found.service_rate_cap or 0:.3g} req/s the server served when it fell behind"
                + (f" (at {capped.rate:.3g} req/s: {capped.verdict.reason})" if capped else "")
            )
        confirms = [p for p in at if p.kind == "confirm"]
        text.append(f"sustainable: {answer:.3g} req/s{hi}")
        text.append(
            f"binding SLO {binding}: {worst * 100:.0f}% of its limit ({(1 - worst) * 100:.0f}% margin) over the "
            f"steady part" + (f", confirmed by {len(confirms)} runs" if confirms else "")
        )
        if found.service_rate_cap is not None:
            text.append(
                f"service rate: {found.service_rate_cap:.3g} req/s served when the server fell behind "
                "(no answer above it)"
            )
        # A failure measured while the harness was short of CPU (after its rerun) may be the
        # harness's lateness, not the server's: the answer below it is then only a lower bound,
        # unless the pass at the answer was measured so too. A starved run's pass is no firmer
        # than its failures: its served-vs-offered check, over a fill-up the lateness stretched,
        # passed 22.6 req/s against a simulator that serves 17.2 (a full run of 2026-12-03).
        late = [p for p in failed if p.detail.get("suspect")]
        all_late = bool(failed) and len(late) == len(failed)
        report["unreliable"] = all_late and all(p.detail.get("suspect") for p in at)
        report["lower_bound"] = all_late and not report["unreliable"]
        if report["unreliable"] or report["lower_bound"]:
            if report["unreliable"]:
                head = (
                    f"UNRELIABLE: the runs that passed at {answer:.3g} req/s and failed at "
                    f"{search.hi:.3g} req/s all had"
                )
                tail = "the server may sustain less as well as more"
            else:
                head = f"LOWER BOUND: every run that failed at {search.hi:.3g} req/s had"
                tail = "the server may sustain more"
            line = _harness_late_line(
                head, tail, late + (at if report["unreliable"] else []), kind, a.expected
            )
            report["notes"] = [*found.notes, line]
            text.append(line)
        report["binding_slo"] = binding
        report["margin"] = 1 - worst
        report["evidence"] = {
            "answer": _probe_entry(at[-1]),
            "failed": _probe_entry(evidence) if evidence else None,
        }
        if target_load is not None:
            n = cap.replicas_needed(target_load, answer, headroom)
            report["replicas"] = {
                "target_requests_per_s": target_load,
                "headroom": headroom,
                "replicas": n,
            }
            text.append(
                f"for {target_load:g} req/s: {plural(n, 'replica')} (each at most {(1 - headroom) * 100:.0f}% of "
                f"{answer:.3g} req/s = {answer * (1 - headroom):.3g} req/s)"
            )
    in_order = [*found.probes, *verification]
    change = cap.speed_change(in_order)
    report["speed_change"] = _speed_change_entry(change, in_order)
    if verification:
        ok = verification[0].verdict.passed and not verification[1].verdict.passed
        report["verification"] = {"verified": ok, "runs": [_probe_entry(p) for p in verification]}
        for p in verification:
            text.append(
                f"verify at {p.rate:.3g} req/s: {'meets the SLOs' if p.verdict.passed else 'fails'}"
                + (f" ({p.verdict.reason})" if p.verdict.reason else "")
            )
        text.append(
            "verified: the answer holds and 1.3x it does not"
            if ok
            else "NOT verified: "
            + (
                "the run at the answer failed"
                if not verification[0].verdict.passed
                else f"{VERIFY_OVERLOAD:g}x the answer still met the SLOs"
            )
        )
        status = status or (0 if ok else 1)
    if change is not None:
        text.append(_speed_change_line(change, in_order))
    if kind == "simulator":
        text.append("(simulated server: the capacity of the simulator's model, not of a real GPU)")
    elif kind == "virtual":
        text.append(
            "(the simulator's model on its virtual clock: no HTTP, no client; not a real GPU)"
        )
    path = out / "capacity.json"
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return CapacityAnswer(report, text, status, path)


__all__ = [
    "CapacityAnswer",
    "CapacityRequest",
    "Estimate",
    "VERIFY_OVERLOAD",
    "find_capacity",
    "virtual_answer",
    "virtual_search",
]
