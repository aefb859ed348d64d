"""An answer no probe broke above is a lower bound (issue 44): a search that ran out of probes,
or reached --max-rate, says "at least R req/s" and writes `lower_bound: true`, on the virtual
clock as over HTTP (one report), and a plan built on such a capacity marks it in its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.analysis import capacity as cap
from harness.analysis.plan_report import render_plan_text
from harness.analysis.steady import SteadyPart
from harness.orchestrate.capacity_answer import CapacityRequest, report, unbroken_reason
from harness.orchestrate.planner import Config, evaluate
from harness.orchestrate.virtual_capacity import virtual_capacity

SLOS = [cap.parse_slo("ttft_p99=1s")]

SCENARIO = """
name = "lb"
seed = 3
[workload]
prompt_tokens = { dist = "fixed", value = 64 }
output_tokens = { dist = "fixed", value = 16 }
[[phases]]
name = "main"
duration = "5s"
arrival = { process = "poisson", rate = 1.0 }
[sim]
gpu = "H200"
"""


def _request(out: Path, max_probes: int, max_rate: float = 100_000.0) -> CapacityRequest:
    return CapacityRequest(
        "s.toml", [], cap.with_error_share(SLOS), out, 5.0, 60.0, 15.0, 0.05, 0.2, 0,
        max_probes, 1.0, max_rate, False,
    )  # fmt: skip


def _probe(rate: float, ttft_p99_ms: float = 100.0) -> cap.Probe:
    window_s = 10.0
    part = SteadyPart(
        span_ns=(0, int(window_s * 1e9)),
        window_ns=(0, int(window_s * 1e9)),
        fill_s=0.0,
        rows=np.zeros(0, bool),
        requests=int(rate * window_s),
        offered_requests_per_s=rate,
        served_requests_per_s=rate,
        served_deficit_requests=0.0,
        served_allowance_requests=5.0,
        little_in_flight=1.0,
        arrival_cv2=1.0,
        error_share=0.0,
        latency_ms={"ttft": {"p99": ttft_p99_ms}, "e2e": {"p99": 300.0, "mean": 200.0}},
    )
    return cap.Probe(rate, "probe", cap.judge(part, cap.with_error_share(SLOS)), part, {})


def test_the_rule_one_break_above_the_answer_makes_it_an_answer() -> None:
    search = cap.RateSearch(4.0, 100.0, max_probes=3)
    for r in (4.0, 8.0, 16.0):
        search.record(r, True)
    assert search.next_rate() is None  # out of probes, nothing failed
    assert "raise --max-probes" in str(unbroken_reason(16.0, search, 100.0, None))
    search.record(32.0, False)
    assert unbroken_reason(16.0, search, 100.0, None) is None  # a failure above bounds it
    top = cap.RateSearch(50.0, 100.0, max_probes=9)
    top.record(50.0, True)
    top.record(100.0, True)
    assert "raise --max-rate" in str(unbroken_reason(100.0, top, 100.0, None))
    # held below the rate the server served when it fell behind: bounded, not a lower bound
    held = cap.RateSearch(4.0, 100.0, max_probes=9)
    held.reject_above(12.0)
    held.record(12.0, True)
    assert unbroken_reason(12.0, held, 100.0, 12.0) is None


def test_a_search_out_of_probes_answers_at_least(tmp_path: Path) -> None:
    """The issue's case: --max-probes 3 from 4 req/s passed 4, 8 and 16 and printed
    "sustainable: 16 req/s; not broken up to --max-rate 100000" with lower_bound false."""
    search = cap.RateSearch(4.0, 100_000.0, max_probes=3)
    probes = [_probe(r) for r in (4.0, 8.0, 16.0)]
    for p in probes:
        search.record(p.rate, True)
    found = cap.SearchResult(search.lo, search, probes, None)
    answer = report(_request(tmp_path, 3), "lb", SLOS, found, [], "simulator", None)
    assert answer.report["lower_bound"] is True and answer.report["answer_requests_per_s"] == 16.0
    assert "raise --max-probes" in answer.report["lower_bound_reason"]
    line = next(t for t in answer.text if t.startswith("sustainable"))
    assert line == "sustainable: at least 16 req/s (no probe above it; raise --max-probes)"
    assert not any("not broken" in t for t in answer.text)


def test_a_search_that_broke_above_is_no_lower_bound(tmp_path: Path) -> None:
    search = cap.RateSearch(4.0, 100_000.0, max_probes=3)
    probes = [_probe(4.0), _probe(8.0)]
    for p in probes:
        search.record(p.rate, True)
    failed = _probe(16.0, ttft_p99_ms=1500.0)
    search.record(16.0, False)
    found = cap.SearchResult(search.lo, search, [*probes, failed], None)
    answer = report(_request(tmp_path, 3), "lb", SLOS, found, [], "simulator", None)
    assert answer.report["lower_bound"] is False
    assert next(t for t in answer.text if t.startswith("sustainable")).startswith(
        "sustainable: 8 req/s; fails at 16 req/s"
    )


@pytest.mark.virtual
def test_the_virtual_search_out_of_probes_is_a_lower_bound(tmp_path: Path) -> None:
    """capacity --virtual: 2 probes from 1 req/s pass 1 and 2 on an H200 (its knee is far
    above): the answer is at least 2, never a capacity of 2."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    found = virtual_capacity(str(path), SLOS, max_probes=2, start_rate=1.0)
    assert [p.rate for p in found.probes] == [1.0, 2.0] and found.search.hi is None
    answer = report(_request(tmp_path, 2), "lb", SLOS, found, [], "virtual", None)
    assert answer.report["lower_bound"] is True
    assert "sustainable: at least 2 req/s" in "\n".join(answer.text)


@pytest.mark.virtual
def test_a_plan_on_a_lower_bound_says_so_in_its_table(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    opt = evaluate(
        str(path), Config("H200", None, 1), cap.with_error_share(SLOS), 1.0, 0.2, {}, max_probes=2
    )
    assert opt.feasible and opt.capacity_lower_bound and opt.capacity_requests_per_s == 2.0
    doc: dict[str, Any] = {
        "scenario": "s.toml",
        "target_requests_per_s": 1.0,
        "model": opt.model,
        "slos": [{"name": "ttft_p99", "limit": "1 s"}],
        "headroom": 0.2,
        "options": [opt.as_dict()],
        "calibration": {},
    }
    text = render_plan_text(doc)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("1 "))
    assert ">=2" in row, text
    assert ">= a lower bound" in text
    doc["options"][0]["capacity_lower_bound"] = False
    assert ">=" not in render_plan_text(doc)
