"""Bounded plans (docs/reliability.md, "Plan size limit"): a scenario's size is estimated before
anything is drawn, and a plan above `max_planned_requests` is one line naming the product and
the limit; infinite, NaN and overflowing durations, times, rates and scales are refused the same
way when the file is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.errors import ConfigError
from harness.orchestrate.scenario import load_scenario
from harness.workload.limits import DEFAULT_MAX_PLANNED_REQUESTS
from harness.workload.plan import build_plan

WL = {
    "prompt_tokens": {"dist": "fixed", "value": 8},
    "output_tokens": {"dist": "fixed", "value": 4},
}


def doc(*phases: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "s", "workload": dict(WL), "phases": list(phases), **top}


def phase(arrival: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"name": kw.pop("name", "main"), "arrival": arrival, **kw}


def refused(d: dict[str, Any], base: Path = Path(".")) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        load_scenario(d) if base == Path(".") else load_scenario(_write(d, base))
    assert "\n" not in str(exc.value)
    return exc.value


def _write(d: dict[str, Any], base: Path) -> Path:
    from harness.config.toml_dump import dump_toml

    p = base / "s.toml"
    p.write_text(dump_toml(d))
    return p


POISSON = {"process": "poisson", "rate": 1e4}


@pytest.mark.parametrize(
    ("d", "key", "words"),
    [
        # 10,000/s for an hour: 36 M requests
        (
            doc(phase(POISSON, duration="1h")),
            "phases.0.duration",
            ["rate 10000/s x duration 3600 s = 36,000,000 requests", "max_planned_requests"],
        ),
        # a count given as such
        (
            doc(phase({"process": "constant", "rate": 5}, requests=2_000_000)),
            "phases.0.requests",
            ["2,000,000 requests", "limit of 1,000,000"],
        ),
        # a linear ramp's integral: mean 500/s over an hour
        (
            doc(phase({"process": "ramp", "start": 100, "end": 900}, duration="1h")),
            "phases.0.duration",
            ["mean rate 500/s x duration 3600 s = 1,800,000"],
        ),
        # an exponential ramp to 1e6/s
        (
            doc(
                phase(
                    {"process": "ramp", "start": 1, "end": 1e6, "shape": "exponential"},
                    duration="10m",
                )
            ),
            "phases.0.duration",
            ["mean rate"],
        ),
        # a gamma process this bursty piles ~1/b arrivals into its first instants
        (
            doc(phase({"process": "gamma", "rate": 1, "burstiness": 1e-7}, duration="10s")),
            "phases.0.duration",
            ["1/burstiness", "10,000,011 requests"],
        ),
        # two phases each under the limit, together over it
        (
            doc(
                phase({"process": "constant", "rate": 5}, requests=600_000, name="a"),
                phase({"process": "constant", "rate": 5}, requests=600_000, name="b"),
            ),
            "phases",
            ["600,000 + 600,000 = 1,200,000 requests"],
        ),
        # sessions x turns
        (
            {
                **doc(phase({"process": "constant", "rate": 5}, requests=400_000)),
                "workload": {**WL, "conversation": {"turns": 3}},
            },
            "phases.0.requests",
            ["400,000 sessions x 3 turns (mean) = 1,200,000 requests"],
        ),
        # the limit lowered: a small plan above it
        (
            doc(
                phase({"process": "constant", "rate": 10}, duration="10s"), max_planned_requests=50
            ),
            "phases.0.duration",
            ["= 100 requests", "limit of 50"],
        ),
        # the limit cannot be raised past its ceiling, nor be 0
        (
            doc(phase(POISSON, duration="1s"), max_planned_requests=0),
            "max_planned_requests",
            [">= 1"],
        ),
        (
            doc(phase(POISSON, duration="1s"), max_planned_requests=2 * 10**9),
            "max_planned_requests",
            ["<= 1e+09"],
        ),
    ],
)
def test_a_plan_above_the_limit_is_refused_before_anything_is_drawn(d, key, words):
    exc = refused(d)
    assert exc.key == key, str(exc)
    for w in words:
        assert w in str(exc), (w, str(exc))


def test_the_limit_is_raised_deliberately():
    d = doc(phase(POISSON, duration="1h"), max_planned_requests=40_000_000)
    assert load_scenario(d).max_planned_requests == 40_000_000  # loads; not drawn here
    assert load_scenario(doc(phase(POISSON, duration="1s"))).max_planned_requests == (
        DEFAULT_MAX_PLANNED_REQUESTS
    )


def test_the_drawn_count_is_checked_too():
    """Poisson at 100/s for 10 s plans about 1,000: the estimate passes a limit of the drawn count
    minus one, the draw itself does not; at the drawn count it builds."""
    for seed in range(40):
        d = doc(phase({"process": "poisson", "rate": 100}, duration="10s"), seed=seed)
        n = build_plan(load_scenario(d)).total_requests
        if n > 1000:
            break
    else:
        pytest.fail("no seed drew more than the mean")
    over = load_scenario({**d, "max_planned_requests": n - 1})  # the estimate (1,000) passes
    with pytest.raises(ConfigError, match=rf"drew {n:,} arrivals.*limit of {n - 1:,}"):
        build_plan(over)
    assert build_plan(load_scenario({**d, "max_planned_requests": n})).total_requests == n


def test_sessions_drawn_over_the_limit_are_refused():
    """100 sessions of 1..5 turns plan about 300 requests; a limit of the drawn total minus one
    passes the estimate and stops the draw, before any length is drawn."""
    for seed in range(40):
        d = {
            **doc(phase({"process": "constant", "rate": 5}, requests=100), seed=seed),
            "workload": {**WL, "conversation": {"turns": {"dist": "uniform", "min": 1, "max": 5}}},
        }
        n = build_plan(load_scenario(d)).total_requests
        if n > 300:
            break
    else:
        pytest.fail("no seed drew more turns than the mean")
    with pytest.raises(ConfigError, match=rf"100 sessions with {n:,} turns in all"):
        build_plan(load_scenario({**d, "max_planned_requests": n - 1}))


# -- durations, times and scales: finite and bounded -----------------------------------------


@pytest.mark.parametrize(
    ("d", "key"),
    [
        (doc(phase(POISSON, duration="1e400s")), "phases.0.duration"),  # infinite
        (doc(phase(POISSON, duration="100000h")), "phases.0.duration"),  # past 30 days
        (
            doc(phase({"process": "closed", "users": 2, "think_time": "1e400s"}, requests=4)),
            "phases.0.arrival.think_time",
        ),
        (
            {**doc(phase(POISSON, duration="1s")), "retry": {"on": ["500"], "backoff": "1e400s"}},
            "retry.backoff",
        ),
        (
            {**doc(phase(POISSON, duration="1s")), "retry": {"on": ["500"], "max_wait": "1e999h"}},
            "retry.max_wait",
        ),
        ({**doc(phase(POISSON, duration="1s")), "slo": {"ttft_p99": "1e400ms"}}, "slo.ttft_p99"),
        (
            {
                **doc(phase({"process": "constant", "rate": 1}, requests=2)),
                "workload": {
                    **WL,
                    "conversation": {
                        "turns": 2,
                        "think_time": {"dist": "exponential", "mean": "1e400s"},
                    },
                },
            },
            "workload.conversation.think_time.mean",
        ),
        (
            {
                **doc(phase(POISSON, duration="1s")),
                "workload": {
                    **WL,
                    "prompt_tokens": {
                        "dist": "empirical",
                        "values": [8, 9],
                        "weights": [1e308, 1e308],
                    },
                },
            },
            "workload.prompt_tokens.weights",
        ),
    ],
)
def test_infinite_and_overflowing_values_are_refused(d, key):
    exc = refused(d)
    assert exc.key == key, str(exc)


def _trace(tmp_path: Path, times: list[float]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text(
        "".join(json.dumps({"t": t, "prompt_tokens": 8, "output_tokens": 4}) + "\n" for t in times)
    )
    return p


@pytest.mark.parametrize(
    ("arrival", "phase_kw", "key", "words"),
    [
        ({"time_scale": 1e308}, {}, "phases.0.arrival.time_scale", "<= 1e+06"),
        ({"time_scale": 1e-320}, {}, "phases.0.arrival.time_scale", ">= 1e-06"),
        ({"rate_scale": 1e9}, {}, "phases.0.arrival.rate_scale", "time_scale of"),
        ({}, {"_times": [0.0, 1.0, 1e308]}, "phases.0.arrival.file", "would last 1e+308 s"),
        ({}, {"_limit": 2}, "phases.0.arrival.file", "holds more than 2 rows"),
    ],
)
def test_trace_scales_and_times_are_bounded(tmp_path, arrival, phase_kw, key, words):
    times = phase_kw.pop("_times", [0.0, 0.5, 1.0, 1.5])
    top = {"max_planned_requests": phase_kw.pop("_limit")} if "_limit" in phase_kw else {}
    _trace(tmp_path, times)
    d = doc(phase({"process": "trace", "file": "t.jsonl", **arrival}, **phase_kw), **top)
    exc = refused(d, tmp_path)
    assert exc.key == key and words in str(exc), str(exc)


def test_a_far_row_is_fine_when_the_phase_ends_before_it(tmp_path):
    _trace(tmp_path, [0.0, 1.0, 1e308])
    d = doc(phase({"process": "trace", "file": "t.jsonl"}, duration="10s"))
    assert build_plan(load_scenario(_write(d, tmp_path))).total_requests == 2


def test_config_and_settings_timeouts_are_bounded(tmp_path):
    from harness.config.configfile import load_config
    from harness.config.settings import load_settings

    cfg = tmp_path / "config.toml"
    cfg.write_text("[timeout]\nconnect = inf\n")
    with pytest.raises(ConfigError, match="timeout.connect: expected a number of seconds > 0"):
        load_config(cfg)
    s = tmp_path / "settings.json"
    s.write_text(json.dumps({"provider": {"timeout_seconds": 1e300}}))
    with pytest.raises(ConfigError, match="timeout_seconds: expected a value <= "):
        load_settings(s)


# -- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--rate", "1e4", "--duration", "1h"], ["--duration: ", "36,000,000 requests"]),
        (["--rate", "1e5", "--duration", "1h"], ["360,000,000 requests"]),
        (["--rate", "1", "--duration", "1e400s"], ["--duration: ", "at most 720h"]),
        (["--rate", "5", "--num-requests", "2000000"], ["--num-requests: 2,000,000 requests"]),
        (["--rate", "5", "--num-requests", "10", "--grace", "inf"], ["--grace: "]),
    ],
)
def test_quick_runs_say_it_in_one_line(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["run", *argv, "--target", "http://127.0.0.1:9", "--model", "m", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert not list(tmp_path.rglob("*.journal.jsonl")), "nothing may run"


def test_a_quick_run_raises_the_limit_with_set(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--rate", "1e4", "--duration", "1h", "--target", "http://127.0.0.1:9"]
    assert cli.main([*argv, "--set", "max_planned_requests=40000000", "--explain"]) == 0
    capsys.readouterr()


def test_a_sweep_too_large_to_list_is_refused_before_listing(tmp_path):
    from harness.orchestrate.sweep import load_sweep

    (tmp_path / "base.toml").write_text(
        '[workload]\nprompt_tokens = { dist = "fixed", value = 8 }\n'
        'output_tokens = { dist = "fixed", value = 4 }\n'
        '[[phases]]\nname = "m"\nduration = "1s"\narrival = { process = "poisson", rate = 1 }\n'
    )
    values = ", ".join(str(v) for v in range(1, 101))
    (tmp_path / "sw.toml").write_text(
        'scenario = "base.toml"\n[server.vary]\n'
        + "".join(f"{k} = [{values}]\n" for k in ("a", "b", "c", "d", "e"))
        + "[load]\nrate = [1, 2]\n"
    )
    with pytest.raises(ConfigError, match=r"100 x 100 x 100 x 100 x 100 server settings x 2"):
        load_sweep(str(tmp_path / "sw.toml"))
