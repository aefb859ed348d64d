"""sweep: file validation, points, resume after an interrupted sweep, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.sweep_report import fold_repeats, pareto_front, render_sweep_text, t975
from harness.cli import main
from harness.errors import ConfigError
from harness.orchestrate.sweep import load_sweep, run_sweep

BASE = """
name = "tiny"
seed = 4
[workload]
prompt_tokens = { dist = "fixed", value = 32 }
output_tokens = { dist = "fixed", value = 16 }
[[phases]]
name = "main"
duration = "1.5s"
arrival = { process = "poisson", rate = 5.0 }
[sim]
gpu = "L4"
speedup = 10.0
"""


def _files(tmp: Path, sweep: str) -> Path:
    (tmp / "base.toml").write_text(BASE)
    (tmp / "sw.toml").write_text(sweep)
    return tmp / "sw.toml"


GRID = 'name = "g"\nscenario = "base.toml"\n[server]\nvary = { max_num_seqs = [2, 4] }\n[load]\nrate = [4.0, 8.0]\n'


def test_points_are_the_cross_product(tmp_path: Path) -> None:
    spec = load_sweep(str(_files(tmp_path, GRID)))
    assert [p.id for p in spec.points] == [
        "max_num_seqs=2/rate=4.0",
        "max_num_seqs=2/rate=8.0",
        "max_num_seqs=4/rate=4.0",
        "max_num_seqs=4/rate=8.0",
    ]
    assert (
        "sim.max_num_seqs=2" in spec.points[0].sets
        and "phases.0.arrival.rate=4.0" in spec.points[0].sets
    )


def test_link_keeps_max_concurrency_equal_to_max_num_seqs(tmp_path: Path) -> None:
    text = (
        'name = "l"\nscenario = "base.toml"\nlink = true\n[server]\nvary = { max_num_seqs = [2, 4] }\n'
        "[load]\nmax_concurrency = [2, 3, 4]\n"
    )
    spec = load_sweep(str(_files(tmp_path, text)))
    assert [p.id for p in spec.points] == [
        "max_num_seqs=2/max_concurrency=2",
        "max_num_seqs=4/max_concurrency=4",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # no load list at all
        ('scenario = "base.toml"\n[load]\n', "give exactly one of rate, concurrency"),
        # two kinds of load at once
        ('scenario = "base.toml"\n[load]\nrate = [1]\nconcurrency = [2]\n', "give exactly one of"),
        # a negative rate
        ('scenario = "base.toml"\n[load]\nrate = [-1]\n', "load.rate.0: expected a rate > 0"),
        # a setting the simulator does not have
        (
            'scenario = "base.toml"\n[server]\nvary = { max_num_seq = [2] }\n[load]\nrate = [1]\n',
            "sim.max_num_seq: unknown key",
        ),
        # an unknown server kind
        (
            'scenario = "base.toml"\n[server]\nkind = "tgi"\n[load]\nrate = [1]\n',
            "server.kind: expected one of 'sim', 'vllm', 'llama.cpp', 'external'",
        ),
        (
            'scenario = "base.toml"\n[server]\nkind = "vllm"\nconfig = "nope.toml"\n[load]\nrate = [1]\n',
            "server.config: ",
        ),
        # a phase that does not exist
        ('scenario = "base.toml"\n[load]\nphases = ["x"]\nrate = [1]\n', "unknown phase 'x'"),
        # link without max_num_seqs
        (
            'scenario = "base.toml"\nlink = true\n[load]\nrate = [1]\n',
            "link: needs server.vary.max_num_seqs",
        ),
    ],
)
def test_bad_sweep_files_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_sweep(str(_files(tmp_path, text)))


def test_fold_repeats_and_pareto() -> None:
    runs = [{"output_tokens_per_s": v} for v in (10.0, 12.0, 14.0)]
    m = fold_repeats(runs)["output_tokens_per_s"]
    assert m["mean"] == 12.0 and m["n"] == 3
    assert m["ci95_high"] - 12.0 == pytest.approx(t975(2) * 2 / 3**0.5)  # sd 2, n 3
    assert fold_repeats([{"output_tokens_per_s": 5.0}])["output_tokens_per_s"]["ci95_low"] is None
    # (1, 9) and (5, 5) and (9, 1) are the front; (4, 4) is dominated by (5, 5)
    assert pareto_front([(1, 9), (4, 4), (5, 5), (9, 1)]) == [(1, 9), (5, 5), (9, 1)]


@pytest.mark.slow
def test_sweep_resumes_without_redoing_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        'name = "r"\nscenario = "base.toml"\n[server]\nvary = { max_num_seqs = [2, 8] }\n'
        "[load]\nrate = [30.0]\n"
    )
    spec = load_sweep(str(_files(tmp_path, text)))
    out = tmp_path / "out"
    s1 = run_sweep(spec, out, quiet=True, stop_after_runs=1)  # interrupted after one point
    assert [p["status"] for p in s1["points"]] == ["done", "pending"]
    assert s1["sweep"]["finished"] is False
    first = out / (spec.points[0].file_stem(0) + ".json")
    mtime = first.stat().st_mtime_ns
    with pytest.raises(Exception, match="use --resume"):
        run_sweep(spec, out, quiet=True)
    s2 = run_sweep(spec, out, resume=True, quiet=True)
    assert [p["status"] for p in s2["points"]] == ["done", "done"]
    assert first.stat().st_mtime_ns == mtime  # not redone
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sweep"]["finished"] is True
    r = json.loads((out / (spec.points[1].file_stem(0) + ".json")).read_text())
    assert r["target"]["kind"] == "simulator" and r["scenario"]["sim"]["max_num_seqs"] == 8
    # The running-set cap shows in the figures: a cap of 2 serves fewer tokens per second.
    m = [p["metrics"]["output_tokens_per_s"]["mean"] for p in summary["points"]]
    assert m[0] < 0.9 * m[1]
    text_report = render_sweep_text(summary)
    assert "max_num_seqs=2" in text_report and "rate=30.0" in text_report
    capsys.readouterr()
    assert main(["report", str(out / "summary.json")]) == 0
    assert "sweep r: 2 points" in capsys.readouterr().out
    # Compare works point by point on summaries.
    # itself: never a regression (exit 3 where the default gates cannot judge a short run)
    assert main(["compare", str(out / "summary.json"), str(out / "summary.json")]) in (0, 3)
    assert "point max_num_seqs=8/rate=30.0" in capsys.readouterr().out


@pytest.mark.slow
def test_sweep_command_with_repeats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = 'name = "rep"\nscenario = "base.toml"\n[load]\nrate = [5.0]\n'
    sw = _files(tmp_path, text)
    assert main(["sweep", str(sw), "--out", str(tmp_path / "o"), "--repeat", "2", "--quiet"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    p = summary["points"][0]
    assert len(p["runs"]) == 2 and p["runs"][0]["seed"] != p["runs"][1]["seed"]
    assert p["metrics"]["output_tokens_per_s"]["n"] == 2
    assert p["metrics"]["output_tokens_per_s"]["ci95_low"] is not None


def test_a_failed_run_says_its_own_error_not_a_stale_files(tmp_path: Path) -> None:
    """A resumed sweep whose point left an incomplete result earlier: the new run's failure
    (nothing listens at the target) is what the summary says, not the old file's stop reason.
    A summary.json that is not JSON is a one-line error."""
    from harness.errors import UsageError
    from tests.reliability.relhelp import free_port

    text = (
        f'name = "x"\nscenario = "base.toml"\n[server]\nkind = "external"\n'
        f'target = "http://127.0.0.1:{free_port()}"\n[load]\nrate = [4.0]\n'
    )
    spec = load_sweep(str(_files(tmp_path, text)))
    out = tmp_path / "out"
    run_sweep(spec, out, quiet=True, stop_after_runs=0)
    (out / (spec.points[0].file_stem(0) + ".json")).write_text(
        json.dumps({"complete": False, "stop_reason": "old"})
    )
    summary = run_sweep(spec, out, resume=True, quiet=True)
    err = summary["points"][0]["error"]
    assert summary["points"][0]["status"] == "failed" and "failed a first request" in err, err
    (out / "summary.json").write_text("{")
    with pytest.raises(UsageError, match="summary.json is not valid JSON"):
        run_sweep(spec, out, resume=True, quiet=True)


def test_the_launch_line_is_a_command_line_not_a_list(tmp_path: Path) -> None:
    """Issue 24: the simulator's launch line printed the argv list's repr."""
    from harness.orchestrate.servers import launch_line, settings_text, start_simulator

    server = start_simulator({"gpu": "L4", "speedup": 10.0}, "t.toml", tmp_path / "s.log")
    try:
        line = launch_line(server, tmp_path / "s.log")
    finally:
        server.stop()
    assert "['" not in line and "', '" not in line
    assert "-m harness sim" in line and "--speedup 10.0" in line
    assert settings_text({"max_num_seqs": 64, "enable_prefix_caching": False}) == (
        "max_num_seqs=64 enable_prefix_caching=false"
    )
