"""A missed SLO that only the simulator's lag explains is "not judged (health)", exit 0;
one it cannot explain stays a miss, exit 99 (harness.analysis.slo_verdict, issue 45)."""

from __future__ import annotations

from typing import Any

from harness.analysis import compare as cmp
from harness.analysis import slo_verdict as sv
from harness.analysis.result import build_result
from harness.orchestrate.predict import simulate
from harness.orchestrate.scenario import load_scenario

BEHIND = (
    "the simulator fell 1.00 s behind its own model (5.0% of the run): it was short of CPU, so "
    "its latencies are inflated; stop other programs, or lower the load"
)


def _run() -> tuple[dict[str, Any], cmp.Side]:
    scn = {
        "name": "slo-health",
        "seed": 4,
        "workload": {"prompt_tokens": {"dist": "fixed", "value": 200},
                     "output_tokens": {"dist": "fixed", "value": 64}, "ignore_eos": True},
        "phases": [{"name": "main", "requests": 40, "arrival": {"process": "poisson", "rate": 4}}],
        "sim": {"gpu": "L4"},
    }  # fmt: skip
    j = simulate(load_scenario(scn, [], 4)).journal()
    result = build_result(j, None)
    k = float(result.get("clock", {}).get("speedup", 1.0))
    # the model fell a second behind three seconds into the run: every token made after
    # took a second longer
    j.end["simulator"] = {
        **j.end["simulator"],
        "lag_ns": [[int(3e9 / k), 0], [int(4e9 / k), int(1e9 / k)]],
    }
    return result, cmp.side_from_journal(result, j)


def _with_slo(result: dict[str, Any], value: float, limit: float, warned: bool) -> dict[str, Any]:
    out = dict(result)
    out["summary"] = {**result["summary"], "slo": [
        {"name": "e2e_p50", "limit_ms": limit, "kind": "aggregate", "value_ms": value,
         "pass": value <= limit}]}  # fmt: skip
    out["client"] = {**result["client"], "warnings": [BEHIND] if warned else []}
    return out


def test_a_miss_the_lag_explains_is_not_judged_and_one_it_cannot_is_a_miss() -> None:
    result, side = _run()
    assert side.fixed is not None
    shown = sv._figure(side.values["e2e"], "p50")
    model = sv._figure(side.fixed.values["e2e"], "p50")
    assert shown is not None and model is not None and model < shown - 100
    # the limit lies between the model's figure and the stamps': the lag explains the miss
    between = _with_slo(result, shown, (shown + model) / 2, warned=True)
    assert sv.health_explained(between, side) == {"e2e_p50": model}
    assert sv.run_status(0, between, True, sv.health_explained(between, side)) == 0
    # the same miss without the simulator's warning: a miss
    quiet = _with_slo(result, shown, (shown + model) / 2, warned=False)
    assert sv.health_explained(quiet, side) == {}
    assert sv.run_status(0, quiet, True, {}) == sv.SLO_FAIL_EXIT
    # a limit the model misses too: the lag cannot explain it
    below = _with_slo(result, shown, model * 0.9, warned=True)
    assert sv.health_explained(below, side) == {}
    assert sv.run_status(0, below, True, {}) == sv.SLO_FAIL_EXIT
    note = sv.health_note(between, sv.health_explained(between, side))
    assert note.startswith("SLO not judged (health): e2e_p50 ") and "exit 0" in note
    assert sv.run_status(1, between, True, {"e2e_p50": model}) == 1  # an error stays an error
