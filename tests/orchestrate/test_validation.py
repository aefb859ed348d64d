"""The simulator against published measurements (docs/validation.md): every point recomputed
through `predict`, and the table and the per-class errors that `plan` and `predict` state are the
ones the code gives today (a change to the model that moves any prediction fails here until the
docs are regenerated: `python -m harness.orchestrate.validation --write`)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.orchestrate import validation as v
from harness.sim.presets import load_presets
from harness.sim.validation.errors import ERRORS, load_errors, validation_line

POINTS, _ = v.load_points()
COMMAND = "python -m harness.orchestrate.validation --write"


def _point(pid: str) -> v.Point:
    return next(p for p in POINTS if p.id == pid)


def test_a_point_becomes_the_scenario_it_describes(tmp_path: Path) -> None:
    lam = _point("lambda-h100-llama3-8b-tp1-burst320")
    doc = v.scenario_doc(lam, tmp_path)
    trace = Path(doc["phases"][0]["arrival"]["file"]).read_text().splitlines()
    assert len(trace) == lam.raw["num_prompts"]  # every request's own lengths, all at t=0
    closed = _point("gpustack-h100-qwen3-8b-sharegpt-c4")
    doc = v.scenario_doc(closed, tmp_path)
    assert doc["phases"][0]["arrival"] == {"process": "closed", "users": 4}
    assert doc["workload"]["prompt_tokens"]["mean"] == closed.raw["input_len_mean"]
    sim = v.sim_settings(_point("gpustack-h100-qwen3-235b-fp8-tp4-sharegpt"))
    assert (sim["tensor_parallel_size"], sim["dtype"]) == (4, "fp8")


def test_an_offline_point_runs_without_the_api_server(tmp_path: Path) -> None:
    files = v.PresetFiles(tmp_path, {})
    assert files.file_for("H200", offline=False) is None
    gpu = load_presets(files.file_for("H200", offline=True)).gpus["H200"]
    assert all(getattr(gpu, name) == 0 for name in v.API_SERVER_COEFFICIENTS)
    assert load_presets().gpus["H200"].intake_s_per_request > 0
    off = v.validate([_point("vllm-ci-h200-llama8b-tp1-latency-bs8")])
    assert off and all(r.predicted is not None for r in off)


def test_coefficients_move_the_prediction() -> None:
    # the fit's handle: a slower weight read gives a slower single stream
    p = _point("gpustack-h100-qwen3-8b-sharegpt-c1")
    base = {r.figure: r.predicted for r in v.validate([p])}
    slow = {r.figure: r.predicted for r in v.validate([p], {"weight_bandwidth_efficiency": 0.35})}
    assert slow["tpot_p50_ms"] > 1.7 * base["tpot_p50_ms"]  # type: ignore[operator]


@pytest.mark.slow
@pytest.mark.virtual  # no wall time measured: beside a server test at idle priority
def test_every_point_is_recomputed_as_the_docs_state() -> None:
    rows = v.validate(POINTS) + v.plan_rows(POINTS)
    figures = sum(len(p.figures) for p in POINTS)
    assert len(rows) == figures + len(v.plan_points(POINTS))
    assert sum(r.predicted is not None for r in rows) >= 0.9 * len(rows)
    assert all(math.isfinite(r.ratio) for r in rows if r.ratio is not None)
    doc = v.VALIDATION_DOC.read_text()
    assert v.markdown(rows) in doc, f"regenerate: {COMMAND}"
    assert ERRORS.read_text() == v.errors_toml(rows, COMMAND), f"regenerate: {COMMAND}"


def test_plan_and_predict_state_the_errors_the_file_holds() -> None:
    errors = load_errors()
    assert errors["class"], "errors.toml has no class"
    for cls, figures in errors["class"].items():
        for fig, splits in figures.items():
            assert fig in v.SUMMARIZED
            for split in splits.values():
                assert 0 <= split["median"] <= split["worst"] and split["points"] >= 1
        line = validation_line(f"{cls}-X")
        if any("held_out" in s for s in figures.values()):
            assert "error on held-out published points" in line
        else:
            assert "not validated" in line
