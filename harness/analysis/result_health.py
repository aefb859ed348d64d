"""The client's health in a result: warnings when the harness itself was late (send lag,
event-loop lag, CPU), when the built-in simulator fell behind its own model, and what a
prediction left out. Judged in wall time (`wall_stats`), whatever the simulator's speedup.
`harness.analysis.result.build_result` puts them under `client.warnings`."""

from __future__ import annotations

from typing import Any

SEND_LAG_WARN_MS = 5.0  # p99 above this: the client sent late; its numbers are suspect
LOOP_LAG_WARN_MS = 10.0  # p99 event-loop lag above this delays every stamp
CPU_WARN_SHARE = 0.9  # one core this busy leaves no headroom for the read loop
SIM_BEHIND_WARN_SHARE = 0.01  # simulator behind its model by more than 1 % of the run
WARN_MIN_SAMPLES = 100  # below this many samples a lag warning needs p90 over the limit too


def late(stats: dict[str, Any], limit_ms: float) -> bool:
    """p99 over the limit, and more than one hiccup: with under WARN_MIN_SAMPLES samples p99 is
    the maximum, so p90 must be over the limit too (one GC pause is not an overloaded client)."""
    p99 = stats.get("p99")
    if p99 is None or p99 <= limit_ms:
        return False
    p90 = stats.get("p90")
    return (stats.get("count") or 0) >= WARN_MIN_SAMPLES or (p90 is not None and p90 > limit_ms)


def wall_stats(stats: dict[str, Any], k: float) -> dict[str, Any]:
    """A latency row in model time (x k, harness.analysis.clock) back in wall time: the client's
    health (send lag) is the wall's, whatever the simulator's speedup."""
    return {
        key: (v / k if isinstance(v, int | float) and key != "count" else v)
        for key, v in stats.items()
    }


def client_warnings(
    phases: list[dict[str, Any]],
    header: dict[str, Any],
    loop_lag: dict[str, Any],
    cpu_share: float | None,
    k: float = 1.0,
) -> list[str]:
    """The client's health (k: model time per wall time; send lag is judged in wall time)."""
    out = []
    for ph, spec in zip(phases, header["phases"], strict=False):
        if spec.get("max_concurrency") or spec.get("closed"):
            continue
        lag = wall_stats(ph["latency_ms"]["send_lag"], k)
        p99 = lag["p99"]
        if late(lag, SEND_LAG_WARN_MS):
            out.append(
                f"phase {ph['name']!r}: send lag p99 {p99:.1f} ms > {SEND_LAG_WARN_MS:g} ms: the "
                "client sent late, so latencies from sent understate the server's; use "
                "--workers N or fewer streams per process"
            )
    if late(loop_lag, LOOP_LAG_WARN_MS):
        out.append(
            f"event-loop lag p99 {loop_lag['p99']:.1f} ms > {LOOP_LAG_WARN_MS:g} ms: token "
            "stamps may be late; use --workers N or fewer streams per process"
        )
    if cpu_share is not None and cpu_share > CPU_WARN_SHARE:
        out.append(
            f"the client used {cpu_share:.0%} of a CPU core: it may be the bottleneck; "
            "use --workers N"
        )
    return out


def simulator_warnings(sim: dict[str, Any] | None, wall_s: float) -> list[str]:
    """The built-in simulator shares this machine's CPUs; when starved it falls behind its own
    model and every simulated latency is inflated by the lost time."""
    if not sim or wall_s <= 0:
        return []
    behind = float(sim.get("behind_model_s", 0.0))
    if behind <= SIM_BEHIND_WARN_SHARE * wall_s:
        return []
    return [
        f"the simulator fell {behind:.2f} s behind its own model ({behind / wall_s:.1%} of the run): it "
        "was short of CPU, so its latencies are inflated; stop other programs, or lower the load"
    ]


def prediction_warnings(prediction: Any) -> list[str]:
    """What a prediction's virtual run left out of the scenario (harness.orchestrate.predict)."""
    if not isinstance(prediction, dict):
        return []
    return [f"prediction leaves out {what}" for what in prediction.get("left_out") or []]
