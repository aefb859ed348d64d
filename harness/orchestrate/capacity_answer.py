"""What a capacity search answers: the request it was asked (`CapacityRequest`), and
`capacity.json` with the lines the command prints (`CapacityAnswer`), from the search's probes
(`report`) -- or, for a search a signal stopped, the probes that finished and no answer
(`interrupted_report`, harness.orchestrate.stopping).

An answer is a lower bound whenever no probe broke above it (the search ran out of probes, or
reached --max-rate), or when every failure above it may be the harness's own lateness; the text
says so ("at least R req/s") and capacity.json sets `lower_bound`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.analysis import capacity as cap
from harness.analysis.numbers import plural
from harness.orchestrate.stopping import CommandStop
from harness.safe_write import write_file

VERIFY_OVERLOAD = 1.3  # --verify: a run at the answer, and one at 1.3x it that must fail


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


def unbroken_reason(
    answer: float, search: cap.RateSearch, max_rate: float, service_rate_cap: float | None
) -> str | None:
    """Why an answer is only a lower bound because no probe broke above it (None: one did, or
    the rate the server served when it fell behind bounds it): the search reached --max-rate,
    or ran out of probes before any rate above the answer failed."""
    if search.hi is not None:
        return None
    if service_rate_cap is not None and answer >= search.max_rate:
        return None  # the search was held below the service rate it measured
    if answer >= max_rate:
        return f"--max-rate {max_rate:g} passed; nothing above it was probed: raise --max-rate"
    return "no probe above it; raise --max-probes"


def report(
    a: CapacityRequest,
    name: str,
    slos: list[cap.Slo],
    found: cap.SearchResult,
    verification: list[cap.Probe],
    kind: str | None,
    target: str | None,
) -> CapacityAnswer:
    """capacity.json (written to `a.out`) and the lines the command prints, from the search's
    probes and the verification runs (`--verify`)."""
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
        "tolerance": a.tolerance,
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
        text += _answered(a, found, answer, kind, report)
    in_order = [*found.probes, *verification]
    change = cap.speed_change(in_order)
    report["speed_change"] = _speed_change_entry(change, in_order)
    if verification:
        ok = verification[0].verdict.passed and not verification[1].verdict.passed
        report["verification"] = {"verified": ok, "runs": [_probe_entry(p) for p in verification]}
        text += _verification_lines(verification, ok)
        status = status or (0 if ok else 1)
    if change is not None:
        text.append(_speed_change_line(change, in_order))
    if kind == "simulator":
        text.append("(simulated server: the capacity of the simulator's model, not of a real GPU)")
    elif kind == "virtual":
        text.append(
            "(the simulator's model on its virtual clock: no HTTP, no client; not a real GPU)"
        )
    path = a.out / "capacity.json"
    write_file(path, orjson.dumps(report, option=orjson.OPT_INDENT_2))  # harness.safe_write
    return CapacityAnswer(report, text, status, path)


def _answered(
    a: CapacityRequest,
    found: cap.SearchResult,
    answer: float,
    kind: str | None,
    report: dict[str, Any],
) -> list[str]:
    """The lines of a search that found an answer (its bracket, binding SLO, margin, whether it
    is only a lower bound, the replicas for --target-load), and their keys in `report`."""
    search = found.search
    at = [p for p in found.probes if p.rate == answer and p.verdict.passed]
    failed = [
        p
        for p in found.probes
        if search.hi is not None and p.rate == search.hi and not p.verdict.passed
    ]
    # Bounded by the service-rate cap, not by a failure at the bracket's rate: the evidence
    # is the probe that fell behind (a gateway's 429s there name error_share as binding).
    capped = cap.service_rate_probe(found.probes) if search.hi is not None and not failed else None
    evidence = failed[-1] if failed else capped
    binding = cap.binding_slo([p.verdict for p in at], evidence.verdict if evidence else None)
    worst = max(p.verdict.ratios[binding] for p in at)
    unbroken = unbroken_reason(answer, search, a.max_rate, found.service_rate_cap)
    confirms = [p for p in at if p.kind == "confirm"]
    text = [
        f"sustainable: at least {answer:.3g} req/s ({unbroken})"
        if unbroken is not None
        else f"sustainable: {answer:.3g} req/s{_failure_text(found, failed, capped)}",
        f"binding SLO {binding}: {worst * 100:.0f}% of its limit ({(1 - worst) * 100:.0f}% margin) over the "
        f"steady part" + (f", confirmed by {len(confirms)} runs" if confirms else ""),
    ]
    if found.service_rate_cap is not None:
        text.append(
            f"service rate: {found.service_rate_cap:.3g} req/s served when the server fell behind "
            "(no answer above it)"
        )
    text += _lateness(a, found, answer, kind, report, at, failed, unbroken)
    report["binding_slo"] = binding
    report["margin"] = 1 - worst
    report["evidence"] = {
        "answer": _probe_entry(at[-1]),
        "failed": _probe_entry(evidence) if evidence else None,
    }
    if a.target_load is not None:
        text.append(_replicas(a, a.target_load, answer, report))
    return text


def _failure_text(
    found: cap.SearchResult, failed: list[cap.Probe], capped: cap.Probe | None
) -> str:
    """What bounds the answer from above: the rate that failed (and how often), or the service
    rate the server fell behind at; "" for none (a lower bound, or held below that rate)."""
    search = found.search
    if search.hi is None:  # a lower bound (`unbroken`), or held below the service rate
        return ""
    if failed:
        runs = sum(p.rate == search.hi for p in found.probes)
        seen = (
            ", seen twice"
            if len(failed) == runs == 2
            else f", failed {len(failed)} of {runs} runs"
            if runs > 1
            else ""
        )
        return f"; fails at {search.hi:.3g} req/s ({failed[-1].verdict.reason}{seen})"
    # set by the service-rate cap, not by a probe that failed there
    return (
        f"; {search.hi:.3g} req/s and above count as failed: above the "
        f"{found.service_rate_cap or 0:.3g} req/s the server served when it fell behind"
        + (f" (at {capped.rate:.3g} req/s: {capped.verdict.reason})" if capped else "")
    )


def _lateness(
    a: CapacityRequest,
    found: cap.SearchResult,
    answer: float,
    kind: str | None,
    report: dict[str, Any],
    at: list[cap.Probe],
    failed: list[cap.Probe],
    unbroken: str | None,
) -> list[str]:
    """`lower_bound` and `unreliable` in `report`, and the line that says why, when no probe
    broke above the answer or the harness's own lateness leaves it open."""
    # A failure measured while the harness was short of CPU (after its rerun) may be the
    # harness's lateness, not the server's: the answer below it is then only a lower bound,
    # unless the pass at the answer was measured so too. A starved run's pass is no firmer
    # than its failures: its served-vs-offered check, over a fill-up the lateness stretched,
    # passed 22.6 req/s against a simulator that serves 17.2 (a full run of 2026-12-03).
    hi = found.search.hi
    late = [p for p in failed if p.detail.get("suspect")]
    all_late = bool(failed) and len(late) == len(failed)
    report["unreliable"] = all_late and all(p.detail.get("suspect") for p in at)
    report["lower_bound"] = unbroken is not None or (all_late and not report["unreliable"])
    if unbroken is not None:
        report["lower_bound_reason"] = unbroken
    if not (report["unreliable"] or (report["lower_bound"] and unbroken is None)):
        return []
    if report["unreliable"]:
        head = (
            f"UNRELIABLE: the runs that passed at {answer:.3g} req/s and failed at "
            f"{hi:.3g} req/s all had"
        )
        tail = "the server may sustain less as well as more"
    else:
        head = f"LOWER BOUND: every run that failed at {hi:.3g} req/s had"
        tail = "the server may sustain more"
    line = _harness_late_line(
        head, tail, late + (at if report["unreliable"] else []), kind, a.expected
    )
    report["notes"] = [*found.notes, line]
    return [line]


def _replicas(a: CapacityRequest, target_load: float, answer: float, report: dict[str, Any]) -> str:
    """`--target-load`: the replicas it takes at the answer less the headroom."""
    headroom = a.headroom
    n = cap.replicas_needed(target_load, answer, headroom)
    report["replicas"] = {
        "target_requests_per_s": target_load,
        "headroom": headroom,
        "replicas": n,
    }
    return (
        f"for {target_load:g} req/s: {plural(n, 'replica')} (each at most {(1 - headroom) * 100:.0f}% of "
        f"{answer:.3g} req/s = {answer * (1 - headroom):.3g} req/s)"
        + ("; from a lower bound: fewer may do" if report["lower_bound"] else "")
    )


def _verification_lines(verification: list[cap.Probe], ok: bool) -> list[str]:
    """`--verify`: a line per run (at the answer, at VERIFY_OVERLOAD x it) and the verdict."""
    text = [
        f"verify at {p.rate:.3g} req/s: {'meets the SLOs' if p.verdict.passed else 'fails'}"
        + (f" ({p.verdict.reason})" if p.verdict.reason else "")
        for p in verification
    ]
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
    return text


def interrupted_report(
    a: CapacityRequest,
    name: str,
    probes: list[cap.Probe],
    search: cap.RateSearch | None,
    cut: dict[str, Any],
    kind: str | None,
    stop: CommandStop,
) -> CapacityAnswer:
    """capacity.json for a search a signal stopped: no answer, the probes that finished (each
    judged on a whole run), the run it cut short (never judged), exit 130 or 143."""
    report: dict[str, Any] = {
        "kind": "capacity",
        "scenario": a.scenario,
        "sets": a.sets,
        "slos": [asdict(s) for s in a.slos],
        "interrupted": stop.name,
        "stop_reason": stop.reason,
        "answer_requests_per_s": None,
        "bracket_so_far": None
        if search is None
        else {"passed": search.lo, "failed": search.hi, "converged": search.converged()},
        "probes": [_probe_entry(p) for p in probes],
        "cut_short": cut or None,
        "target_kind": kind or "http",
        "tolerance": a.tolerance,
        "virtual_estimate_requests_per_s": a.expected,
    }
    text = [
        f"capacity of {name}: INTERRUPTED ({stop.name}) after "
        f"{plural(len(probes), 'finished run')}: no answer (a search cut short answers nothing)"
    ]
    if cut:
        text.append(
            f"the {cut['kind']} at {cut['rate']:.4g} req/s was cut short and is not judged "
            f"(its partial result: {cut['result']})"
        )
    if search is not None and (search.lo is not None or search.hi is not None):
        passed = "none" if search.lo is None else f"{search.lo:.4g} req/s"
        failed = "none" if search.hi is None else f"{search.hi:.4g} req/s"
        text.append(f"so far, not an answer: highest pass {passed}, lowest failure {failed}")
    text.append(
        "capacity has no --resume: run it again"
        + (
            f" (--start-rate {search.lo:.4g} starts where this one stood)"
            if search and search.lo
            else ""
        )
    )
    path = a.out / "capacity.json"
    write_file(path, orjson.dumps(report, option=orjson.OPT_INDENT_2))  # harness.safe_write
    return CapacityAnswer(report, text, stop.status, path)
