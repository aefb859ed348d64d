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


def test_a_comparison_takes_its_predictions_regime_and_capacity_keeps_its_own() -> None:
    # predict picks an interval by the regime of its own prediction, so a comparison is
    # classified by the same rule: a run the server kept up with that the model saturated on is a
    # "saturated" comparison (BY_PUBLISHED: the published run's regime, the rule before)
    from harness.orchestrate.validation_points import Row

    points, _ = load_points()
    p = next(x for x in points if x.id == "inferencesim-h100-llama2-7b-tp1-general-20rps")
    krai = next(x for x in points if x.raw.get("slo_ttft_p99_ms"))
    assert vr.point_regime(p) == iv.LOADED
    rows = [
        Row(p, "ttft_p50_ms", 51.1, 415_719.0, regime=iv.SATURATED),
        Row(krai, CAPACITY_FIGURE, 73.0, 54.0, regime=iv.SATURATED),
    ]
    owner = {p.source: "inference-sim", krai.source: "Krai"}
    by_prediction = vr.comparisons(rows, owner)
    assert [c.regime for c in by_prediction] == [iv.SATURATED, iv.CAPACITY_SLO]
    by_published = vr.comparisons(rows, owner, by=vr.BY_PUBLISHED)
    assert [c.regime for c in by_published] == [iv.LOADED, iv.CAPACITY_SLO]
    with pytest.raises(ValueError, match="by: expected"):
        vr.comparisons(rows, owner, by="both")


def _set() -> list[vr.Comparison]:
    # three publishers, one regime and figure; ratios 0.5 .. 1.5 and one far outlier
    out = []
    for pub, ratios in (("a", (0.9, 1.0, 1.1)), ("b", (0.8, 1.2, 1.0)), ("c", (0.5, 5.0))):
        out += [C(pub, iv.LOADED, "tpot_p50_ms", "H100", r) for r in ratios]
    return out


def test_a_new_publishers_interval_carries_the_spread_between_publishers() -> None:
    # a: log-ratios 0.0, 0.2 (mean 0.1); b: 0.4, 0.6 (mean 0.5). Within variance, pooled:
    # 4 x 0.1^2 / (4 - 2) = 0.02; the means' variance (0.2^2 + 0.2^2) / 1 = 0.08; between =
    # 0.08 - 0.02 x (1/2 + 1/2) / 2 = 0.07; a new publisher's sd = sqrt(0.07 + 0.02 + 0.08 / 2)
    # about the center 0.3, read with Student's t at 1 degree of freedom (3.078 at 0.9)
    comps = [
        C(pub, iv.LOADED, "tpot_p50_ms", "H100", math.exp(x))
        for pub, xs in (("a", (0.0, 0.2)), ("b", (0.4, 0.6)))
        for x in xs
    ]
    g = vr.interval_table(comps)[(iv.LOADED, "tpot_p50_ms")]
    s = g.spread
    assert s is not None and s.publishers == 2 and s.n == 4
    assert s.center == pytest.approx(0.3)
    assert s.within_sd == pytest.approx(math.sqrt(0.02))
    assert s.between_sd == pytest.approx(math.sqrt(0.07))
    assert s.sd == pytest.approx(math.sqrt(0.13))
    band = g.band
    assert band is not None and band.publishers == 2
    assert band.p90 == pytest.approx(math.exp(0.3 + 3.0777 * math.sqrt(0.13)), rel=1e-4)
    assert band.p10 == pytest.approx(math.exp(0.3 - 3.0777 * math.sqrt(0.13)), rel=1e-4)
    # far wider than the pooled ratios' own 10th..90th percentile, which a third publisher
    # like these two would fall outside of half the time
    pooled = sorted(c.ratio for c in comps)
    assert band.p10 < 0.5 * iv.quantile(pooled, 0.1) and band.p90 > 2 * iv.quantile(pooled, 0.9)
    # a predicted 100 ms: published between 100 / p90 and 100 / p10 in 80 % of cases
    lo, hi = band.published_range(100.0)
    assert lo == pytest.approx(100 / band.p90) and hi == pytest.approx(100 / band.p10)
    # one publisher says nothing of the next: no interval
    one = vr.interval_table(comps[:2])[(iv.LOADED, "tpot_p50_ms")]
    assert one.spread is None and one.band is None


@pytest.mark.parametrize(
    ("share", "df", "t"),
    [(0.9, 1, 3.0777), (0.9, 2, 1.8856), (0.9, 5, 1.4759), (0.95, 1, 6.3138), (0.8, 4, 0.9410)],
)
def test_student_t_quantiles(share: float, df: int, t: float) -> None:
    assert iv.t_quantile(share, df) == pytest.approx(t, abs=2e-4)
    assert iv.t_quantile(1 - share, df) == pytest.approx(-t, abs=2e-4)


def test_coverage_judges_each_publisher_by_the_others_interval() -> None:
    # each ratio against the new-publisher interval of the other two publishers' ratios
    comps = _set()
    got = vr.coverage(comps)
    inside, judged = got["tpot_p50_ms"]
    assert judged == 8  # every publisher has >= 3 others' ratios from 2 publishers
    expected = 0
    for c in comps:
        others: dict[str, list[float]] = {}
        for o in comps:
            if o.publisher != c.publisher:
                others.setdefault(o.publisher, []).append(o.ratio)
        s = iv.publisher_spread(others)
        assert s is not None
        expected += s.quantile(0.1) <= c.ratio <= s.quantile(0.9)
    assert inside == expected < judged  # the outlier 5.0 falls outside a+b's band
    # two publishers: leaving one out leaves one, which states no interval: none judged
    assert "tpot_p50_ms" not in vr.coverage([c for c in comps if c.publisher != "c"])


def test_the_toml_round_trips_through_the_reader(tmp_path: object) -> None:
    import tomllib

    text = vr.intervals_toml(_set(), "python -m harness.orchestrate.validation --write")
    table = tomllib.loads(text)
    spread = vr.interval_table(_set())[(iv.LOADED, "tpot_p50_ms")].spread
    assert spread is not None
    got = iv.interval(iv.LOADED, "tpot_p50_ms", "H100", table)
    assert got is not None and got.n == 8 and got.publishers == 3
    assert got.p90 == pytest.approx(spread.quantile(0.9), rel=1e-3)
    assert iv.interval(iv.ONE_USER, "tpot_p50_ms", None, table) is None  # no points: none
    q = iv.ratio_quantile(iv.LOADED, "tpot_p50_ms", 0.8, table)
    assert q is not None and q[0] == pytest.approx(spread.quantile(0.8), rel=1e-3) and q[1] == 8
    assert table["coverage"]["tpot_p50_ms"]["judged"] == 8
    # one publisher's comparisons: stored (n, ratios), stating no interval
    one = tomllib.loads(vr.intervals_toml(_set()[:3], "x"))
    assert iv.interval(iv.LOADED, "tpot_p50_ms", None, one) is None
    assert iv.ratio_quantile(iv.LOADED, "tpot_p50_ms", 0.8, one) is None


def test_the_stored_table_is_consistent_and_covers_the_bar_figures() -> None:
    table = iv.load_intervals()
    assert "validation --write" in iv.INTERVALS.read_text().splitlines()[1]
    regimes = table["regime"]
    assert set(regimes) <= set(iv.REGIMES)
    for figures in regimes.values():
        for entry in figures.values():
            ratios = sorted(entry["ratios"])
            assert entry["n"] == len(ratios) >= 1
            assert sum(c["n"] for c in entry.get("class", {}).values()) == entry["n"]
            if entry["publishers"] < 2:
                assert "p10" not in entry  # one publisher states no interval for another
                continue
            assert entry["p10"] <= entry["p50"] <= entry["p90"]
            t = iv.t_quantile(0.9, entry["publishers"] - 1)
            for key, sign in (("p10", -1), ("p90", 1)):
                want = math.exp(entry["log_center"] + sign * t * entry["log_sd"])
                assert entry[key] == pytest.approx(want, rel=2e-3)
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
