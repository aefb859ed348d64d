"""`plan --verify`: the top pick's per-replica load run through the real HTTP path against the
simulator configured as the pick, and judged like a capacity probe (`verify`), once more when
the harness itself was late rather than the pick."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis import capacity as cap
from harness.errors import RunAborted
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.stopping import CommandStop

VERIFY_BEHIND_SHARE = 0.01  # the simulator behind its model by 1 % of the run: the machine was busy


def verify(
    path: str, top: Any, slos: list[cap.Slo], model: str, signals: CommandStop
) -> dict[str, Any]:
    """The top pick's per-replica load, run through the real HTTP path against the simulator
    configured as the pick, judged like a capacity probe; run once more when the harness itself
    was late (a busy machine, not the configuration): the simulator fell behind its model, or
    the SLOs it missed it missed by no more than the harness's own lateness. A second such run
    is `inconclusive`: not passed, and said to be the machine's doing, not the pick's."""
    out = _verify_once(path, top, slos, model, signals)
    if out.get("suspect") or out.get("inconclusive"):
        out = _verify_once(path, top, slos, model, signals) | {"first_try": out}
    return out


def _verify_once(
    path: str, top: Any, slos: list[cap.Slo], model: str, signals: CommandStop
) -> dict[str, Any]:
    import tempfile

    sets = top.config.sets(model)
    scn = load_scenario(path, sets)
    rate = top.per_replica_requests_per_s
    head = {"config": top.config.label(), "per_replica_requests_per_s": rate}
    with tempfile.TemporaryDirectory(prefix="harness-plan-verify-") as tmp:
        out = Path(tmp) / "verify.json"
        try:
            log = _run_pick(path, scn, sets, rate, out, signals)
        except RunAborted as exc:
            return head | {
                "passed": False,
                "inconclusive": False,
                "reason": str(exc),
                "values": {},
                "virtual": top.values,
            }
        return head | _judge_pick(scn, out, log, slos) | {"virtual": top.values}


def _run_pick(
    path: str, scn: Any, sets: list[str], rate: float, out: Path, signals: CommandStop
) -> Path:
    """The pick's per-replica load run over HTTP against a simulator configured as the pick,
    started here (a run left to resolve its own target would take a URL from the scenario,
    settings.json or config.toml and load that server); the simulator's log. RunAborted if the
    run could not finish; Interrupted after a signal."""
    from harness.orchestrate.run import RunArgs, run_command
    from harness.orchestrate.servers import start_simulator
    from harness.orchestrate.virtual_capacity import probe_form

    server = start_simulator(scn.sim, scn.path, out.parent / "server.log")
    try:
        with signals.deferred():  # stopped at once, never judged: Interrupted after it
            run_command(
                RunArgs(
                    scenario=path,
                    target=server.base_url,
                    model=server.model,
                    out=str(out),
                    sets=sets,
                    adapt=probe_form(scn).at(rate, None),
                    quiet=True,
                ),
                server=server,
                stop=signals,
            )
    finally:
        server.stop()  # its own account of the run (how far it fell behind) is then in its log
    return Path(server.handle.log_path)


def _judge_pick(scn: Any, out: Path, log: Path, slos: list[cap.Slo]) -> dict[str, Any]:
    """The run's steady part judged like a capacity probe, and whether the harness itself was
    late (the simulator behind its model, or misses within the harness's own lateness)."""
    from harness.analysis.result import load_result
    from harness.analysis.steady import steady_part
    from harness.orchestrate.virtual_capacity import measured_phases
    from harness.record.journal import journal_path_for, read_journal
    from harness.server.launcher import sim_summary

    j = read_journal(journal_path_for(out))
    measured = measured_phases(scn)
    end = j.end or {}
    starts, ends = end.get("phase_starts_ns") or [0], end.get("phase_ends_ns") or [0]
    part = steady_part(
        j.columns(),
        (int(starts[measured[0]]), int(ends[min(measured[-1], len(ends) - 1)])),
        measured,
    )
    verdict = cap.judge(part, slos, None if end.get("complete") else str(end.get("stop_reason")))
    sim = sim_summary(log) or {}
    behind = float(sim.get("behind_model_s") or 0.0)
    wall = float(end.get("end_ns") or 0) / 1e9
    # the harness's own lateness, wall ms as the verdict's figures (the journal's stamps): the
    # client's send or loop lag and the simulator's late wake-ups both delay what it stamps
    client = load_result(out)["client"] if out.is_file() else {}
    late_ms = cap.client_lag_ms(client) + float(sim.get("wake_late_p99_ms") or 0.0)
    suspect = wall > 0 and behind > VERIFY_BEHIND_SHARE * wall
    inconclusive = not verdict.passed and (suspect or cap.within_lateness(verdict, slos, late_ms))
    reason = verdict.reason
    if inconclusive:
        reason += (
            f" (inconclusive: the harness itself was late, {late_ms:.0f} ms p99, the simulator "
            f"{behind:.2f} s behind its model: a busy machine, not the pick)"
        )
    return {
        "passed": verdict.passed,
        "inconclusive": inconclusive,
        "reason": reason,
        "values": verdict.values,
        "steady": part.describe(),
        "simulator_behind_s": behind,
        "harness_late_ms": late_ms,
        "suspect": suspect,
    }
