"""Length distributions: draws within bounds, means and spreads as specified, clean errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.config.validate import Table
from harness.errors import ConfigError
from harness.workload.lengths import (
    Empirical,
    Fixed,
    LogNormal,
    Mixture,
    Normal,
    Uniform,
    parse_length,
)

N = 50_000


def draw(dist, seed: int = 0) -> np.ndarray:
    return dist.sample(N, np.random.default_rng(seed))


def test_fixed():
    assert set(draw(Fixed(7)).tolist()) == {7}


def test_uniform_inclusive_bounds_and_mean():
    v = draw(Uniform(10, 20))
    assert v.min() == 10 and v.max() == 20
    assert v.mean() == pytest.approx(15, abs=0.1)


def test_normal_clipped():
    v = draw(Normal(100, 30, min=80, max=150))
    assert v.min() >= 80 and v.max() <= 150
    unclipped = draw(Normal(100, 10))
    assert unclipped.mean() == pytest.approx(100, abs=0.3)
    assert unclipped.std() == pytest.approx(10, rel=0.03)


def test_lognormal_mean_is_the_distribution_mean():
    v = draw(LogNormal(512, 0.5))
    assert v.mean() == pytest.approx(512, rel=0.02)
    logs = np.log(v)
    assert logs.std() == pytest.approx(0.5, rel=0.03)


def test_empirical_weights():
    v = draw(Empirical((1, 10, 100), (0.5, 0.3, 0.2)))
    for value, p in ((1, 0.5), (10, 0.3), (100, 0.2)):
        assert (v == value).mean() == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / N))


def test_mixture_weights_and_components():
    v = draw(Mixture((Fixed(5), Uniform(1000, 2000)), (3.0, 1.0)))
    assert (v == 5).mean() == pytest.approx(0.75, abs=0.01)
    assert v[v != 5].min() >= 1000


def test_every_draw_is_a_positive_integer():
    for d in (Fixed(1), Uniform(1, 3), Normal(2, 50), LogNormal(3, 2.0)):
        v = draw(d)
        assert v.dtype == np.int64 and v.min() >= 1


def parse(d: dict, base: Path = Path(".")):
    return parse_length(Table(d, "s.toml", "workload.prompt_tokens"), base)


def test_parse_shapes(tmp_path):
    assert parse({"dist": "fixed", "value": 5}) == Fixed(5)
    assert parse(
        {"dist": "lognormal", "mean": 512, "sigma": 0.5, "min": 16, "max": 4096}
    ) == LogNormal(512, 0.5, 16, 4096)
    f = tmp_path / "lens.txt"
    f.write_text("# lengths\n10\n20\n\n30\n")
    e = parse({"dist": "empirical", "file": "lens.txt"}, tmp_path)
    assert e == Empirical((10, 20, 30), (1.0, 1.0, 1.0))
    m = parse(
        {
            "dist": "mixture",
            "components": [
                {"weight": 2, "dist": "fixed", "value": 3},
                {"dist": "uniform", "min": 1, "max": 2},
            ],
        }
    )
    assert m == Mixture((Fixed(3), Uniform(1, 2)), (2.0, 1.0))


@pytest.mark.parametrize(
    ("doc", "key", "fragment"),
    [
        (
            {"dist": "uniform", "min": 10, "max": 5},
            "workload.prompt_tokens.min",
            "min (10) must be <= max (5)",
        ),
        (
            {"dist": "normal", "mean": 10, "std": 1, "min": 50, "max": 5},
            "workload.prompt_tokens.min",
            "<= max",
        ),
        ({"dist": "fixed", "value": 0}, "workload.prompt_tokens.value", ">= 1"),
        ({"dist": "fixed", "value": "ten"}, "workload.prompt_tokens.value", "integer"),
        ({"dist": "zipf"}, "workload.prompt_tokens.dist", "'lognormal'"),
        (
            {"dist": "empirical", "values": [1, 2], "weights": [0, 0]},
            "workload.prompt_tokens.weights",
            "sum to more than 0",
        ),
        (
            {"dist": "empirical", "values": [1, 2], "weights": [1]},
            "workload.prompt_tokens.weights",
            "expected 2 weights",
        ),
        ({"dist": "empirical", "values": [1, -2]}, "workload.prompt_tokens.values", ">= 1"),
        (
            {"dist": "empirical", "values": [1], "file": "x"},
            "workload.prompt_tokens.values",
            "not both",
        ),
        (
            {"dist": "empirical", "file": "missing.txt"},
            "workload.prompt_tokens.file",
            "cannot read",
        ),
        ({"dist": "mixture", "components": []}, "workload.prompt_tokens.components", "non-empty"),
        ({"dist": "lognormal", "mean": 100}, "workload.prompt_tokens.sigma", "required"),
        ({"dist": "fixed", "value": 3, "vale": 3}, "workload.prompt_tokens.vale", "unknown key"),
    ],
)
def test_parse_errors(doc, key, fragment, tmp_path):
    with pytest.raises(ConfigError) as ei:
        parse(doc, tmp_path)
    assert ei.value.key == key, str(ei.value)
    assert fragment in str(ei.value)
