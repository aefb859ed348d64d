"""The simulator's step loop counts how late each step woke (harness.sim.engine): lateness the
timeline absorbs never reaches `lost_s`, yet shows in a tail latency."""

from __future__ import annotations

import pytest

from harness.sim import engine as eng


class _Bins:
    """Only what `wake_late_ms_at` reads of an engine."""

    def __init__(self, late_ms: list[float]) -> None:
        self.wake_late_bins = [0] * eng.WAKE_LATE_BINS
        for ms in late_ms:
            i = min(int(ms / eng.WAKE_LATE_BIN_MS), eng.WAKE_LATE_BINS - 1)
            self.wake_late_bins[i] += 1


@pytest.mark.parametrize(
    ("late_ms", "q", "want"),
    [
        ([], 0.99, 0.0),  # no step yet
        ([0.1] * 99 + [20.0], 0.5, 0.25),  # the median step: on time, within its bin
        ([0.1] * 98 + [20.0] * 2, 0.99, 20.25),  # two late wake-ups of a hundred: the p99
        ([5000.0] * 10, 0.5, 1000.0),  # past the last bin: that bin's edge
    ],
)
def test_wake_lateness_quantiles(late_ms: list[float], q: float, want: float) -> None:
    assert eng.SimEngine.wake_late_ms_at(_Bins(late_ms), q) == pytest.approx(want)  # type: ignore[arg-type]
