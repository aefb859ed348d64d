"""The simulator against published measurements (docs/validation.md): every point recomputed
through `predict`, and the table and the per-class errors that `plan` and `predict` state are the
ones the code gives today (a change to the model that moves any prediction fails here until the
docs are regenerated: `python -m harness.orchestrate.validation --write`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate import validation as v
from harness.orchestrate import validation_engine as ve  # what the command calls: patched there
from harness.orchestrate import validation_fit as vf
from harness.orchestrate import validation_report as vr
from harness.orchestrate.validation_regimes import comparisons, intervals_toml
from harness.sim.presets import load_presets
from harness.sim.validation import table
from harness.sim.validation.errors import ERRORS, load_errors, validation_line
from harness.sim.validation.intervals import INTERVALS

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


def test_evenly_spaced_arrivals_replay_as_such_and_a_derived_figure_says_so(tmp_path: Path) -> None:
    # inference-sim's client spaced requests evenly ("constant"), the MLPerf runs' are Poisson
    even = _point("inferencesim-h100-llama2-70b-tp4-general-20rps")
    phase = v.scenario_doc(even, tmp_path)["phases"][0]
    assert phase["arrival"] == {"process": "constant", "rate": 20.0}
    assert phase["duration"] == "600.0s"  # the published stage, not the 60 s default
    out = v.scenario_doc(even, tmp_path)["workload"]["output_tokens"]
    assert out == {"dist": "fixed", "value": 248}  # the length asked, with ignore_eos
    poisson = _point("redhat-h100-llama31-8b-fp8-server39p5")
    assert v.scenario_doc(poisson, tmp_path)["phases"][0]["arrival"]["process"] == "poisson"
    assert "req/s constant for 600 s" in table.load_shape(even.raw)
    r = even.raw  # the derived TPOT: (E2E p50 - TTFT p50) / (the length asked - 1)
    assert r["tpot_p50_ms"] == pytest.approx((r["e2e_p50_ms"] - r["ttft_p50_ms"]) / 247, abs=1e-3)
    assert "ms (derived); E2E p50" in table.figures(r)  # TPOT's cell, the one before E2E
    assert "(derived)" not in table.figures(poisson.raw)
    # a figure kept as published but not compared (tool_*) is no figure of the comparison
    assert "tool_tpot_p50_ms" in even.raw and "tool_tpot_p50_ms" not in v.FIGURES
    assert "tpot_p50_ms" in even.figures


def test_a_shared_system_prompt_replays_as_prefix_groups_within_the_prompt(tmp_path: Path) -> None:
    # inference-sim's shared_prefix runs: 10 groups share a 100-token system prompt, inside the
    # published prompt length; the simulator's prefix cache (on, as vLLM V1's) reuses it
    p = _point("inferencesim-h100-llama2-7b-tp1-general-8rps")
    work = v.scenario_doc(p, tmp_path)["workload"]
    assert work["prefix_groups"] == {"groups": 10, "tokens": {"dist": "fixed", "value": 100}}
    assert work["prompt_tokens"] == {"dist": "fixed", "value": p.raw["input_len"] - 100}
    other = v.scenario_doc(_point("redhat-h100-llama31-8b-fp8-server39p5"), tmp_path)
    assert "prefix_groups" not in other["workload"]


def test_a_repeated_prompt_replays_as_a_cached_prefix_and_its_last_block(tmp_path: Path) -> None:
    # AccelMark sends the same prompts in every run; vLLM V1's prefix cache holds them, so the
    # replay sends one shared prefix (a hit after the first request) and the last partial block
    p = _point("accelmark-a100-llama3-8b-online-25rps")
    assert p.raw["repeated_prompts"]
    work = v.scenario_doc(p, tmp_path)["workload"]
    total = round(p.raw["input_len_mean"])
    own = v.REPEAT_UNCACHED_TOKENS
    assert work["prompt_tokens"] == {"dist": "fixed", "value": own}
    assert work["prefix_groups"] == {"groups": 1, "tokens": {"dist": "fixed", "value": total - own}}


def test_a_capped_mean_is_drawn_so_that_the_capped_draws_keep_it(tmp_path: Path) -> None:
    # a published mean of answers that stopped at max_tokens: the lognormal is drawn wider so
    # that, capped at the maximum, it averages the published mean (not 19 % below it)
    p = _point("accelmark-a100-llama3-8b-offline")
    out = v.scenario_doc(p, tmp_path)["workload"]["output_tokens"]
    assert out["max"] == p.raw["output_len_max"] and out["mean"] > p.raw["output_len_mean"]
    kept = v.clipped_mean(out["mean"], out["max"])
    assert kept == pytest.approx(p.raw["output_len_mean"], rel=1e-3)
    assert v.clipped_mean(p.raw["output_len_mean"], out["max"]) < 0.85 * p.raw["output_len_mean"]
    # without a maximum the published mean is drawn as it is
    free = v.scenario_doc(_point("gpustack-h100-qwen3-8b-sharegpt-c4"), tmp_path)
    assert free["workload"]["output_tokens"]["mean"] == 220.6


def test_each_row_carries_the_regime_predict_reads_from_its_prediction() -> None:
    # the one rule both sides of a comparison are classified by (docs/validation.md, "Regimes")
    from harness.sim.validation import intervals as iv

    one = _point("wmx-l4-qwen25-0p5b-c1")
    eight = _point("wmx-l4-qwen25-0p5b-c8")
    rows = v.validate([one, eight])
    assert {r.regime for r in rows if r.point is one} == {iv.ONE_USER}
    assert {r.regime for r in rows if r.point is eight} == {iv.LOADED}  # 8 users: > 4


def test_an_offline_point_runs_without_the_api_server(tmp_path: Path) -> None:
    files = v.PresetFiles(tmp_path, {})
    assert files.file_for("H200", offline=False) is None
    gpu = load_presets(files.file_for("H200", offline=True)).gpus["H200"]
    assert all(getattr(gpu, name) == 0 for name in v.API_SERVER_COEFFICIENTS)
    assert load_presets().gpus["H200"].intake_s_per_request > 0
    off = v.validate([_point("vllm-ci-h200-llama8b-tp1-latency-bs8")])
    assert off and all(r.predicted is not None for r in off)


def test_an_in_process_point_runs_without_the_api_server() -> None:
    # AccelMark drives vLLM's AsyncLLMEngine from Python: no HTTP server, no API-server costs
    p = _point("accelmark-a100-llama3-8b-interactive")
    assert p.raw["harness"] in ve.NO_API_SERVER and "offline" in ve.NO_API_SERVER
    rows = v.validate([p])
    assert rows and all(r.predicted is not None for r in rows)


def test_a_v0_point_is_read_with_the_v0_tp_overhead(tmp_path: Path) -> None:
    files = v.PresetFiles(tmp_path, {})
    assert files.file_for("H100-SXM", offline=False, v0=False) is None  # V1: the presets' own
    v0 = load_presets(files.file_for("H100-SXM", offline=False, v0=True)).gpus["H100-SXM"]
    assert v0.tp_step_overhead_s == v.V0_COEFFICIENTS["tp_step_overhead_s"]
    assert v0.tp_sequence_overhead_s == 0.0
    assert load_presets().gpus["H100-SXM"].tp_sequence_overhead_s > 0
    assert _point("lambda-h100-llama3-8b-tp2-burst320").v0
    assert not _point("gpustack-h100-qwen3-235b-tp8-sharegpt").v0


def test_a_coefficient_a_gpu_sets_itself_is_not_overridden(tmp_path: Path) -> None:
    files = v.PresetFiles(tmp_path, {"compute_efficiency": 0.2})
    a100 = load_presets(files.file_for("A100-80GB", offline=False)).gpus["A100-80GB"]
    h100 = load_presets(files.file_for("H100-SXM", offline=False)).gpus["H100-SXM"]
    assert a100.compute_efficiency == load_presets().gpus["A100-80GB"].compute_efficiency != 0.2
    assert h100.compute_efficiency == 0.2


def test_capacity_is_checked_only_where_the_sweep_has_headroom() -> None:
    ops = [op for op in v.operating_points(POINTS) if not op.slos]
    assert ops
    for op in ops:
        # the published latency stands well above the sweep's single-user one
        assert (
            op.limit_ms >= v.PLAN_HEADROOM["ttft" if op.metric == "ttft" else "tpot"] * op.single_ms
        )
        assert int(op.point.raw["max_concurrency"]) >= 2 and not op.point.multi_step
    got = {(op.point.id, op.metric) for op in ops}
    # GPUStack's H100 sweep: TPOT 7.2 -> 7.7 ms and TTFT ~60 ms from 1 to 8 users: no check
    assert not any(pid.startswith("gpustack-") for pid, _ in got)
    # InferenceBench's 8B at 16 users: TPOT 10.94 ms against 6.48 at one user (1.69x)
    assert ("inferencebench-docs-h100-llama31-8b-c16", "tpot") in got
    # L4 at 2 users: TTFT 37.8 ms against 27 (1.40x, under 1.60x), ITL 5.2 against 5.1
    assert not any(pid == "wmx-l4-qwen25-0p5b-c2" for pid, _ in got)


def test_a_run_held_to_latency_limits_is_a_capacity_check_under_them() -> None:
    # MLPerf's interactive scenario: Poisson arrivals held to TTFT p99 <= 450 ms and TPOT p99 <=
    # 40 ms; the run met them at 34.65 completed requests/s on 4 replicas
    ops = {op.point.id: op for op in v.operating_points(POINTS) if op.slos}
    op = ops["krai-h100-llama31-70b-fp8-tp2x4-interactive35"]
    assert op.slo_list == ("ttft_p99=450ms", "tpot_p99=40ms")
    assert op.rate_per_s == 34.65 and op.point.replicas == 4
    # an offline run (no limits) is not one
    assert not any("offline" in pid for pid in ops)


def test_a_point_of_several_replicas_is_one_replicas_share_and_their_sum(tmp_path: Path) -> None:
    p = _point("krai-h100-llama31-70b-fp8-tp2x4-interactive35")
    doc = v.scenario_doc(p, tmp_path)
    phase = doc["phases"][0]
    assert phase["arrival"] == {"process": "poisson", "rate": 35 / 4}
    assert phase["requests"] == 21000 // 4
    assert doc["workload"]["output_tokens"]["max"] == 1024  # the published cap
    one = v.predict_point(p, v.sim_settings(p), tmp_path)[0]
    alone = v.Point(
        p.id,
        p.source,
        {**p.raw, "data_parallel": 1, "request_rate": 35 / 4, "num_prompts": 21000 // 4},
    )
    single = v.predict_point(alone, v.sim_settings(alone), tmp_path)[0]
    assert single["output_tokens_per_s"] is not None
    assert one["output_tokens_per_s"] == pytest.approx(4 * single["output_tokens_per_s"])
    assert one["tpot_p50_ms"] == pytest.approx(single["tpot_p50_ms"])  # per request: as is
    assert table.load_shape(p.raw) == "35 req/s Poisson x 21000, 4 replicas"  # the docs say so


def test_a_capacity_check_without_an_answer_is_counted_not_dropped() -> None:
    p = _point("wmx-l4-qwen25-0p5b-c8")
    rows = [
        v.Row(p, v.PLAN_FIGURE, 10.0, 25.0, slo="ttft_p50=60ms"),
        v.Row(p, v.PLAN_FIGURE, 10.0, None, "no rate met the SLO", slo="ttft_p50=50ms"),
    ]
    # a closed-loop sweep point: summarised under its own figure, never a margin's
    closed = vr.CLOSED_LOOP_FIGURE
    assert v.summarize(rows)[(closed, "L4", "held out")] == (1, 150.0, 150.0)
    assert v.unanswered(rows) == {(closed, "L4", "held out"): 1}
    toml = v.errors_toml(rows, "x")
    assert f"class.L4.{closed}.held_out = {{ points = 1, median = 150.0, worst = 150.0, " in toml
    assert "unanswered = 1" in toml and v.PLAN_FIGURE not in toml
    assert f"| {closed} | L4 | held out | 1 | 150.0 | 150.0 | - | 1 |" in v.summary_markdown(rows)
    # a run held to SLOs in open load (MLPerf's server runs) stays plan's capacity figure
    held = _point("redhat-l40s-llama31-8b-fp8-server9p3")
    row = v.Row(held, v.PLAN_FIGURE, 9.3, 11.0, slo="ttft_p99=2000ms, tpot_p99=100ms")
    assert (v.PLAN_FIGURE, "L40S", "held out") in v.summarize([row])


def test_a_publisher_left_out_takes_the_values_the_others_choose() -> None:
    # two publishers that want different values: each fold is chosen by the other one only
    a, b = _point("wmx-l4-qwen25-0p5b-c1"), _point("inferencebench-docs-h100-llama31-8b-c1")
    owner = {a.source: "A", b.source: "B"}
    combos = [{"request_latency_s": 0.01}, {"request_latency_s": 0.04}]
    fig = "ttft_p50_ms"
    runs = [
        [v.Row(a, fig, 30.0, 30.0), v.Row(b, fig, 14.0, 28.0)],  # A exact, B 2x
        [v.Row(a, fig, 30.0, 60.0), v.Row(b, fig, 14.0, 14.0)],  # A 2x, B exact
    ]
    folds, together = vf.choose_folds(combos, runs, owner)
    by = {f.publisher: f for f in folds}
    assert by["A"].chosen == combos[1] and by["B"].chosen == combos[0]
    assert [r.predicted for r in by["A"].rows] == [60.0]  # A's error where B chose: 100 %
    assert by["A"].train_loss == pytest.approx(0.0)
    assert together in combos
    table = v.cross_validation_markdown(folds, together)
    assert "| A | 0.04 | 0.0000 | - | - | 100.0 (n=1) |" in table


def test_each_publisher_gets_its_target_figures_median_error() -> None:
    # --set prints, per publisher, the median |error| of output tokens/s, TPOT and TTFT p50
    a = _point("wmx-l4-qwen25-0p5b-c1")
    b, c = (
        _point("gpustack-h100-qwen3-8b-sharegpt-c1"),
        _point("gpustack-h100-qwen3-8b-sharegpt-c2"),
    )
    rows = [
        v.Row(a, "ttft_p50_ms", 30.0, 45.0),  # +50 %
        v.Row(b, "tpot_p50_ms", 10.0, 11.0),  # +10 %
        v.Row(c, "tpot_p50_ms", 10.0, 7.0),  # -30 %: the median of 10 and 30 is 20
        v.Row(c, "ttft_p50_ms", 10.0, None),  # could not run: not in the median
    ]
    table = v.publisher_markdown(rows).splitlines()
    assert "| ai.wmx.dev | - | - | 50.0 (n=1) |" in table
    assert "| GPUStack | - | 20.0 (n=2) | - |" in table


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
    assert len(rows) == figures + len(v.operating_points(POINTS))
    assert sum(r.predicted is not None for r in rows) >= 0.9 * len(rows)
    assert all(math.isfinite(r.ratio) for r in rows if r.ratio is not None)
    refit = vf.refit_rows(POINTS, vf.load_refits())  # the fit publishers, each refitted without
    doc = vr.VALIDATION_DOC.read_text()
    assert vr.generated_section(rows, refit) in doc, f"regenerate: {COMMAND}"
    assert vr.VALIDATION_TABLE.read_text() == vr.table_page(rows, COMMAND), f"regenerate: {COMMAND}"
    assert ERRORS.read_text() == v.errors_toml(rows, COMMAND), f"regenerate: {COMMAND}"
    comps = comparisons(rows, v.publishers(), refit)
    assert INTERVALS.read_text() == intervals_toml(comps, COMMAND), f"regenerate: {COMMAND}"


def test_plan_and_predict_state_the_errors_the_file_holds() -> None:
    errors = load_errors()
    assert errors["class"], "errors.toml has no class"
    for cls, figures in errors["class"].items():
        for fig, splits in figures.items():
            assert fig in (*v.SUMMARIZED, vr.CLOSED_LOOP_FIGURE)
            for split in splits.values():
                assert 0 <= split["median"] <= split["worst"] and split["points"] >= 1
        line = validation_line(f"{cls}-X")
        if any("held_out" in s for s in figures.values()):
            assert "error on held-out published points" in line
        else:
            assert "not validated" in line


def test_also_adds_a_coefficient_to_the_fit_and_only_to_the_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --fit --also NAME fits FIT_COEFFICIENTS and NAME together (the joint refit); --also without
    # --fit, or with a name that is not a coefficient, is one error line and exit 2
    seen: dict[str, Any] = {}

    def fake_fit(
        points: Sequence[v.Point],
        names: object,
        rounds: int = 60,
        start: object = None,
        in_sample: bool = False,
    ) -> tuple[dict[str, float], float]:
        seen.update(names=names, rounds=rounds, start=start, in_sample=in_sample)
        seen["points"] = points
        return {"tp_sequence_overhead_s": 2e-5}, 0.5

    monkeypatch.setattr(vf, "fit", fake_fit)
    assert v.main(["--fit", "--rounds", "3", "--also", "tp_sequence_overhead_s"]) == 0
    full = seen.pop("points")
    assert seen == {
        "names": (*vf.FIT_COEFFICIENTS, "tp_sequence_overhead_s"),
        "rounds": 3,
        "start": {},
        "in_sample": False,
    }
    assert "tp_sequence_overhead_s = 2e-05" in capsys.readouterr().out
    assert v.main(["--fit", "--also", "compute_efficiency"]) == 0  # already fitted: once
    assert seen["names"] == vf.FIT_COEFFICIENTS
    # --start: the search begins at that value instead of the presets'
    argv = ["--fit", "--also", "tp_sequence_overhead_s", "--start", "tp_sequence_overhead_s=2e-5"]
    assert v.main(argv) == 0
    assert seen["start"] == {"tp_sequence_overhead_s": 2e-5}
    # --in-sample --cap-s: every point fitted, long open-loop runs shortened to about S seconds
    assert v.main(["--fit", "--in-sample", "--cap-s", "120"]) == 0
    assert seen["in_sample"] is True
    short = {p.id: p for p in seen["points"]}
    for p in full:
        r, c = p.raw, short[p.id].raw
        if "planned_duration_s" in r:
            assert c["planned_duration_s"] == min(float(r["planned_duration_s"]), 120.0)
        if r.get("request_rate") not in (None, "inf") and r.get("num_prompts"):
            assert c["num_prompts"] <= math.ceil(float(r["request_rate"]) * 120)
        if "lengths_file" in r:
            assert c == r  # a published per-request trace is replayed whole
    assert any(short[p.id].raw != p.raw for p in full)
    for bad, says in (
        (["--also", "tp_sequence_overhead_s"], "--also: only with --fit"),
        (["--fit", "--also", "name"], "'name': expected a GpuPreset coefficient"),
        (["--start", "compute_efficiency=0.5"], "--start: only with --fit"),
        (["--in-sample"], "--in-sample: only with --fit"),
        (["--fit", "--cap-s", "0"], "--cap-s 0: expected seconds > 0"),
        (
            ["--fit", "--start", "prefill_efficiency_factor=0.9"],
            "--start prefill_efficiency_factor: not",
        ),
    ):
        with pytest.raises(SystemExit) as stop:
            v.main(bad)
        assert stop.value.code == 2
        assert says in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_fit_starts_where_start_says_and_elsewhere_at_the_presets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The simplex's first vertex is every fitted coefficient's start: the presets' value, or
    # the one --start gives; the loss is asked there first.
    from harness.sim.presets import DEFAULT_COMPUTE_EFFICIENCY

    asked: list[dict[str, float]] = []

    def fake_validate(points: object, values: dict[str, float], *_: object) -> list[v.Row]:
        asked.append(dict(values))
        return []

    monkeypatch.setattr(vf, "validate", fake_validate)
    names = ("compute_efficiency", "tp_sequence_overhead_s")
    vf.fit([], names, rounds=0, start={"tp_sequence_overhead_s": 2e-5})
    first = asked[0]
    assert first["compute_efficiency"] == pytest.approx(DEFAULT_COMPUTE_EFFICIENCY)
    assert first["tp_sequence_overhead_s"] == pytest.approx(2e-5)
    # a share of a datasheet rate is held within MAX_SHARE: no GPU beats its datasheet
    asked.clear()
    vf.fit([], names, rounds=0, start={"compute_efficiency": 3.0})
    assert asked[0]["compute_efficiency"] == vf.MAX_SHARE < 1.0


def test_set_tries_coefficients_and_refuses_what_is_not_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --set NAME=VALUE reaches validate (every point) and plan_rows; --set-v0 the V0 points only
    seen: dict[str, object] = {}

    def fake_validate(
        points: object, coefficients: object = None, v0: object = None
    ) -> list[v.Row]:
        seen.update(coefficients=coefficients, v0=v0)
        return []

    monkeypatch.setattr(ve, "validate", fake_validate)
    monkeypatch.setattr(ve, "plan_rows", lambda points, coefficients=None: [])
    assert (
        v.main(["--set", "intake_s_per_request=0.001", "--set-v0", "request_latency_s=0.04"]) == 0
    )
    assert seen["coefficients"] == {"intake_s_per_request": 0.001}
    assert seen["v0"] == {**v.V0_COEFFICIENTS, "request_latency_s": 0.04}
    out = capsys.readouterr().out
    assert "fit-split loss" in out and "over every point" in out
    for bad in (
        ["--set", "name=1"],
        ["--set", "intake_s_per_request=7ms"],
        ["--set", "intake_s_per_request=0.001", "--write"],
        ["--cross-validate", "--write"],
        ["--fit", "--cross-validate"],
    ):
        with pytest.raises(SystemExit) as stop:
            v.main(bad)
        assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--fit and --cross-validate: give one of them" in err


def _held_out_rows() -> list[v.Row]:
    # four held-out publishers' TPOT at a light load, and one closed-loop capacity check
    ids = (
        "wmx-l4-qwen25-0p5b-c2",
        "wmx-l4-qwen25-0p5b-c4",
        "inferencebench-docs-h100-llama31-8b-c4",
        "inferencebench-h100-qwen25-72b-tp4-c4",
    )
    rows = [
        v.Row(_point(pid), "tpot_p50_ms", 10.0, 10.0 * (1 + i / 10)) for i, pid in enumerate(ids)
    ]
    rows.append(v.Row(_point("wmx-l4-qwen25-0p5b-c8"), v.PLAN_FIGURE, 10.0, 25.0, slo="x"))
    return rows


def test_intervals_and_write_store_what_the_rows_give(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from harness.sim.validation import errors, intervals

    rows = _held_out_rows()
    monkeypatch.setattr(ve, "validate", lambda points, *a: rows[:-1])
    monkeypatch.setattr(ve, "plan_rows", lambda points, *a: rows[-1:])
    monkeypatch.setattr(vf, "load_refits", lambda path=None: {})  # no publisher refitted
    # --intervals: the tables --write stores, printed, nothing written
    assert v.main(["--intervals"]) == 0
    out = capsys.readouterr().out
    # two publishers (ai.wmx.dev 1.0, 1.1; InferenceBench 1.2, 1.3): the new-publisher interval
    spread = intervals.publisher_spread({"wmx": [1.0, 1.1], "ib": [1.2, 1.3]})
    assert spread is not None
    lo, mid, hi = spread.quantile(0.1), math.exp(spread.center), spread.quantile(0.9)
    assert f"| light load | tpot_p50_ms | 4 | 2 | {lo:.2f} | {mid:.2f} | {hi:.2f} |" in out
    assert "| capacity at a closed-loop operating point | plan_capacity_per_s | 1 |" in out
    # --write: intervals.toml, errors.toml, the doc's generated section (only), the table page
    doc, table = tmp_path / "validation.md", tmp_path / "validation-table.md"
    doc.write_text(f"# head\n\n{vr.BEGIN}\nold\n{vr.END}\n\n## tail\n")
    monkeypatch.setattr(errors, "ERRORS", tmp_path / "errors.toml")
    monkeypatch.setattr(intervals, "INTERVALS", tmp_path / "intervals.toml")
    monkeypatch.setattr(vr, "VALIDATION_DOC", doc)
    monkeypatch.setattr(vr, "VALIDATION_TABLE", table)
    vr.write(rows, COMMAND, doc, table)
    text = doc.read_text()
    assert text.startswith("# head\n\n") and text.endswith(f"{vr.END}\n\n## tail\n")
    assert "old" not in text and vr.generated_section(rows) in text
    assert table.read_text() == vr.table_page(rows, COMMAND)
    stored = intervals.load_intervals(tmp_path / "intervals.toml")
    assert stored["regime"]["light load"]["tpot_p50_ms"]["n"] == 4
    assert f"`{COMMAND}`" in (tmp_path / "intervals.toml").read_text()


def test_a_fit_publisher_is_predicted_at_coefficients_refitted_without_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from harness.orchestrate.validation_regimes import comparisons as held_out

    owner = v.publishers()
    gpustack = [p for p in POINTS if owner[p.source] == "GPUStack"]
    # only points no other fitted value saw: no A100 point, tensor parallel 1 only
    assert not vf.refit_eligible(_point("gpustack-a100-qwen3-14b-sharegpt"))
    assert not vf.refit_eligible(_point("gpustack-h100-qwen3-235b-tp8-sharegpt"))
    assert vf.refit_eligible(_point("gpustack-h100-qwen3-8b-sharegpt-c1"))
    assert vf.fit_publishers(POINTS) == ["GPUStack", "Lambda (LambdaLabsML)"]
    # --refit-publishers stores each refit; refit_rows predicts that publisher's points there
    monkeypatch.setattr(
        vf,
        "refit_publishers",
        lambda points, rounds: {"GPUStack": ({"request_latency_s": 0.01}, 0.5)},
    )
    monkeypatch.setattr(vf, "REFITS", tmp_path / "refits.toml")
    assert v.main(["--refit-publishers", "--rounds", "2"]) == 0
    assert "# without GPUStack: loss 0.5000" in capsys.readouterr().out
    refits = vf.load_refits(tmp_path / "refits.toml")
    assert refits == {"GPUStack": {"request_latency_s": 0.01}}
    asked: list[tuple[list[str], object]] = []

    def fake_validate(points: Sequence[v.Point], coefficients: object = None) -> list[v.Row]:
        asked.append(([p.id for p in points], coefficients))
        return [v.Row(p, "tpot_p50_ms", 10.0, 12.0) for p in points]

    monkeypatch.setattr(ve, "validate", fake_validate)
    monkeypatch.setattr(ve, "plan_rows", lambda points, coefficients=None: [])
    rows = vf.refit_rows(POINTS, refits)
    ids, coefficients = asked[0]
    assert coefficients == {"request_latency_s": 0.01}
    assert set(ids) == {p.id for p in gpustack if vf.refit_eligible(p)} and ids
    # a refitted row counts as held out although its point is of the fit split
    assert all(r.point.split == "fit" for r in rows)
    assert len(held_out(rows, owner)) == 0 and len(held_out([], owner, rows)) == len(rows)
