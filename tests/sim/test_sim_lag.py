"""When starved, the simulator's model lags the wall clock instead of pausing
(harness.sim.engine): the lag grows by each gap the loop lost, shrinks while it catches up
(CATCH_UP), never moves the model's own clock backwards or past the wall, and is logged as
points the launcher reads into the run's journal; compare takes it out of each stamp
(tests/analysis/test_compare_health.py)."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from harness.server.launcher import sim_summary
from harness.sim import engine as eng


class _Lag:
    """Only what the lag's bookkeeping uses of an engine."""

    def __init__(self) -> None:
        self.lost_s = 0.0
        self.lag_s = 0.0
        self._lag_logged = 0.0
        self.lag_points_ns: array[int] = array("q")

    def _lag_point(self, at_s: float, force: bool = False) -> None:
        eng.SimEngine._lag_point(self, at_s, force)  # type: ignore[arg-type]


def test_the_lag_grows_by_each_gap_and_catches_up_without_moving_the_model_back() -> None:
    e = _Lag()
    eng.SimEngine._fell_behind(e, 1.0, 1.25)  # type: ignore[arg-type]
    assert e.lost_s == pytest.approx(0.25) and e.lag_s == pytest.approx(0.25)
    assert e.lag_points_ns.tolist() == [1_000_000_000, 0, 1_250_000_000, 250_000_000]
    start, model = 1.25, 1.25 - e.lag_s  # the model's clock where the wall clock restarted
    steps = 0
    while e.lag_s > 0:
        lag0 = e.lag_s
        wall = eng.SimEngine._wall_of(e, 0.1)  # type: ignore[arg-type]
        assert wall == pytest.approx(0.1 - min(0.1 * eng.CATCH_UP / (1 + eng.CATCH_UP), lag0))
        start += wall
        model += 0.1  # the model's step is the model's, whatever the wall took
        assert start - e.lag_s == pytest.approx(model)  # the model's clock: wall - lag
        assert e.lag_s >= 0.0
        eng.SimEngine._lag_point(e, start)  # type: ignore[arg-type]
        steps += 1
    assert steps == 13  # 0.25 s at 0.02 s a step
    assert e.lost_s == pytest.approx(0.25)  # what it lost, all told, stays
    points = e.lag_points_ns.tolist()
    assert points[-1] == 0 and len(points) == 2 * (2 + steps)
    text = eng.SimEngine.lag_text(e)  # type: ignore[arg-type]
    assert text.startswith("1000000000:0 1250000000:250000000 ")


def test_the_launcher_reads_the_lag_into_the_journal(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    log.write_text(
        "harness-sim: 10 steps, 1.00 s modelled; fell behind the model by 0.250 s (CPU-starved "
        "if large); steps woke late by p50 0.25 ms, p99 9.00 ms\n"
        "harness-sim: lag ns: 1000000000:0 1250000000:250000000 1350000000:230000000\n",
        encoding="utf-8",
    )
    got = sim_summary(log)
    assert got is not None and got["behind_model_s"] == 0.25
    assert got["lag_ns"] == [[1_000_000_000, 0], [1_250_000_000, 250_000_000],
                             [1_350_000_000, 230_000_000]]  # fmt: skip
    log.write_text(
        "harness-sim: 3 steps, 0.07 s modelled; fell behind the model by 0.007 s\n",
        encoding="utf-8",
    )
    got = sim_summary(log)
    assert got is not None and "lag_ns" not in got


def test_an_idle_model_pays_its_lag_back_at_once() -> None:
    # A model that lags and has nothing to do jumps to its next intake or the wall clock,
    # whichever comes first: otherwise every request after one starved stretch waited the lag
    # out in the intake for ever (a capacity search failed every probe down to 1 req/s).
    e = _Lag()
    e.speedup = 10.0  # type: ignore[attr-defined]
    eng.SimEngine._fell_behind(e, 1.0, 1.5)  # type: ignore[arg-type]
    assert e.lag_s == pytest.approx(0.5)
    # the next intake at model 14.0 s is wall 1.4 s, behind the model's clock (wall 2.0 - 0.5):
    eng.SimEngine._idle_until(e, 2.0, 14.0)  # type: ignore[arg-type]
    assert e.lag_s == pytest.approx(0.5)  # 2.0 - 1.4 = 0.6 would be more: the lag never grows
    eng.SimEngine._idle_until(e, 2.0, 18.0)  # type: ignore[arg-type]
    assert e.lag_s == pytest.approx(0.2)  # intake at wall 1.8: 2.0 - 1.8
    eng.SimEngine._idle_until(e, 2.0, 25.0)  # type: ignore[arg-type]
    assert e.lag_s == 0.0  # intake in the wall clock's future: the model catches up fully
    eng.SimEngine._fell_behind(e, 3.0, 3.3)  # type: ignore[arg-type]
    eng.SimEngine._idle_until(e, 3.4, None)  # type: ignore[arg-type]
    assert e.lag_s == 0.0  # nothing in the model: it jumps to the wall clock
    assert e.lag_points_ns.tolist()[-2:] == [3_400_000_000, 0]
