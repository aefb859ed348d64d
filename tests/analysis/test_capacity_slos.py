"""harness.analysis.capacity.slos_from: the SLOs `capacity` and `plan` search under."""

from __future__ import annotations

import pytest

from harness.analysis import capacity as cap
from harness.catalogue import SloLimit
from harness.errors import UsageError

SCENARIO = [
    SloLimit("ttft_p99", "ttft", "p99", 2.0),
    SloLimit("e2e", "e2e", None, 30.0),  # a per-request limit (goodput): not searched under
]


def test_given_slos_win_over_the_scenario_and_error_share_is_added() -> None:
    # --slo itl_p90=50ms: the scenario's ttft_p99 is not used; error_share at the default 1 %
    slos = cap.slos_from(["itl_p90=50ms"], SCENARIO)
    assert [(s.metric, s.stat, s.limit_ms) for s in slos[:1]] == [("itl", "p90", 50.0)]
    assert [s.metric for s in slos] == ["itl", cap.ERROR_SHARE]
    assert slos[1] == cap.error_share_slo(cap.DEFAULT_ERROR_SHARE)


def test_the_scenario_aggregate_slos_when_none_given() -> None:
    # no --slo: the scenario's ttft p99 <= 2 s (in ms), the per-request e2e left out
    slos = cap.slos_from([], SCENARIO, 0.05)
    assert [(s.metric, s.stat, s.limit_ms) for s in slos[:1]] == [("ttft", "p99", 2000.0)]
    assert slos[1:] == [cap.error_share_slo(0.05)]


@pytest.mark.parametrize(
    "given, scenario",
    [
        ([], []),  # nothing at all
        ([], SCENARIO[1:]),  # only a per-request limit
        (["error_share=2%"], SCENARIO),  # only the error share given: the scenario is not read
    ],
)
def test_no_latency_limit_is_refused(given: list[str], scenario: list[SloLimit]) -> None:
    with pytest.raises(UsageError, match="give at least one --slo"):
        cap.slos_from(given, scenario)
