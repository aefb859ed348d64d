"""Scenario loading: --set overrides, validation errors naming the file and key."""

from __future__ import annotations

import pytest

from harness.config.scenario import apply_overrides, parse_set_value
from harness.errors import ConfigError, UsageError
from harness.workload.scenario import load_scenario

BASE = """
name = "t"
seed = 1
[workload]
prompt_tokens = { dist = "fixed", value = 10 }
output_tokens = { dist = "fixed", value = 5 }
[[phases]]
name = "p"
duration = "10s"
arrival = { process = "poisson", rate = 2 }
"""


def test_loads_minimal(write_scenario):
    s = load_scenario(write_scenario(BASE))
    assert s.name == "t" and s.phases[0].duration_s == 10.0 and s.workload.ignore_eos is True


def test_set_overrides(write_scenario):
    s = load_scenario(
        write_scenario(BASE),
        ["phases.0.duration=5s", "workload.output_tokens.value=64", "seed=9", "slo.ttft_p99=2s"],
    )
    assert s.phases[0].duration_s == 5.0
    assert s.workload.output_tokens.value == 64
    assert s.seed == 9
    assert s.slo[0].name == "ttft_p99" and s.slo[0].limit_s == 2.0
    assert s.resolved["phases"][0]["duration"] == "5s"


@pytest.mark.parametrize(
    ("sets", "fragment"),
    [
        (["phases.3.duration=5s"], "is not an index 0..0"),
        (["novalue"], "expected KEY=VALUE"),
        (["name.x=1"], "is a value, not a table"),
    ],
)
def test_set_usage_errors(write_scenario, sets, fragment):
    with pytest.raises(UsageError, match=fragment):
        load_scenario(write_scenario(BASE), sets)


def test_set_unknown_key_is_blamed_on_set(write_scenario):
    with pytest.raises(ConfigError) as ei:
        load_scenario(write_scenario(BASE), ["phases.0.durration=5s"])
    assert str(ei.value).startswith(
        "--set: phases.0.durration: unknown key (did you mean 'duration'?)"
    )


def test_parse_set_value():
    assert parse_set_value("5") == 5
    assert parse_set_value("2.5") == 2.5
    assert parse_set_value("true") is True
    assert parse_set_value("5s") == "5s"
    assert parse_set_value("[1, 2]") == [1, 2]
    doc: dict = {"a": [{"b": 1}]}
    assert apply_overrides(doc, ["a.0.b=2", "c.d=x"]) == {"a.0.b", "c.d"}
    assert doc == {"a": [{"b": 2}], "c": {"d": "x"}}


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            ('duration = "10s"', "duration = 10"),
            "s.toml: phases.0.duration: expected a string with a unit",
        ),
        (
            ('duration = "10s"', 'duration = "10"'),
            "s.toml: phases.0.duration: expected a string with a unit",
        ),
        (
            ('duration = "10s"', 'duration = "0s"'),
            "s.toml: phases.0.duration: expected a duration > 0",
        ),
        (('duration = "10s"', "requests = 0"), "s.toml: phases.0.requests: expected a value >= 1"),
        (('duration = "10s"', 'duration = "1s"\nrequests = 5'), "give exactly one of"),
        (('duration = "10s"', ""), "give exactly one of"),
        (("rate = 2", "rate = -5"), "s.toml: phases.0.arrival.rate: expected requests/s > 0"),
        (('name = "t"', 'name = "bad name/"'), "s.toml: name: expected letters"),
        (("seed = 1", "seed = -1"), "s.toml: seed: expected a value >= 0"),
        (("seed = 1", "seed = 1\ncolour = 1"), "s.toml: colour: unknown key"),
        (
            ("[workload]", '[workload]\nignore_eos = "yes"'),
            "s.toml: workload.ignore_eos: expected true or false",
        ),
        (
            ("[workload]", '[target]\nendpoint = "rerank"\n[workload]'),
            "target.endpoint: expected one of 'chat', 'completions', 'responses', 'embeddings'",
        ),
        (("[workload]", '[slo]\nttft_p42 = "1s"\n[workload]'), "slo.ttft_p42: unknown SLO"),
        (
            ("[workload]", '[slo]\nttft_p99 = "fast"\n[workload]'),
            "slo.ttft_p99: expected a string with a unit",
        ),
        (
            ("[workload]", "[retry]\non = [429]\n[workload]"),
            "retry.on: expected HTTP codes as strings",
        ),
        (('name = "p"', 'name = "p"\nwarmup = true'), "every phase is a warm-up"),
        (("[workload]", "[workload\n"), "TOML syntax error"),
    ],
)
def test_validation_errors(write_scenario, patch, message):
    text = BASE.replace(*patch, 1)
    with pytest.raises(ConfigError) as ei:
        load_scenario(write_scenario(text))
    assert message in str(ei.value), str(ei.value)
    assert "\n" not in str(ei.value)


def test_syntax_error_names_the_line(write_scenario):
    with pytest.raises(ConfigError) as ei:
        load_scenario(write_scenario('name = "x"\n\nseed = = 1\n'))
    assert ei.value.line == 3 and ei.value.column == 8
    assert str(ei.value).startswith(f"{ei.value.where}:3:8: ")


def test_missing_file():
    with pytest.raises(ConfigError, match="file not found"):
        load_scenario("does/not/exist.toml")


def test_duplicate_phase_names(write_scenario):
    text = (
        BASE
        + '[[phases]]\nname = "p"\nrequests = 3\narrival = { process = "constant", rate = 1 }\n'
    )
    with pytest.raises(ConfigError, match="repeated: p"):
        load_scenario(write_scenario(text))


def test_trace_errors(write_scenario, tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"t": 1.0, "prompt_tokens": 5, "output_tokens": 5}\n'
        '{"t": 0.5, "prompt_tokens": 5, "output_tokens": 5}\n'
    )
    text = BASE.replace(
        'duration = "10s"\narrival = { process = "poisson", rate = 2 }',
        'arrival = { process = "trace", file = "t.jsonl" }',
    )
    with pytest.raises(ConfigError) as ei:
        load_scenario(write_scenario(text))
    assert "t.jsonl:2: t: times must be sorted" in str(ei.value)
    (tmp_path / "t.jsonl").write_text('{"t": -1, "prompt_tokens": 5, "output_tokens": 5}\n')
    with pytest.raises(ConfigError, match="t.jsonl:1: t: expected a time >= 0"):
        load_scenario(write_scenario(text))
