"""`predict` prints each figure with its 80 % prediction interval (issue 47 item 4): the regime of
the predicted load by the validation's rule, and the stored interval of that regime and figure
turned into where the published figure lay for 80 % of held-out cases."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from harness.orchestrate.predict import predict_result
from harness.orchestrate.predict_intervals import interval_lines, result_regime
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.validation_regimes import Comparison, intervals_toml
from harness.sim.validation import intervals as iv

Writer = Callable[..., Path]  # conftest's write_scenario

SCENARIO = """
name = "small"
seed = 5
[workload]
prompt_tokens = {{ dist = "uniform", min = 64, max = 512 }}
output_tokens = {{ dist = "uniform", min = 16, max = 96 }}
ignore_eos = true
[[phases]]
name = "main"
duration = "10s"
arrival = {arrival}
[sim]
gpu = "H100-SXM"
"""


@pytest.mark.parametrize(
    ("arrival", "regime"),
    [
        ('{ process = "closed", users = 1 }', iv.ONE_USER),  # one user
        ('{ process = "closed", users = 3 }', iv.LIGHT),  # three users
        ('{ process = "poisson", rate = 2.0 }', iv.LIGHT),  # 2 req/s of ~0.4 s: ~1 in flight
        ('{ process = "poisson", rate = 60.0 }', iv.LOADED),  # 60 req/s: tens in flight
    ],
)
def test_the_predicted_load_is_classified_as_published_runs_are(
    write_scenario: Writer, arrival: str, regime: str
) -> None:
    scn = load_scenario(str(write_scenario(SCENARIO.format(arrival=arrival))))
    assert result_regime(scn, predict_result(scn)) == regime


def test_each_figure_is_printed_with_the_published_range_of_its_regime(
    write_scenario: Writer,
) -> None:
    scn = load_scenario(str(write_scenario(SCENARIO.format(arrival=SCENARIO_ONE))))
    result = predict_result(scn)
    by = {"x": [0.8, 0.9, 1.0], "y": [1.1, 1.5]}  # two publishers
    comps = [
        Comparison(pub, iv.ONE_USER, "tpot_p50_ms", "H100", r) for pub, rs in by.items() for r in rs
    ]
    spread = iv.publisher_spread(by)
    assert spread is not None
    table = tomllib.loads(intervals_toml(comps, "test"))
    lines = interval_lines(scn, result, table)
    assert lines[0].startswith(f"80% prediction intervals ({iv.ONE_USER};")
    tpot = result["summary"]["latency_ms"]["tpot"]["p50"]
    line = next(x for x in lines if x.startswith("  TPOT p50"))
    band = iv.interval(iv.ONE_USER, "tpot_p50_ms", "H100", table)  # stored to 4 digits
    assert band is not None and band.p90 == pytest.approx(spread.quantile(0.9), rel=1e-3)
    assert band.p10 == pytest.approx(spread.quantile(0.1), rel=1e-3)
    lo, hi = band.published_range(tpot)
    assert f"80% interval {lo:.3g}..{hi:.3g}" in line
    assert "n=5 held out from 2 publishers, the H100 class" in line
    # one publisher's comparisons state no interval for the next publisher
    one = tomllib.loads(intervals_toml([c for c in comps if c.publisher == "x"], "test"))
    alone = next(x for x in interval_lines(scn, result, one) if x.startswith("  TPOT p50"))
    assert "no interval" in alone
    # a figure whose regime has no held-out comparisons says so instead of inventing one
    ttft = next(x for x in lines if x.startswith("  TTFT p50"))
    assert "no interval: fewer than 3 held-out comparisons" in ttft


SCENARIO_ONE = '{ process = "closed", users = 1 }'


def test_predict_prints_the_intervals_after_its_report(
    write_scenario: Writer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scenario(SCENARIO.format(arrival=SCENARIO_ONE))
    assert main(["predict", str(path), "--out", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert f"80% prediction intervals ({iv.ONE_USER}; from held-out published runs" in out
    assert "  output tokens/s " in out
