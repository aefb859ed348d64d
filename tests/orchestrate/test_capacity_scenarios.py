"""`capacity` and `plan` on any scenario (issue 24): a `requests = N` phase (what the quick run's
`--save-scenario` writes), a closed loop and multi-turn sessions run as probes, converted and
said how in one line; what cannot (a ramp; sessions on the virtual clock) is refused before
anything starts, naming the file, the phase and the fix, and never blaming a `--set` that was
not given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import UsageError
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.virtual_capacity import measured_duration_s, probe_form, run_at

BASE = """
name = "s"
seed = 3
[workload]
prompt_tokens = {{ dist = "fixed", value = 32 }}
output_tokens = {{ dist = "fixed", value = 16 }}
{extra}
[[phases]]
name = "main"
{length}
arrival = {arrival}
[sim]
gpu = "L4"
max_num_seqs = 8
"""


def _write(tmp_path: Path, length: str, arrival: str, extra: str = "") -> Path:
    p = tmp_path / "s.toml"
    p.write_text(BASE.format(length=length, arrival=arrival, extra=extra))
    return p


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a server fails the test: refusals come before anything starts."""

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr("harness.orchestrate.servers.start_simulator", refuse)


def test_a_requests_phase_runs_for_the_probes_length(tmp_path: Path) -> None:
    """The quick run's saved scenario (`requests = 200`): on today's main every probe failed with
    `--set: phases.0.duration: ...` (plan: `got '0s'`)."""
    path = _write(tmp_path, "requests = 40", '{ process = "poisson", rate = 8.0 }')
    form = probe_form(load_scenario(path))
    assert form.describe() == (
        f"{path} as capacity probes: phases.0 (main): requests = 40 gives way to each probe's length"
    )
    scn = load_scenario(path, adapt=form.at(20.0, 6.0))
    ph = scn.phases[0]
    assert (ph.duration_s, ph.requests, ph.arrival.rate) == (6.0, None, 20.0)  # type: ignore[union-attr]
    assert measured_duration_s(load_scenario(path)) == 40 / 8.0  # the scenario's own length
    _, vp = run_at(str(path), [], 4.0, 3.0)  # a virtual probe of it runs
    assert vp.phase_windows_ns[0] == (0, 3_000_000_000)


def test_a_closed_loop_runs_as_poisson_arrivals(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        'duration = "5s"\nmax_concurrency = 8',
        '{ process = "closed", users = 4, think_time = "1s" }',
    )
    form = probe_form(load_scenario(path))
    assert "the closed loop of 4 users becomes Poisson arrivals" in form.describe()
    assert "without its max_concurrency" in form.describe()
    scn = load_scenario(path, adapt=form.at(3.0, 2.0))
    assert str(scn.phases[0].arrival) == "Poisson(3/s)" and scn.phases[0].max_concurrency is None


def test_multi_turn_probes_name_requests_per_second(tmp_path: Path) -> None:
    conv = 'conversation = { turns = { dist = "fixed", value = 3 }, think_time = "1s" }'
    path = _write(tmp_path, "requests = 10", '{ process = "poisson", rate = 2.0 }', conv)
    form = probe_form(load_scenario(path))
    assert form.requests_per_arrival == 3.0 and form.start_rate == 6.0  # 2 sessions/s x 3 turns
    assert "a probe at R req/s starts R/3 sessions/s and runs at least 10s" in form.describe()
    scn = load_scenario(path, adapt=form.at(9.0, 12.0))
    assert scn.phases[0].arrival.rate == 3.0  # type: ignore[union-attr]
    with pytest.raises(UsageError, match=r"s\.toml: workload\.conversation: the virtual clock"):
        probe_form(load_scenario(path), virtual=True)


def test_an_error_in_what_capacity_wrote_never_names_set(tmp_path: Path) -> None:
    """The document a probe runs is changed by `adapt`, not by `--set`: a key it breaks is the
    file's, and a user's own `--set` is still named."""
    path = _write(tmp_path, "requests = 40", '{ process = "poisson", rate = 8.0 }')
    with pytest.raises(Exception, match=r"^(?!--set).*phases\.0\.duration") as e:
        load_scenario(path, adapt=lambda doc: doc["phases"][0].update(duration="0s"))
    assert str(e.value).startswith(str(path))
    with pytest.raises(Exception, match=r"^--set: phases\.0\.requests"):
        load_scenario(path, ["phases.0.requests=0"])


@pytest.mark.usefixtures("no_server")
@pytest.mark.parametrize("command", ["capacity", "plan"])
def test_a_ramp_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = _write(tmp_path, 'duration = "5s"', '{ process = "ramp", start = 1, end = 8 }')
    assert main([command, str(path), "--slo", "ttft_p99=1s", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--set" not in err
    assert err.startswith(f"error: {path}: phases.0 (main): a ramp moves its rate")
    assert 'give the phase arrival = { process = "poisson", rate = R }' in err


@pytest.mark.usefixtures("no_server")
def test_plan_refuses_sessions_and_a_rateless_closed_loop_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = Path(__file__).resolve().parents[2]
    assert main(["plan", str(repo / "scenarios/multiturn.toml"), "--slo", "ttft_p99=1s"]) == 2
    err = capsys.readouterr().err
    assert "multiturn.toml: workload.conversation: the virtual clock cannot run" in err
    path = _write(tmp_path, "requests = 8", '{ process = "closed", users = 4 }')
    assert main(["plan", str(path), "--slo", "ttft_p99=1s"]) == 2
    assert "give --target-load RATE" in capsys.readouterr().err


def test_the_quick_runs_saved_scenario_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """quick run -> --save-scenario -> plan, on the virtual clock (no server, no real time)."""
    monkeypatch.chdir(tmp_path)
    saved = tmp_path / "mine.toml"
    quick = ["run", "--rate", "4", "--num-requests", "40", "--input-len", "64"]
    assert main([*quick, "--output-len", "16", "--save-scenario", str(saved), "--explain"]) == 0
    assert "requests = 40" in saved.read_text()
    out = tmp_path / "plan.json"
    args = ["plan", str(saved), "--slo", "ttft_p99=1s", "--gpus", "L4", "--out", str(out)]
    assert main([*args, "--max-num-seqs", "8"]) == 0
    err = capsys.readouterr().err
    assert "requests = 40 gives way to each probe's length" in err
    plan = json.loads(out.read_text())
    assert plan["options"][0]["feasible"] and plan["options"][0]["capacity_requests_per_s"] > 4


@pytest.mark.slow
def test_the_quick_runs_saved_scenario_finds_its_capacity_over_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """quick run -> --save-scenario -> capacity against the simulator over HTTP, short probes at
    a high speedup (issue 24: `error: --set: phases.0.duration ...` after the simulator started)."""
    monkeypatch.chdir(tmp_path)
    saved = tmp_path / "mine.toml"
    quick = ["run", "--rate", "4", "--num-requests", "40", "--input-len", "64", "--output-len"]
    argv = [*quick, "16", "--set", "sim.speedup=50", "--save-scenario", str(saved), "--explain"]
    assert main(argv) == 0
    o = tmp_path / "o"
    cap_args = ["capacity", str(saved), "--slo", "ttft_p99=2s", "--probe-duration", "1s"]
    rc = main([*cap_args, "--max-probes", "2", "--confirm-runs", "0", "--out", str(o)])
    err = capsys.readouterr().err
    assert "--set" not in err and "requests = 40 gives way to each probe's length" in err
    assert "virtual-clock estimate: " in err  # on the simulator, the virtual search first
    assert rc == 0, err
    rep = json.loads((o / "capacity.json").read_text())
    assert [p["rate"] for p in rep["probes"]] == [4.0, 8.0]
    assert all(p["passed"] for p in rep["probes"])


def test_virtual_and_no_estimate_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = tmp_path / "s.toml"
    s.write_text(
        'name = "s"\n[workload]\nprompt_tokens = { dist = "fixed", value = 32 }\n'
        'output_tokens = { dist = "fixed", value = 16 }\n[[phases]]\nname = "main"\n'
        'duration = "5s"\narrival = { process = "poisson", rate = 2.0 }\n'
    )
    argv = ["capacity", str(s), "--slo", "ttft_p99=1s", "--virtual", "--no-estimate"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert "--no-estimate" in capsys.readouterr().err
