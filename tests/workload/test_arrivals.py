"""Arrival processes: exact schedules for constant, statistical bounds for random ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.config.validate import Table
from harness.errors import ConfigError
from harness.workload.arrivals import Closed, Constant, Gamma, Poisson, Ramp, parse_arrival


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize(
    ("rate", "duration", "count", "expected"),
    [
        (2.0, 2.0, None, [0.0, 0.5, 1.0, 1.5]),  # 2 req/s, 2 s -> 0, .5, 1, 1.5
        (1.0, 3.0, None, [0.0, 1.0, 2.0]),  # end is exclusive
        (4.0, None, 3, [0.0, 0.25, 0.5]),  # a count, not a duration
        (3.0, 0.1, None, [0.0]),  # shorter than one gap: one request at 0
    ],
)
def test_constant_schedule(rate, duration, count, expected):
    assert Constant(rate).times(rng(), duration, count).tolist() == pytest.approx(expected)


def _gaps(times: np.ndarray) -> np.ndarray:
    return np.diff(times)


def test_poisson_rate_and_dispersion():
    rate, duration = 50.0, 400.0
    t = Poisson(rate).times(rng(1), duration, None)
    n = len(t)
    # Count ~ Poisson(rate*duration): within 4 standard deviations.
    assert abs(n - rate * duration) < 4 * math.sqrt(rate * duration)
    g = _gaps(t)
    cv = g.std() / g.mean()
    assert g.mean() == pytest.approx(1 / rate, rel=0.03)
    assert cv == pytest.approx(1.0, abs=0.05)  # exponential gaps: CV 1
    assert np.all(g >= 0) and t[-1] < duration


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_cv_follows_burstiness(burstiness):
    rate = 20.0
    t = Gamma(rate, burstiness).times(rng(2), None, 40_000)
    g = _gaps(t)
    assert g.mean() == pytest.approx(1 / rate, rel=0.04)
    # squared CV of Gamma(shape b) gaps is 1/b
    assert (g.var() / g.mean() ** 2) == pytest.approx(1 / burstiness, rel=0.08)


@pytest.mark.parametrize("shape", ["linear", "exponential"])
def test_ramp_follows_its_rate(shape):
    ramp = Ramp(2.0, 40.0, shape, 100.0)
    t = ramp.times(rng(3), 100.0, None)
    expected_total = float(ramp.cumulative(np.array([100.0]))[0])
    assert abs(len(t) - expected_total) < 4 * math.sqrt(expected_total)
    # Arrivals in the last tenth vastly outnumber those in the first tenth.
    first = np.sum(t < 10)
    last = np.sum(t >= 90)
    expect_first = float(ramp.cumulative(np.array([10.0]))[0])
    expect_last = expected_total - float(ramp.cumulative(np.array([90.0]))[0])
    assert abs(first - expect_first) < 5 * math.sqrt(expect_first) + 2
    assert abs(last - expect_last) < 5 * math.sqrt(expect_last)
    assert np.all(np.diff(t) >= 0)


def test_ramp_inverse_is_inverse():
    for shape in ("linear", "exponential"):
        r = Ramp(1.0, 9.0, shape, 30.0)
        ts = np.linspace(0, 30, 31)
        assert r.inverse_cumulative(r.cumulative(ts)) == pytest.approx(ts, abs=1e-9)


def test_same_seed_same_schedule_different_seed_differs():
    a = Poisson(10).times(rng(5), 10.0, None)
    b = Poisson(10).times(rng(5), 10.0, None)
    c = Poisson(10).times(rng(6), 10.0, None)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def parse(d: dict, duration: float | None = 10.0):
    return parse_arrival(
        Table(d, "s.toml", "phases.0.arrival"), duration, __import__("pathlib").Path(".")
    )


def test_parse_each_process():
    assert parse({"process": "constant", "rate": 3}) == Constant(3.0)
    assert parse({"process": "poisson", "rate": "5rps"}) == Poisson(5.0)
    assert parse({"process": "gamma", "rate": 2, "burstiness": 0.5}) == Gamma(2.0, 0.5)
    assert parse({"process": "ramp", "start": 1, "end": 4}) == Ramp(1.0, 4.0, "linear", 10.0)
    assert parse({"process": "closed", "users": 4, "think_time": "500ms"}) == Closed(4, 0.5)


@pytest.mark.parametrize(
    ("doc", "key", "fragment"),
    [
        ({"process": "poisson", "rate": -5}, "phases.0.arrival.rate", "> 0"),  # negative rate
        ({"process": "poisson", "rate": 0}, "phases.0.arrival.rate", "> 0"),  # zero rate
        ({"process": "poisson"}, "phases.0.arrival.rate", "required"),  # missing rate
        (
            {"process": "uniform", "rate": 1},
            "phases.0.arrival.process",
            "'poisson'",
        ),  # unknown process
        ({"process": "gamma", "rate": 1, "burstiness": 0}, "phases.0.arrival.burstiness", "> 0"),
        ({"process": "closed", "users": 0}, "phases.0.arrival.users", ">= 1"),
        ({"process": "closed", "users": 2, "think_time": 5}, "phases.0.arrival.think_time", "unit"),
        (
            {"process": "poisson", "rate": 1, "rat": 2},
            "phases.0.arrival.rat",
            "did you mean 'rate'",
        ),
        (
            {"process": "ramp", "start": 1, "end": 2, "shape": "cubic"},
            "phases.0.arrival.shape",
            "'linear'",
        ),
    ],
)
def test_parse_errors_name_the_key(doc, key, fragment):
    with pytest.raises(ConfigError) as ei:
        parse(doc)
    assert ei.value.key == key
    assert fragment in str(ei.value)
    assert str(ei.value).startswith("s.toml: ")


def test_ramp_needs_a_duration():
    with pytest.raises(ConfigError, match="needs the phase to have a `duration`"):
        parse({"process": "ramp", "start": 1, "end": 2}, duration=None)
