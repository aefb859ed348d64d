"""The validation's comparisons by regime (harness.orchestrate.validation_regimes) and the stored
80 % intervals that predict and plan read (harness.sim.validation.intervals): the rule, the
interval arithmetic on a hand-made set, and the shape and coverage of the stored table (which
`python -m harness.orchestrate.validation --write` writes; the slow test in test_validation.py
recomputes it whole)."""

from __future__ import annotations

import math

import pytest

from harness.orchestrate import validation_regimes as vr
from harness.orchestrate.validation import load_points
from harness.sim.validation import intervals as iv
from harness.sim.validation.errors import CAPACITY_FIGURE

C = vr.Comparison


@pytest.mark.parametrize(
    ("kwargs", "regime"),
    [
        ({"users": 1}, iv.ONE_USER),  # a closed loop of one user
        ({"batch": 1}, iv.ONE_USER),  # a batch of one
        ({"users": 4}, iv.LIGHT),  # four users: still a light load
        ({"users": 5}, iv.LOADED),  # five: loaded
        ({"users": 256, "max_num_seqs": 256}, iv.SATURATED),  # as many users as seats
        ({"rate_per_s": math.inf}, iv.SATURATED),  # everything at once
        ({"batch": 8}, iv.SATURATED),  # an offline batch
        ({"rate_per_s": 10.0, "served_per_s": 8.0}, iv.SATURATED),  # served 80 % of the rate
        ({"rate_per_s": 2.0, "served_per_s": 2.0, "e2e_s": 2.0}, iv.LIGHT),  # 4 in flight
        ({"rate_per_s": 2.0, "served_per_s": 2.0, "e2e_s": 2.5}, iv.LOADED),  # 5 in flight
        ({"rate_per_s": 2.0}, iv.LOADED),  # no E2E to say it is light: loaded
        ({"rate_per_s": 100.0, "e2e_s": 3.0, "max_num_seqs": 256}, iv.SATURATED),  # 300 in flight
    ],
)
def test_the_regime_rule(kwargs: dict[str, float], regime: str) -> None:
    assert iv.regime_of(**kwargs) == regime  # type: ignore[arg-type]


def test_every_published_point_has_a_regime_and_each_regime_has_points() -> None:
    points, _ = load_points()
    seen = {vr.point_regime(p) for p in points}
    assert seen <= set(iv.REGIMES)
    assert {iv.ONE_USER, iv.LIGHT, iv.LOADED, iv.SATURATED} <= seen
    # a capacity check is in its own regime: open load held to SLOs, or a closed-loop point
    krai = next(p for p in points if p.raw.get("slo_ttft_p99_ms"))
    sweep = next(p for p in points if int(p.raw.get("max_concurrency") or 0) > 1)
    assert vr.row_regime(krai, CAPACITY_FIGURE) == iv.CAPACITY_SLO
    assert vr.row_regime(sweep, CAPACITY_FIGURE) == iv.CAPACITY_CLOSED
    assert vr.row_regime(krai, "ttft_p50_ms") == vr.point_regime(krai)


def _set() -> list[vr.Comparison]:
    # three publishers, one regime and figure; ratios 0.5 .. 1.5 and one far outlier
    out = []
    for pub, ratios in (("a", (0.9, 1.0, 1.1)), ("b", (0.8, 1.2, 1.0)), ("c", (0.5, 5.0))):
        out += [C(pub, iv.LOADED, "tpot_p50_ms", "H100", r) for r in ratios]
    return out


def test_intervals_are_the_10th_and_90th_percentile_of_the_ratios() -> None:
    table = vr.interval_table(_set())
    band, per, ratios = table[(iv.LOADED, "tpot_p50_ms")]
    assert ratios == sorted(ratios) and band.n == 8
    # numpy's default quantile of [0.5, 0.8, 0.9, 1.0, 1.0, 1.1, 1.2, 5.0]
    assert band.p10 == pytest.approx(0.71)
    assert band.p50 == pytest.approx(1.0)
    assert band.p90 == pytest.approx(2.34)
    assert per["H100"] == band
    # a predicted 100 ms: published between 100 / 2.34 and 100 / 0.71 in 80 % of cases
    lo, hi = band.published_range(100.0)
    assert lo == pytest.approx(100 / 2.34) and hi == pytest.approx(100 / 0.71)


def test_coverage_judges_each_publisher_by_the_others_interval() -> None:
    # each ratio against the 10th-90th band of the other two publishers' ratios
    got = vr.coverage(_set())
    inside, judged = got["tpot_p50_ms"]
    assert judged == 8  # every publisher has >= 3 others' ratios
    expected = 0
    comps = _set()
    for c in comps:
        others = sorted(o.ratio for o in comps if o.publisher != c.publisher)
        expected += iv.quantile(others, 0.1) <= c.ratio <= iv.quantile(others, 0.9)
    assert inside == expected < judged  # the outlier 5.0 falls outside a+b's band


def test_the_toml_round_trips_through_the_reader(tmp_path: object) -> None:
    import tomllib

    text = vr.intervals_toml(_set(), "python -m harness.orchestrate.validation --write")
    table = tomllib.loads(text)
    got = iv.interval(iv.LOADED, "tpot_p50_ms", "H100", table)
    assert got is not None and got.n == 8 and got.p90 == pytest.approx(2.34, rel=1e-3)
    assert iv.interval(iv.ONE_USER, "tpot_p50_ms", None, table) is None  # no points: none
    q = iv.ratio_quantile(iv.LOADED, "tpot_p50_ms", 0.5, table)
    assert q is not None and q[0] == pytest.approx(1.0) and q[1] == 8
    assert table["coverage"]["tpot_p50_ms"]["judged"] == 8


def test_the_stored_table_is_consistent_and_covers_the_bar_figures() -> None:
    table = iv.load_intervals()
    assert "validation --write" in iv.INTERVALS.read_text().splitlines()[1]
    regimes = table["regime"]
    assert set(regimes) <= set(iv.REGIMES)
    for figures in regimes.values():
        for entry in figures.values():
            ratios = sorted(entry["ratios"])
            assert entry["n"] == len(ratios) >= 1
            assert entry["p10"] <= entry["p50"] <= entry["p90"]
            assert entry["p10"] == pytest.approx(iv.quantile(ratios, 0.1), rel=2e-3)
            assert entry["p90"] == pytest.approx(iv.quantile(ratios, 0.9), rel=2e-3)
            assert sum(c["n"] for c in entry.get("class", {}).values()) == entry["n"]
    for fig in vr.BAR_FIGURES:  # each figure of the bar is judged on held-out publishers
        assert table["coverage"][fig]["judged"] >= 5
    # the capacity plan sizes replicas with has held-out points in its own regime
    assert regimes[iv.CAPACITY_SLO][CAPACITY_FIGURE]["n"] >= iv.MIN_POINTS


@pytest.mark.parametrize(
    ("text", "share"),
    [("0.8", 0.8), ("80%", 0.8), ("p90", 0.9), ("P50", 0.5)],
)
def test_confidence_is_a_share_a_percentage_or_pnn(text: str, share: float) -> None:
    assert iv.parse_confidence(text) == pytest.approx(share)


@pytest.mark.parametrize("text", ["1.5", "p99", "0.2", "x", ""])
def test_confidence_outside_half_to_95_percent_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        iv.parse_confidence(text)
