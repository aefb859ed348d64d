"""`run --repeat N --until-decided BASELINE` (issue 45): runs until compare's gate can decide or
the budget ends. Each "run" is a prediction on the simulator's virtual clock (no HTTP), written
where the run would write its result."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main

SCENARIO = """
name = "small"
seed = 1
[workload]
prompt_tokens = { dist = "uniform", min = 50, max = 150 }
output_tokens = { dist = "uniform", min = 8, max = 32 }
ignore_eos = true
[[phases]]
name = "main"
requests = 80
arrival = { process = "poisson", rate = 4.0 }
[sim]
gpu = "L4"
"""


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[str]]:
    scenario = tmp_path / "small.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    base = tmp_path / "base"
    for k in range(3):
        assert main(["predict", str(scenario), "--seed", str(10 + k), "--quiet",
                     "--out", str(base / f"b{k}.json")]) == 0  # fmt: skip
    seeds = itertools.count(100)
    made: list[str] = []

    def fake_run(args: Any, **_: Any) -> int:
        made.append(str(args.out))
        return main(["predict", str(scenario), "--seed", str(next(seeds)), "--quiet",
                     "--out", str(args.out)])  # fmt: skip

    monkeypatch.setattr("harness.orchestrate.run.run_command", fake_run)
    return scenario, base, made


def test_a_loose_gate_is_decided_after_three_runs(
    setup: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, base, made = setup
    rc = main(["run", str(scenario), "--repeat", "auto", "--until-decided", str(base),
               "--max-regression", "ttft_p50=200%", "--out", str(tmp_path / "c.json")])  # fmt: skip
    err = capsys.readouterr()
    assert rc == 0, err.err[-2000:]
    assert len(made) == 3 and "after 3 runs: PASS" in err.err
    assert "overall: PASS" in err.out


def test_a_gate_the_budget_cannot_decide_stops_and_says_what_would(
    setup: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, base, made = setup
    rc = main(["run", str(scenario), "--repeat", "4", "--until-decided", str(base),
               "--max-regression", "tpot_mean=0.01%", "--out", str(tmp_path / "c.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 3
    assert 3 <= len(made) <= 4
    assert "runs per side would decide it" in err


def test_until_decided_flags_are_checked(
    setup: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, _, _ = setup
    assert main(["run", str(scenario), "--repeat", "auto"]) == 2
    assert "--repeat auto: only with --until-decided" in capsys.readouterr().err
