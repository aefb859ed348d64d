"""compare's health rule sample by sample (issue 45: a gate that passes on a loaded runner): a
warning holds a verdict back when what it measured could explain the verdict, and only then.
The simulator's lost time is taken out of exactly the samples it was inside; event-loop lag is
set against the other side's; a late send moves a figure by the requests that changed places
and the load it held back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from harness.analysis import compare as cmp
from harness.analysis import compare_health as health
from harness.analysis import compare_verdict as cv
from harness.analysis.clock import model_columns
from harness.analysis.compare_health import Suspect
from harness.analysis.result import build_result
from harness.orchestrate.predict import simulate
from harness.orchestrate.scenario import load_scenario

SIM_WARNING = f"{health.SIM} in c.json (behind by 2,000.0 ms: moves a latency by at most 4 s)"
LOOP_WARNING = f"{health.LOOP} in c.json (loop lag p99 30.0 ms: moves a latency by at most 60 ms)"


def _side(values_ms: np.ndarray, lag_ms: np.ndarray | None = None) -> cmp.Side:
    n = len(values_ms)
    s = cmp.Side(n=n, window_s=10.0)
    s.values = {m: values_ms.copy() for m in cmp.PER_REQUEST}
    s.itl_ms = np.repeat(values_ms / 10, 5)
    s.itl_owner = np.repeat(np.arange(n), 5)
    s.tokens_in_window = np.full(n, 10.0)
    s.done_in_window = np.ones(n)
    s.good_in_window = np.ones(n)
    s.loop_lag_ms = np.zeros(0) if lag_ms is None else lag_ms
    return s


def _ttft_p50(base: cmp.Side, cand: cmp.Side, suspects: list[Suspect]) -> dict[str, Any]:
    rows = cmp.compare_sides(base, cand, {"ttft_p50": 0.1}, b=100, suspect={"ttft_p50": suspects})
    return next(r for r in rows if r["metric"] == "ttft_p50")


def test_the_lag_clock_interpolates_the_simulators_log_in_model_time() -> None:
    t0 = 10**12
    ms = 1_000_000
    points = [[t0 + 100 * ms, 0], [t0 + 150 * ms, 50 * ms], [t0 + 300 * ms, 50 * ms],
              [t0 + 310 * ms, 60 * ms], [t0 + 410 * ms, 40 * ms]]  # fmt: skip
    lag = health.lag_clock(points, t0, 2.0)
    # model ns (x2) in, model ns out: before, inside a gap, between, catching up, after
    got = lag(np.array([0, 100, 125, 150, 200, 305, 310, 360, 5000]) * 2.0 * ms) / (2.0 * ms)
    assert got.tolist() == pytest.approx([0, 0, 25, 50, 50, 55, 60, 50, 40])
    assert health.lag_clock([], t0, 2.0)(np.array([5.0])).tolist() == [0.0]


def test_the_time_lost_inside_each_latency_is_taken_out_exactly() -> None:
    scn = {
        "name": "lost",
        "seed": 3,
        "workload": {"prompt_tokens": {"dist": "fixed", "value": 200},
                     "output_tokens": {"dist": "fixed", "value": 32}, "ignore_eos": True},
        "phases": [{"name": "main", "requests": 30, "arrival": {"process": "poisson", "rate": 3}}],
        "sim": {"gpu": "L4"},
    }  # fmt: skip
    j = simulate(load_scenario(scn, [], 3)).journal()
    result = build_result(j, None)
    plain = cmp.side_from_journal(result, j)
    assert plain.fixed is None  # no gaps logged: nothing to take out
    k = float(result.get("clock", {}).get("speedup", 1.0))
    gap = (4.0e9 / k, 4.3e9 / k)  # 300 ms of model time lost 4 s into the run
    lag = [[int(gap[0]), 0], [int(gap[1]), int(gap[1] - gap[0])]]  # no catching up
    j.end["simulator"] = {**j.end["simulator"], "lag_ns": lag}
    side = cmp.side_from_journal(result, j)
    assert side.fixed is not None
    # per request: the time lost before its first token (the model's clock lagged by that
    # much when the token was made; the request entered the model at its send), model time
    cols = model_columns(j)
    rows = np.flatnonzero(np.isin(cols.phase, [0]) & ~cols.retried)
    first = cols.first()[rows].astype(np.float64)
    start = cols.sent[rows].astype(np.float64)
    lo, hi = gap[0] * k, gap[1] * k
    before_first = np.clip(np.minimum(first, hi) - lo, 0, None) / 1e6
    took = side.values["ttft"] - side.fixed.values["ttft"]
    assert took == pytest.approx(before_first, abs=1e-5)
    assert before_first.max() > 0 and (before_first == 0).any()  # before the gap: nothing
    assert ((start > hi) & np.isclose(before_first, 300.0)).any()  # sent after: all of it
    # TPOT: only the time lost between its first and last token
    last = cols.last()[rows].astype(np.float64)
    inside = np.clip(np.minimum(last, hi) - np.maximum(first, lo), 0, None) / 1e6
    tpot = side.values["tpot"] - side.fixed.values["tpot"]
    assert tpot * (cols.output_tokens[rows] - 1) == pytest.approx(inside, abs=1e-4)
    assert inside.max() > 0


def test_a_simulator_behind_holds_a_verdict_back_only_when_its_lost_time_could_explain_it() -> None:
    rng = np.random.default_rng(5)
    base_ms = rng.lognormal(0, 0.2, size=3000) * 100
    base = _side(base_ms)
    warned = [Suspect(SIM_WARNING, "candidate", "worse", 4000.0, None, "c.json")]
    # the candidate is 20 % slower on its stamps; all of it was time lost inside its samples
    explained = _side(base_ms * 1.2)
    explained.fixed = _side(base_ms * 1.001)
    held = _ttft_p50(base, explained, warned)
    assert held["verdict"] == "INCONCLUSIVE" and held.get("held_back")
    assert "lost inside these samples" in held["reason"] and "+16.6%" in held["reason"]
    # the same warning, its lost time outside the samples (between requests): the model's own
    # figures are the stamps' and the regression stands
    unexplained = _side(base_ms * 1.2)
    unexplained.fixed = _side(base_ms * 1.2)
    assert _ttft_p50(base, unexplained, warned)["verdict"] == "REGRESSION"
    # the run-wide worst case (every stamp up to 4 s late) would have held it back
    assert _ttft_p50(base, _side(base_ms * 1.2), warned)["verdict"] == "INCONCLUSIVE"
    # a baseline slowed by its lost time hides a regression: a pass is held back
    slow_base = _side(base_ms * 1.2)
    slow_base.fixed = _side(base_ms)
    on_base = [Suspect(SIM_WARNING.replace("c.json", "b.json"), "baseline", "worse", 4000.0)]
    passed = _ttft_p50(slow_base, _side(base_ms * 1.21), on_base)
    assert passed["verdict"] == "INCONCLUSIVE" and passed.get("held_back")


def test_loop_lag_moves_a_difference_only_as_far_as_the_two_sides_lags_differ() -> None:
    rng = np.random.default_rng(6)
    x = rng.lognormal(0, 0.2, size=3000) * 100  # the server's TTFT, ms
    lag = rng.exponential(8.0, size=2000)  # p99 ~37 ms: far past the 10 ms warning
    warned = [Suspect(LOOP_WARNING, "candidate", "either", 60.0, None, "c.json")]

    def stamped(scale: float, lag_ms: np.ndarray) -> cmp.Side:  # each stamp late by a lag draw
        return _side(x * scale + rng.choice(lag_ms, size=len(x)), lag_ms)

    same_law = _ttft_p50(stamped(1.0, lag), stamped(1.015, rng.exponential(8.0, size=2000)), warned)
    assert same_law["verdict"] in cv.PASSES, same_law
    # the old bound (every stamp up to the p99 late) held this +1.5 % back
    assert _ttft_p50(_side(x), _side(x * 1.015), warned)["verdict"] == "INCONCLUSIVE"
    # lag only the candidate had explains its +17 %: the server's figures were the same
    quiet = rng.exponential(0.2, size=2000)
    big = rng.exponential(25.0, size=2000)
    alone = _ttft_p50(stamped(1.0, quiet), stamped(1.0, big), [])
    assert alone["verdict"] == "REGRESSION" and alone["change"] > 0.12  # without the warning
    held = _ttft_p50(stamped(1.0, quiet), stamped(1.0, big), warned)
    assert held["verdict"] == "INCONCLUSIVE" and "the same noise on both sides" in held["reason"]
    # ... but not a server 30 % slower, nor a +2,534 % change
    for scale in (1.3, 26.34):
        far = _ttft_p50(stamped(1.0, quiet), stamped(scale, big), warned)
        assert far["verdict"] == "REGRESSION", far


def test_a_late_send_moves_a_percentile_by_the_requests_that_changed_places() -> None:
    assert health.overtaken_share(np.array([0, 1, 2, 3]), np.array([0, 1, 2, 3])) == 0.0
    # request 1 was sent after requests 2 and 3, planned later: it and one that overtook it
    assert health.overtaken_share(np.array([0, 1, 2, 3]), np.array([0, 5, 2, 3])) == 0.5
    rng = np.random.default_rng(7)
    base_ms = rng.lognormal(0, 0.2, size=3000) * 1000
    late = [Suspect(f"{health.SEND} in c.json (send lag p99 30 ms)", "candidate", "better", 60.0)]
    cand = _side(base_ms * 1.015)
    cand.send_lag_ms = np.full(3000, 2.0)  # p99 2 ms against a ~1 s E2E: 0.2 % of the load
    cand.overtaken = 0.001
    assert _ttft_p50(_side(base_ms), cand, late)["verdict"] in cv.PASSES
    cand.overtaken = 0.3  # a third of the requests changed places: the p20..p80 spread
    held = _ttft_p50(_side(base_ms), cand, late)
    assert held["verdict"] == "INCONCLUSIVE" and "changed places" in held["reason"]


def test_a_correction_moves_the_interval_both_ends_the_same_way() -> None:
    row = {"better": "lower", "baseline": 100.0, "candidate": 120.0, "change": 0.2}
    fix = Suspect("sim", "candidate", "worse", measured=(0.15, -0.15))  # the model's is 15 % lower
    lo_ch, hi_ch, lo, hi = health.widened(row, 0.1, 0.3, [fix])
    assert lo_ch == pytest.approx(hi_ch) == pytest.approx(1.2 * 0.85 - 1)
    assert lo == pytest.approx(1.1 * 0.85 - 1) and hi == pytest.approx(1.3 * 0.85 - 1)
