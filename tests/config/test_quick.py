"""The quick run (issue 15 item 1): flags -> a one-phase scenario document, validated like a
file; --save-scenario writes TOML that loads back to the identical plan."""

from __future__ import annotations

import tomllib

import pytest

from harness.cli import main
from harness.config.quick import QuickArgs, parse_length_form, quick_scenario
from harness.config.toml_dump import dump_toml
from harness.errors import UsageError
from harness.orchestrate.scenario import load_scenario
from harness.workload.plan import build_plan


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("512", {"dist": "fixed", "value": 512}),  # a number
        ("uniform:128:1024", {"dist": "uniform", "min": 128, "max": 1024}),
        ("lognormal:512:0.5", {"dist": "lognormal", "mean": 512.0, "sigma": 0.5}),
        ("normal:512:64", {"dist": "normal", "mean": 512.0, "std": 64.0}),
    ],
)
def test_length_forms(text, want):
    assert parse_length_form(text, "--input-len") == want


@pytest.mark.parametrize(
    "text", ["", "abc", "uniform:1", "uniform:a:b", "zipf:1:2", "512.5", "lognormal:1:2:3"]
)
def test_bad_length_forms_name_the_flag(text):
    with pytest.raises(UsageError, match="^--output-len: expected a number"):
        parse_length_form(text, "--output-len")


@pytest.mark.parametrize(
    ("q", "fragment"),
    [
        (QuickArgs(rate="8"), "exactly one of --num-requests"),  # no size
        (QuickArgs(rate="8", num_requests=10, duration="5s"), "exactly one of"),  # two sizes
        (QuickArgs(duration="5s"), "needs --rate"),  # no load for a duration (N alone: inf)
        (
            QuickArgs(concurrency=4, num_requests=10, process="poisson"),
            "--process shapes",
        ),  # closed loop
        (
            QuickArgs(rate="8", num_requests=10, process="constant", burstiness=0.5),
            "does not apply",
        ),
        (QuickArgs(rate="inf", duration="60s"), "--rate inf with --duration sends without end"),
        (QuickArgs(rate="inf", num_requests=10, burstiness=0.5), "--rate inf has none"),
    ],
)
def test_combinations_that_mean_nothing_are_refused(q, fragment):
    with pytest.raises(UsageError, match=fragment):
        quick_scenario(q)


def test_shapes_follow_vllm_bench_serve():
    # --burstiness other than 1 means gamma, as `vllm bench serve` does
    doc = quick_scenario(QuickArgs(rate="8", num_requests=10, burstiness=0.5))
    assert doc["phases"][0]["arrival"] == {"process": "gamma", "rate": 8.0, "burstiness": 0.5}
    # ...and 1 (vllm bench serve's default) is Poisson, given or not
    for q in (
        QuickArgs(rate="8", num_requests=10, burstiness=1.0),
        QuickArgs(rate="8", num_requests=10, burstiness=1.0, process="poisson"),
    ):
        assert quick_scenario(q)["phases"][0]["arrival"] == {"process": "poisson", "rate": 8.0}
    assert quick_scenario(QuickArgs(rate="inf", num_requests=10, burstiness=1.0))["phases"][0][
        "arrival"
    ] == {"process": "closed", "users": 10}
    # --rate with --concurrency: open loop, capped in flight
    doc = quick_scenario(QuickArgs(rate="8", duration="60", concurrency=16))
    assert doc["phases"][0] == {
        "name": "main",
        "duration": "60s",
        "max_concurrency": 16,
        "arrival": {"process": "poisson", "rate": 8.0},
    }
    # --concurrency alone: a closed loop of N users
    doc = quick_scenario(QuickArgs(concurrency=4, num_requests=10))
    assert doc["phases"][0]["arrival"] == {"process": "closed", "users": 4}
    assert doc["workload"]["prompt_tokens"] == {"dist": "fixed", "value": 1024}  # vLLM's defaults
    assert doc["workload"]["output_tokens"] == {"dist": "fixed", "value": 128}
    # --rate inf (vllm bench serve's default): everything due at once, paced only by the cap
    doc = quick_scenario(QuickArgs(rate="inf", num_requests=10))
    assert doc["phases"][0] == {
        "name": "main",
        "requests": 10,
        "arrival": {"process": "closed", "users": 10},
    }
    doc = quick_scenario(QuickArgs(rate="inf", duration="30s", concurrency=4))
    assert doc["phases"][0] == {
        "name": "main",
        "duration": "30s",
        "arrival": {"process": "closed", "users": 4},
    }


@pytest.mark.parametrize(
    "doc",
    [
        quick_scenario(
            QuickArgs(
                rate="8",
                num_requests=200,
                input_len="uniform:128:1024",
                output_len="lognormal:128:0.3",
            )
        ),
        {
            "name": "x",
            "seed": 7,
            "f": 0.1,
            "t": True,
            "s": 'quote " back \\ tab\t del\x7f nul\x00 \u00e9',
            "workload": {"extra_body": {"a": [1, 2], "b": {"c": "d"}}},
            "phases": [
                {"name": "a", "arrival": {"process": "constant", "rate": 1.5}},
                {"name": "b", "k": []},
            ],
        },
    ],
)
def test_toml_dump_round_trips(doc):
    assert tomllib.loads(dump_toml(doc)) == doc


def test_toml_dump_refuses_what_toml_cannot_hold():
    with pytest.raises(TypeError):
        dump_toml({"a": None})


def test_saved_scenario_loads_back_to_the_identical_plan(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    """--seed and --set are in the file too: loaded alone, it plans what the run planned."""
    flags = [
        "--rate",
        "8",
        "--num-requests",
        "200",
        "--input-len",
        "lognormal:512:0.5",
        "--output-len",
        "uniform:64:256",
        "--burstiness",
        "0.7",
        "--concurrency",
        "32",
        "--seed",
        "5",
        "--set",
        "workload.system_prompt_tokens=40",
    ]
    rc = main(["run", *flags, "--save-scenario", "mine.toml", "--explain"])
    assert rc == 0
    assert f"scenario written to {tmp_path / 'mine.toml'}" in capsys.readouterr().err
    args = QuickArgs(
        rate="8",
        num_requests=200,
        input_len="lognormal:512:0.5",
        output_len="uniform:64:256",
        burstiness=0.7,
        concurrency=32,
    )
    in_memory = build_plan(
        load_scenario(quick_scenario(args), ["workload.system_prompt_tokens=40"], seed=5)
    )
    from_file = build_plan(load_scenario(tmp_path / "mine.toml"))
    assert from_file.system_prompt_tokens == 40
    assert in_memory.digest() == from_file.digest()
    assert from_file.total_requests == 200


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["run"], "give a scenario file"),  # nothing at all
        (["run", "--rate", "0", "--num-requests", "5"], "--rate: expected requests/s > 0"),
        (["run", "--rate", "8", "--num-requests", "0"], "--num-requests: "),
        (["run", "--rate", "8", "--duration", "soon"], "--duration: expected"),
        (["run", "--rate", "8", "--num-requests", "5", "--input-len", "0"], "--input-len: "),
        (["run", "--rate", "8", "--num-requests", "5", "--burstiness", "-1"], "--burstiness: "),
        (["run", "scenarios/steady.toml", "--rate", "8"], "build a scenario of their own"),
    ],
)
def test_bad_quick_flags_are_one_line_and_exit_2(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize(
    "load", [["--rate", "40"], ["--request-rate", "inf", "--max-concurrency", "4"]]
)
def test_quick_run_against_the_simulator(tmp_path, monkeypatch, capsys, load):
    monkeypatch.chdir(tmp_path)
    rc = main(
        [
            "run",
            *load,
            "--num-requests",
            "12",
            "--input-len",
            "64",
            "--output-len",
            "8",
            "--set",
            "sim.speedup=20",
            "--out",
            "r.json",
            "--quiet",
        ]
    )
    assert rc == 0
    from harness.analysis.result import load_result

    result = load_result(tmp_path / "r.json")
    assert result["scenario_name"] == "quick"
    assert sum(b["requests"]["completed"] for b in result["phases"]) == 12


def test_vllm_bench_serve_names_mean_the_same(tmp_path, monkeypatch, capsys):
    """vllm bench serve's flag names (and its --endpoint paths) are accepted with their meaning."""
    monkeypatch.chdir(tmp_path)
    rc = main(
        [
            "run",
            "--request-rate",
            "4",
            "--num-prompts",
            "50",
            "--random-input-len",
            "256",
            "--random-output-len",
            "32",
            "--max-concurrency",
            "8",
            "--burstiness",
            "0.5",
            "--seed",
            "2",
            "--base-url",
            "http://127.0.0.1:9",
            "--endpoint",
            "/v1/completions",
            "--model",
            "m",
            "--save-scenario",
            "v.toml",
            "--explain",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "http://127.0.0.1:9" in out and "completions" in out
    doc = tomllib.loads((tmp_path / "v.toml").read_text())
    assert doc["phases"][0] == {
        "name": "main",
        "requests": 50,
        "max_concurrency": 8,
        "arrival": {"process": "gamma", "rate": 4.0, "burstiness": 0.5},
    }
    assert doc["workload"]["prompt_tokens"] == {"dist": "fixed", "value": 256}
    with pytest.raises(SystemExit) as e:  # argparse's own error: one line, exit 2
        main(["run", "--rate", "1", "--num-requests", "1", "--endpoint", "/v1/rerank"])
    assert e.value.code == 2 and "--endpoint: expected one of chat" in capsys.readouterr().err


@pytest.mark.parametrize("endpoint", ["responses", "/v1/embeddings"])
def test_quick_run_on_the_other_endpoints(tmp_path, monkeypatch, capsys, endpoint):
    """`run --endpoint responses|embeddings` without a scenario runs against the simulator."""
    monkeypatch.chdir(tmp_path)
    rc = main(
        [
            "run",
            "--rate",
            "50",
            "--num-requests",
            "6",
            "--input-len",
            "32",
            "--output-len",
            "8",
            "--endpoint",
            endpoint,
            "--set",
            "sim.speedup=20",
            "--out",
            "r.json",
            "--quiet",
        ]
    )
    assert rc == 0
    from harness.analysis.result import load_result

    r = load_result(tmp_path / "r.json")
    s = r["summary"]
    assert r["target"]["endpoint"] == endpoint.removeprefix("/v1/")
    assert s["requests"]["completed"] == 6
    if r["target"]["endpoint"] == "embeddings":
        assert s["embeddings"]["latency_ms"]["e2e"]["count"] == 6
        assert s["latency_ms"]["ttft"]["count"] == 0
    else:
        assert s["latency_ms"]["ttft"]["count"] == 6 and "embeddings" not in s
