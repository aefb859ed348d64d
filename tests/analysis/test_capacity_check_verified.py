"""The real-server capacity tests' judgement (tests/integration/capacity_runs.check_verified) on
the figures of a CI run (2026-12-06, llama.cpp, 8261d92): the service-rate cap from a probe at
4 req/s held the answer at 2 though 2.378 passed, and the verification at 1.3x then passed too.
The check takes that only as the command's own 'not verified', exit 1."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.capacity_runs import check_verified, held_by_the_cap

LIMIT = 1500.0  # ttft_p90, ms


def _run(rate: float, served: float, ttft: float, kind: str = "probe") -> dict[str, Any]:
    behind = served < 0.6 * rate
    checks = (["served"] if behind else []) + (["ttft_p90"] if ttft > LIMIT else [])
    return {
        "kind": kind,
        "rate": rate,
        "passed": not checks,
        "failed_checks": checks,
        "ratios": {"ttft_p90": ttft / LIMIT},
        "values": {"ttft_p90": ttft},
        "steady": {
            "served_requests_per_s": served,
            "served_deficit_requests": 14 if behind else 0,
            "served_allowance_requests": 13,
        },
    }


def _report(above_ttft: float) -> dict[str, Any]:
    probes = [_run(2.0, 2.174, 316.8), _run(4.0, 2.133, 9715.8), _run(2.828, 2.407, 2664.1)]
    probes += [_run(2.378, 2.427, 1237.2), _run(2.0, 2.078, 393.8, "confirm")]
    above = _run(2.6, 2.523, above_ttft, "verify")
    return {
        "answer_requests_per_s": 2.0,
        "service_rate_cap_requests_per_s": 2.133,
        "probes": probes,
        "speed_change": None,
        "verification": {"verified": not above["passed"], "runs": [_run(2.0, 2.2, 316.0), above]},
    }


def test_an_answer_the_cap_held_down_is_taken_only_as_not_verified_exit_1() -> None:
    report = _report(above_ttft=869.3)
    assert held_by_the_cap(report) is not None
    check_verified(1, report)
    with pytest.raises(AssertionError):
        check_verified(0, report)


def test_without_a_pass_above_the_answer_the_1_3x_run_must_fail() -> None:
    report = _report(above_ttft=869.3)
    report["probes"][3] = _run(2.378, 2.2, 1800.0)  # the probe above the answer failed
    assert held_by_the_cap(report) is None
    with pytest.raises(AssertionError):
        check_verified(1, report)
    report = _report(above_ttft=1900.0)  # 1.3x failed: verified
    check_verified(0, report)
