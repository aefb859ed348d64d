"""capacity: the rate search, early stop, replicas; converging on a simulator of known capacity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.analysis import capacity as cap
from harness.cli import main
from harness.errors import UsageError
from harness.sim.settings import SimSettings


def _search(true_capacity: float, start: float = 1.0, tol: float = 0.05) -> cap.RateSearch:
    s = cap.RateSearch(start, 1e6, tol)
    while (r := s.next_rate()) is not None:
        s.record(r, r <= true_capacity)
    return s


@pytest.mark.parametrize("true_capacity", [0.3, 1.0, 7.5, 33.0, 900.0])
def test_search_brackets_the_capacity_within_tolerance(true_capacity: float) -> None:
    s = _search(true_capacity)
    assert s.lo is not None and s.hi is not None
    assert s.lo <= true_capacity < s.hi and s.hi / s.lo - 1 <= 0.05
    assert s.probes <= cap.DEFAULT_MAX_PROBES


def test_noisy_pass_above_a_failure_is_not_trusted() -> None:
    s = cap.RateSearch(1.0, 100.0)
    s.record(4.0, False)
    s.record(8.0, True)       # noise: above a failure
    assert s.lo is None and s.hi == 4.0
    s.record(2.0, True)
    s.record(2.0, False)      # a failed confirmation at the answer: search below it
    assert s.hi == 2.0 and s.lo is None


def test_search_stops_at_max_rate_when_nothing_fails() -> None:
    s = cap.RateSearch(1.0, 5.0)
    while (r := s.next_rate()) is not None:
        s.record(r, True)
    assert s.lo == 5.0 and s.hi is None


@pytest.mark.parametrize(("target", "capacity", "headroom", "want"), [
    (50, 10, 0.2, 7),     # 50 / 8 = 6.25 -> 7
    (40, 10, 0.2, 5),     # exactly 5 at 80 %
    (1, 10, 0.2, 1),      # never fewer than one
    (100, 10, 0.0, 10),   # no headroom
])
def test_replicas(target: float, capacity: float, headroom: float, want: int) -> None:
    assert cap.replicas_needed(target, capacity, headroom) == want


def test_queue_watch_stops_only_a_runaway_queue() -> None:
    steady = cap.QueueWatch(10.0)
    assert all(steady.add(t * 0.25, int(t * 2.5), 8) is None for t in range(40))
    runaway = cap.QueueWatch(10.0)
    reasons = [runaway.add(t * 0.25, t, 2 + t * 2) for t in range(40)]   # serves 4/s of 10/s
    assert any(r and "queue grows without bound" in r for r in reasons)


def test_parse_slo() -> None:
    assert cap.parse_slo("ttft_p99=2s") == cap.Slo("ttft_p99", "ttft", "p99", 2000.0)
    assert cap.parse_slo("itl_p99=80ms").limit_ms == 80.0
    with pytest.raises(UsageError, match="METRIC_STAT=DURATION"):
        cap.parse_slo("latency=2s")
    with pytest.raises(UsageError, match="--slo ttft_p99"):
        cap.parse_slo("ttft_p99=2")


SCENARIO = """
name = "capsim"
seed = 9
[workload]
prompt_tokens = { dist = "fixed", value = 32 }
output_tokens = { dist = "fixed", value = 32 }
[[phases]]
name = "main"
duration = "3s"
arrival = { process = "poisson", rate = 5.0 }
[sim]
gpu = "L4"
max_num_seqs = 8
speedup = 10.0
"""


@pytest.mark.slow
def test_capacity_converges_on_the_simulators_known_capacity(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # The model's capacity: with every request 32 tokens long and the running set capped at 8,
    # the server finishes 8 requests per 32 decode steps; a step of 8 short sequences takes the
    # roofline's decode time (memory-bound: the weights are read once per step).
    r = SimSettings(gpu="L4", max_num_seqs=8).resolved()
    step_s = r.roofline.decode_step_s(8, 48) / 10.0          # speedup 10
    capacity = 8 / (32 * step_s)                              # ~37 req/s
    s = tmp_path / "s.toml"
    s.write_text(SCENARIO)
    rc = main(["capacity", str(s), "--slo", "ttft_p99=300ms", "--probe-duration", "2.5s",
               "--confirm-runs", "1", "--confirm-duration", "3s", "--tolerance", "10%", "--start-rate", "16",
               "--target-load", "100rps", "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 0
    rep = json.loads((tmp_path / "o" / "capacity.json").read_text())
    answer = rep["answer_requests_per_s"]
    assert 0.6 * capacity <= answer <= 1.1 * capacity, (answer, capacity)
    assert rep["binding_slo"] == "ttft_p99"
    assert rep["replicas"]["replicas"] == math.ceil(100 / (answer * 0.8))
    assert any(not p["passed"] for p in rep["probes"])        # it found where the SLO breaks
    assert all((tmp_path / "o" / p["result"]).is_file() for p in rep["probes"])
    assert "sustainable:" in capsys.readouterr().out


def test_capacity_refuses_closed_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = tmp_path / "c.toml"
    s.write_text(SCENARIO.replace('{ process = "poisson", rate = 5.0 }', '{ process = "closed", users = 4 }'))
    assert main(["capacity", str(s), "--slo", "ttft_p99=1s"]) == 2
    assert "open-loop process with a rate" in capsys.readouterr().err
