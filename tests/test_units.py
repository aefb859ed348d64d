"""harness.units. One parse_percent: '10%' and 0.1 (or '0.1') are the same fraction everywhere."""

from __future__ import annotations

import pytest

from harness.analysis.compare import parse_threshold
from harness.errors import ConfigError
from harness.units import parse_percent


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("10%", 0.10),  # a percentage
        (" 2.5 % ", 0.025),  # spaces around it
        ("0.1", 0.1),  # a fraction as text
        (0.1, 0.1),  # a fraction
        (0, 0.0),
    ],
)
def test_parse_percent(value, want):
    assert parse_percent(value) == pytest.approx(want)


@pytest.mark.parametrize("value", ["ten", "%", "", "nan", "inf%", True, None, [1]])
def test_parse_percent_refuses(value):
    with pytest.raises(ValueError, match="percentage such as '10%'"):
        parse_percent(value)


def test_compare_threshold_adds_only_its_range():
    assert parse_threshold("10%", "--max-regression", "ttft_p99") == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="between 0% and 1000%"):
        parse_threshold("1500%", "--max-regression", "ttft_p99")
    with pytest.raises(ConfigError, match="--max-regression: ttft_p99: expected a percentage"):
        parse_threshold("lots", "--max-regression", "ttft_p99")
