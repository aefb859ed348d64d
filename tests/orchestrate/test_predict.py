"""`predict` (issue 23 item 2): a scenario's plan on the simulator's virtual clock, written as a
run's result and marked as a prediction. Everything here runs on the virtual clock except the
one comparison with a run over HTTP against the simulator (marked slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from harness.analysis.html import render_result_html
from harness.analysis.report_text import PREDICTION_HEADLINE, render_text
from harness.analysis.result import load_result
from harness.cli import main
from harness.orchestrate.predict import NOT_VALIDATED, predict_result, simulate
from harness.orchestrate.scenario import load_scenario
from harness.sim.presets import load_presets
from harness.sim.validation.errors import validation_line
from harness.workload.plan import build_plan

REPO = Path(__file__).resolve().parents[2]

SMALL = """
name = "small"
seed = 5
[workload]
prompt_tokens = {{ dist = "uniform", min = 64, max = 512 }}
output_tokens = {{ dist = "uniform", min = 16, max = 96 }}
ignore_eos = true
[[phases]]
name = "warm"
warmup = true
duration = "2s"
arrival = {{ process = "poisson", rate = 4.0 }}
[[phases]]
name = "main"
duration = "10s"
arrival = {{ process = "poisson", rate = {rate} }}
{extra}
[sim]
gpu = "L4"
{sim}
"""


def _scenario(write_scenario, rate: float = 6.0, extra: str = "", sim: str = "") -> Path:
    return write_scenario(SMALL.format(rate=rate, extra=extra, sim=sim))


def _predict(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["predict", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_predict_writes_a_result_that_report_and_compare_load(write_scenario, tmp_path, capsys):
    path = _scenario(write_scenario)
    slow, fast = tmp_path / "l4.json", tmp_path / "h100.json"
    rc, out, _ = _predict(capsys, str(path), "--out", str(slow), "--quiet")
    assert rc == 0 and out.strip() == str(slow)
    rc, out, _ = _predict(capsys, str(path), "--gpu", "H100-SXM", "--tp", "2", "--out", str(fast))
    assert rc == 0 and out.strip().splitlines()[-1] == str(fast)
    assert out.startswith(PREDICTION_HEADLINE)  # the report is printed, prediction first
    r = load_result(fast)  # checked against the shipped schema
    assert r["complete"] and r["accounting"]["balanced"] is True
    assert r["prediction"]["gpu"] == "H100-SXM" and r["prediction"]["tensor_parallel_size"] == 2
    assert (tmp_path / "h100.journal.jsonl").is_file()  # beside it, as a run's

    assert main(["report", str(fast)]) == 0
    assert capsys.readouterr().out.startswith(PREDICTION_HEADLINE)
    rebuilt = tmp_path / "rebuilt.json"
    assert main(["report", str(tmp_path / "h100.journal.jsonl"), "--out", str(rebuilt)]) == 0
    capsys.readouterr()
    assert orjson.loads(rebuilt.read_bytes())["summary"] == r["summary"]

    # better everywhere it is judged; exit 3 where a gated p99 of a short run is not
    assert main(["compare", str(slow), str(fast), "--format", "json"]) in (0, 3)
    doc = orjson.loads(capsys.readouterr().out)
    notes = doc["comparisons"][0]["notes"]
    assert any("is a prediction" in n for n in notes)
    ttft = next(row for row in doc["comparisons"][0]["rows"] if row["metric"] == "ttft_p50")
    assert ttft["verdict"] == "better"  # H100 x2 against an L4


def test_requests_and_lengths_are_the_plans(write_scenario):
    scn = load_scenario(_scenario(write_scenario))
    pred = simulate(scn)
    plan = build_plan(pred.scenario)
    planned_out = np.concatenate([pp.output_tokens for pp in plan.phases])
    planned_prompt = np.concatenate([pp.prompt_tokens for pp in plan.phases])
    recs = sorted(pred.records, key=lambda r: r.seq)
    assert len(recs) == plan.total_requests > 50
    assert [r.planned_output_tokens for r in recs] == planned_out.tolist()
    assert [r.planned_prompt_tokens for r in recs] == planned_prompt.tolist()
    assert [r.output_tokens for r in recs] == planned_out.tolist()  # ignore_eos: all of it
    assert all(len(r.chunk_ns) == r.output_tokens for r in recs)
    # the simulator counts its chat template around the prompt, as it does over HTTP
    assert all(r.prompt_tokens > r.planned_prompt_tokens for r in recs)

    result = predict_result(scn)
    measured = plan.phases[1]
    assert result["summary"]["requests"]["planned_or_due"] == measured.count
    assert result["summary"]["requests"]["completed"] == measured.count
    assert result["summary"]["tokens"]["output_total"] == int(measured.output_tokens.sum())
    assert result["phases"][0]["requests"]["completed"] == plan.phases[0].count
    assert result["files"]["journal"] is None  # built in memory: nothing written


def test_a_faster_gpu_predicts_lower_ttft_and_tpot(write_scenario):
    scn = load_scenario(_scenario(write_scenario))
    lat = {
        gpu: predict_result(scn, {"gpu": gpu})["summary"]["latency_ms"]
        for gpu in ("L4", "H100-SXM")
    }
    for metric in ("ttft", "tpot", "itl"):
        assert lat["H100-SXM"][metric]["p50"] < lat["L4"][metric]["p50"], metric
    # and more GPUs of one kind (tensor parallel) decode faster still
    tp2 = predict_result(scn, {"gpu": "H100-SXM", "tensor_parallel_size": 2})
    assert tp2["summary"]["latency_ms"]["tpot"]["p50"] < lat["H100-SXM"]["tpot"]["p50"]


def test_a_prediction_runs_the_model_at_real_speed_unless_asked(write_scenario, capsys, tmp_path):
    scn = load_scenario(_scenario(write_scenario, sim="speedup = 10.0"))
    real = predict_result(scn)
    assert real["prediction"]["speedup"] == 1.0 and real["scenario"]["sim"]["speedup"] == 1.0
    fast = predict_result(scn, {"speedup": 10.0})
    # asked for, the model runs 10x faster than the wall; the result reports the model's time
    # (issue 24), so TPOT is no tenth of the real-speed one, and the result says so
    assert fast["clock"]["speedup"] == 10.0 and "clock" not in real
    assert (
        fast["summary"]["latency_ms"]["tpot"]["p50"]
        > real["summary"]["latency_ms"]["tpot"]["p50"] / 5
    )
    path = _scenario(write_scenario, sim="speedup = 10.0")
    rc, _, err = _predict(capsys, str(path), "--out", str(tmp_path / "a.json"))
    assert rc == 0 and "sim.speedup = 10.0 is not used" in err
    rc, _, _ = _predict(
        capsys, str(path), "--set", "sim.speedup=10", "--out", str(tmp_path / "b.json"), "--quiet"
    )
    assert rc == 0 and load_result(tmp_path / "b.json")["prediction"]["speedup"] == 10.0


def test_the_prediction_is_marked_in_json_text_and_html(write_scenario, tmp_path, capsys):
    presets = tmp_path / "presets.toml"
    presets.write_text(  # a GPU nobody validated
        '[gpu."test-gpu"]\nmemory_gib = 48\nbandwidth_gb_per_s = 900\nbf16_tflop_per_s = 180\n',
        encoding="utf-8",
    )
    path = _scenario(write_scenario, sim=f'preset_file = "{presets}"')
    out = tmp_path / "r.json"
    rc, _, _ = _predict(capsys, str(path), "--gpu", "test-gpu", "--out", str(out), "--html")
    assert rc == 0
    r = load_result(out)
    assert r["target"]["kind"] == "prediction"
    p = r["prediction"]
    assert (p["gpu"], p["validated"]) == ("test-gpu", False)
    assert p["validation"].startswith(f"{NOT_VALIDATED}. Preset: coefficients fitted on ")
    assert p["model"] == "Qwen2.5-7B-Instruct" and p["weights_dtype"] == "bf16"
    lines = render_text(r).splitlines()
    assert lines[0].startswith(f"{PREDICTION_HEADLINE}: test-gpu x1, Qwen2.5-7B-Instruct")
    assert lines[1].startswith(f"  validation of the test-gpu preset: {NOT_VALIDATED}. Preset:")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert PREDICTION_HEADLINE in html and "validation of the test-gpu preset" in html
    assert render_result_html(r, out).count(PREDICTION_HEADLINE) == 1


def test_a_validated_preset_carries_its_validation(write_scenario):
    presets = load_presets()
    name, gpu = next((n, g) for n, g in presets.gpus.items() if g.calibration is not None)
    assert gpu.calibration is not None
    scn = load_scenario(_scenario(write_scenario, rate=0.5))
    r = predict_result(scn, {"gpu": name, "model": gpu.calibration.model, "speedup": 50.0})
    assert r["prediction"]["validated"] is True
    assert r["prediction"]["validation"] == gpu.calibration.describe()
    assert render_text(r).splitlines()[1].endswith(gpu.calibration.describe())


def test_a_class_with_fitted_points_only_says_it_is_not_validated_and_what_the_fit_gave(
    write_scenario, monkeypatch
):
    # a class whose published points were all fitted on (A100 in today's errors.toml; here a
    # stand-in table, so that the check holds whatever points are added): not validated, and
    # the line carries the error on those points, named as no validation
    from harness.sim.validation import errors

    fitted = {"fit": {"points": 5, "median": 2.9, "worst": 20.6}}
    table = {"class": {"A100": {"output_tokens_per_s": fitted}}}
    monkeypatch.setattr(errors, "load_errors", lambda path=errors.ERRORS: table)
    scn = load_scenario(_scenario(write_scenario, rate=0.5))
    p = predict_result(scn, {"gpu": "A100-80GB", "speedup": 50.0})["prediction"]
    assert p["validated"] is False
    assert p["validation"].startswith(
        "A100-80GB: not validated (no A100 point is held out of the fit); error on the A100 "
        "points the coefficients were fitted on, which is not a validation: "
        "output_tokens_per_s median 3% / worst 21% (n=5). Preset: "
    )
    # which coefficients were fitted on what: the A100's own compute efficiency named
    assert "fitted for this preset: compute_efficiency (the A100 points" in p["validation"]


def test_what_the_virtual_run_leaves_out_is_in_the_warnings(write_scenario):
    scn = load_scenario(_scenario(write_scenario, sim="faults = { http500 = 0.1 }"))
    r = predict_result(scn)
    warnings = r["client"]["warnings"]
    assert any(w.startswith("prediction leaves out sim.faults") for w in warnings)
    assert "WARNING: prediction leaves out sim.faults" in render_text(r)
    assert r["summary"]["requests"]["failed"] == 0  # no fault was injected


def _in_flight_max(records) -> int:
    """The most requests in flight at once (sent, not yet ended)."""
    edges = sorted([(r.sent_ns, 1) for r in records] + [(r.end_ns, -1) for r in records])
    now = most = 0
    for _, d in edges:  # an end and a send at one instant: the end first (-1 sorts first)
        now += d
        most = max(most, now)
    return most


def test_a_concurrency_cap_is_simulated(write_scenario):
    # 12 req/s offered, at most 2 in flight: requests wait for a slot (send lag), never more
    scn = load_scenario(_scenario(write_scenario, rate=12.0, extra="max_concurrency = 2"))
    pred = simulate(scn, {"speedup": 1.0})
    main = [r for r in pred.records if r.phase == 1]
    assert _in_flight_max(main) == 2
    assert max(r.sent_ns - r.intended_ns for r in main) > 1e9  # far behind the schedule
    free = simulate(load_scenario(_scenario(write_scenario, rate=12.0)), {"speedup": 1.0})
    assert _in_flight_max([r for r in free.records if r.phase == 1]) > 2


def test_a_closed_loop_is_simulated(write_scenario):
    # 3 users, no think time: always 3 in flight, each user's next send at its last token
    path = write_scenario(
        SMALL.format(rate=1.0, extra="", sim="").replace(
            'arrival = { process = "poisson", rate = 1.0 }',
            'arrival = { process = "closed", users = 3 }',
        )
    )
    pred = simulate(load_scenario(path), {"speedup": 1.0})
    main = sorted((r for r in pred.records if r.phase == 1), key=lambda r: r.sent_ns)
    assert _in_flight_max(main) == 3 and len(main) > 6
    ends = sorted(r.end_ns for r in main)
    later = main[3:]  # every send after the first three follows an end, at that instant
    assert all(r.sent_ns in ends for r in later)
    assert all(r.intended_ns == r.sent_ns for r in main)  # a closed loop has no schedule
    assert max(r.sent_ns for r in main) <= 12 * 10**9  # none sent after the phase's end


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--gpu", "H1000"], "--gpu H1000: unknown GPU 'H1000'; allowed: "),
        (["--model", "gpt-9"], "--model gpt-9: unknown model 'gpt-9'; allowed: "),
        (["--tp", "0"], "--tp 0: expected an integer >= 1, got 0"),
        (["--tp", "two"], "--tp two: expected an integer >= 1, got 'two'"),
        (["--max-num-seqs", "-3"], "--max-num-seqs -3: expected an integer >= 1, got -3"),
        (["--set", "sim.gpu=H1000"], "--set: sim.gpu: unknown GPU 'H1000'"),
        (  # fits on two L4s at half their memory, not on one: the flags chose the setting
            ["--gpu", "L4", "--tp", "1"]
            + ["--set", "sim.tensor_parallel_size=2", "--set", "sim.gpu_memory_utilization=0.5"],
            "--gpu L4 --tp 1: Qwen2.5-7B-Instruct does not fit on L4 x1",
        ),
    ],
)
def test_bad_flags_are_one_line_exit_2(write_scenario, tmp_path, capsys, argv, says):
    path = _scenario(write_scenario)
    rc, out, err = _predict(capsys, str(path), *argv, "--out", str(tmp_path / "r.json"))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {says}"), err
    assert not (tmp_path / "r.json").exists()


def test_a_phase_after_a_counted_closed_loop_starts_when_it_ends(write_scenario):
    # 5 requests from 2 users warm up, then the Poisson phase: it starts at the warm-up's last
    # answer, and its planned times move with it
    path = write_scenario(
        SMALL.format(rate=4.0, extra="", sim="").replace(
            'duration = "2s"\narrival = { process = "poisson", rate = 4.0 }',
            'requests = 5\narrival = { process = "closed", users = 2 }',
        )
    )
    pred = simulate(load_scenario(path), {"speedup": 1.0})
    warm = [r for r in pred.records if r.phase == 0]
    main = sorted((r for r in pred.records if r.phase == 1), key=lambda r: r.intended_ns)
    assert len(warm) == 5 and main
    warm_end = max(r.end_ns for r in warm)
    assert min(r.intended_ns for r in main) >= warm_end
    assert all(r.sent_ns == r.intended_ns for r in main)  # open loop, no cap: on schedule
    plan = build_plan(load_scenario(path))
    offsets = np.round(plan.phases[1].offsets_s * 1e9).astype(np.int64)
    got = np.array(sorted(r.intended_ns for r in main)) - warm_end
    assert np.allclose(got, np.sort(offsets)[: len(got)], atol=2)


def test_a_scenario_the_virtual_clock_cannot_run_is_one_line_exit_2(write_scenario, capsys):
    # a conversation's later turns carry the answers' text, which the virtual clock has not
    path = write_scenario(
        SMALL.format(rate=1.0, extra="", sim="").replace(
            "ignore_eos = true",
            'ignore_eos = true\nconversation = { turns = { dist = "fixed", value = 2 } }',
        )
    )
    rc, _, err = _predict(capsys, str(path))
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "conversation" in err, err


# A load past an L4's capacity for this model at max_num_seqs 8, so output tokens/s is the
# model's, not the offered load's; speedup 5 keeps the real-time run short for a busy machine.
COMPARED = SMALL.format(rate=14.0, extra="", sim="max_num_seqs = 8\nspeedup = 5.0").replace(
    'duration = "10s"', 'duration = "4s"'
)
AGREEMENT = 0.15  # a run over HTTP adds the client's and the event loop's own time


@pytest.mark.slow
def test_a_prediction_agrees_with_a_run_against_the_simulator(write_scenario, tmp_path):
    path = write_scenario(COMPARED)
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(path), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,  # this worktree's harness
    )
    assert proc.returncode == 0, proc.stderr
    measured = load_result(out)
    predicted = predict_result(load_scenario(path), {"speedup": 5.0})
    for a, b in (("requests", "completed"), ("tokens", "output_total")):  # the same work
        assert predicted["summary"][a][b] == measured["summary"][a][b], (a, b)
    m = measured["summary"]["throughput"]["output_tokens_per_s"]
    p = predicted["summary"]["throughput"]["output_tokens_per_s"]
    assert abs(p / m - 1) < AGREEMENT, (p, m)
    m, p = (r["summary"]["latency_ms"]["tpot"]["p50"] for r in (measured, predicted))
    assert abs(p / m - 1) < AGREEMENT, (p, m)


def test_a_gpu_class_with_held_out_points_states_its_validated_error(write_scenario):
    # H100 has held-out published points (errors.toml): the prediction says how far they miss
    scn = load_scenario(_scenario(write_scenario, rate=0.5))
    r = predict_result(scn, {"gpu": "H100-SXM", "speedup": 50.0})
    assert r["prediction"]["validated"] is True
    line = r["prediction"]["validation"]
    assert line.startswith(validation_line("H100-SXM") + ". Preset: coefficients fitted on ")
    assert "error on held-out published points" in render_text(r)
    # H100's efficiencies are the fitted ones, not an uncalibrated preset's
    assert "GPUStack's and Lambda's published vLLM runs" in line
    assert "datasheet: memory, bandwidth, FLOP/s, interconnect" in line
    assert "uncalibrated" not in render_text(r)
