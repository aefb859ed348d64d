"""The simulator logs when it fell behind its model (harness.sim.engine.lost_gaps_ns), the
launcher reads the log line into the run's journal, and compare takes that time out of exactly
the latencies it was inside (tests/analysis/test_compare_health.py)."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from harness.server.launcher import sim_summary
from harness.sim import engine as eng


class _Gaps:
    """Only what `_lost_gap` and `lost_gaps_text` use of an engine."""

    def __init__(self) -> None:
        self.lost_gaps_ns: array[int] = array("q")


def test_gaps_are_logged_and_merge_into_covering_spans_past_the_cap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    e = _Gaps()
    eng.SimEngine._lost_gap(e, 1.0, 1.25)  # type: ignore[arg-type]
    eng.SimEngine._lost_gap(e, 2.0, 2.01)  # type: ignore[arg-type]
    assert e.lost_gaps_ns.tolist() == [1_000_000_000, 1_250_000_000, 2_000_000_000, 2_010_000_000]
    text = eng.SimEngine.lost_gaps_text(e)  # type: ignore[arg-type]
    assert text == "1000000000+250000000 2000000000+10000000"
    log = tmp_path / "sim.log"
    log.write_text(
        "harness-sim: 10 steps, 1.00 s modelled; fell behind the model by 0.260 s (CPU-starved "
        "if large); steps woke late by p50 0.25 ms, p99 9.00 ms\n"
        f"harness-sim: lost gaps ns: {text}\n",
        encoding="utf-8",
    )
    got = sim_summary(log)
    assert got is not None and got["behind_model_s"] == 0.26
    assert got["lost_gaps_ns"] == [[1_000_000_000, 1_250_000_000], [2_000_000_000, 2_010_000_000]]
    # past the cap, neighbours merge into the span covering both: never less lost time inside
    small = _Gaps()
    monkeypatch.setattr(eng, "MAX_LOST_GAPS", 2)
    for i in range(3):
        eng.SimEngine._lost_gap(small, float(i), i + 0.1)  # type: ignore[arg-type]
    assert small.lost_gaps_ns.tolist() == [0, 1_100_000_000, 2_000_000_000, 2_100_000_000]


def test_a_log_without_the_gap_line_has_no_gaps(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    log.write_text(
        "harness-sim: 3 steps, 0.07 s modelled; fell behind the model by 0.007 s\n",
        encoding="utf-8",
    )
    got = sim_summary(log)
    assert got is not None and "lost_gaps_ns" not in got
