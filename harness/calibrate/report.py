"""Calibration's output: the error table, the calibration record for a preset, and the
preset text with the fitted coefficients."""

from __future__ import annotations

import math
from collections.abc import Sequence

from harness.calibrate.replay import Calibration
from harness.sim.presets import Calibration as CalibrationRecord
from harness.sim.presets import GpuPreset, ModelPreset, gpu_to_toml, model_to_toml
from harness.sim.roofline import TUNABLE, Roofline

# ---- output ---------------------------------------------------------------------------------


def error_table(cal: Calibration) -> str:
    """The measured-vs-predicted table, one row per run (plain text, also a TOML comment). Its
    first column is the engine's cap on running requests: vLLM's max_num_seqs, llama.cpp's --parallel."""
    head = (
        f"{'max_num_seqs':>12}  {'role':<8}  {'out tok/s meas/pred':>20} {'err':>7}  "
        f"{'ITL mean ms':>15} {'err':>7}  {'TTFT mean ms':>17} {'err':>7}  {'TTFT p50 ms':>17} {'err':>7}"
    )
    lines = [head]
    for row in cal.rows:
        m, p, e = row["measured"], row["predicted"], row["error_pct"]
        lines.append(
            f"{row['max_num_seqs']:>12}  {row['role']:<8}  "
            f"{m['output_tokens_per_s']:>9.1f}/{p['output_tokens_per_s']:<10.1f} "
            f"{e['output_tokens_per_s']:>+6.1f}%  "
            f"{m['itl_mean_ms']:>6.1f}/{p['itl_mean_ms']:<8.1f} {e['itl_mean_ms']:>+6.1f}%  "
            f"{m['ttft_mean_ms']:>8.0f}/{p['ttft_mean_ms']:<8.0f} {e['ttft_mean_ms']:>+6.1f}%  "
            f"{m['ttft_p50_ms']:>8.0f}/{p['ttft_p50_ms']:<8.0f} {e['ttft_p50_ms']:>+6.1f}%"
        )
    return "\n".join(lines)


# The calibration record's names for the three figures (as builtin.toml's records spell them).
RECORD_FIGURES = {
    "output_tokens_per_s": "output_tokens_per_s",
    "itl_mean_ms": "itl_mean",
    "ttft_mean_ms": "ttft_mean",
    "ttft_p50_ms": "ttft_p50",
}


def _settings(values: Sequence[int]) -> str:
    return "max_num_seqs=" + ",".join(str(v) for v in sorted(set(values))) if values else ""


def calibration_record(
    cal: Calibration, engine: str, model: str, reference: str = "", measured_on: str = ""
) -> CalibrationRecord:
    """What `cal` was fitted to and, per figure, the worst |error| in % over the runs held out
    of the fit (an empty table when every run was fitted): the preset's own account of how far
    to trust it."""
    fit = [row["max_num_seqs"] for row in cal.rows if row["role"] == "fit"]
    held = [row for row in cal.rows if row["role"] == "held-out"]
    worst = {
        name: round(max(abs(row["error_pct"][key]) for row in held), 1)
        for key, name in RECORD_FIGURES.items()
        if held and all(math.isfinite(row["error_pct"][key]) for row in held)
    }
    return CalibrationRecord(
        engine=engine,
        model=model,
        fit_on=_settings(fit),
        held_out=_settings([row["max_num_seqs"] for row in held]),
        held_out_error_pct=worst,
        reference=reference,
        measured_on=measured_on,
    )


def calibrated_gpu(
    gpu: GpuPreset, roofline: Roofline, name: str, record: CalibrationRecord | None = None
) -> GpuPreset:
    """`gpu` renamed, with the roofline's coefficients and this fit's calibration record (the
    base preset's record, which described other coefficients, is dropped)."""
    from dataclasses import replace

    return replace(gpu, name=name, calibration=record, **{n: getattr(roofline, n) for n in TUNABLE})


def preset_text(gpu: GpuPreset, model: ModelPreset, cal: Calibration, command: str) -> str:
    """The preset file: a comment with how it was made and its errors, then the two tables."""
    comment = [
        "# Written by `python -m harness sim calibrate` -- load it with --preset-file.",
        f"# command: {command}",
        f"# fitted on: {', '.join(cal.fit_runs)} ({cal.steps_used} engine steps)",
        "# fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in cal.fitted.items()),
        f"# contention factor (measured / replayed mean ITL on the fit runs): "
        f"{cal.contention_factor:.3f}",
        "# prediction by replay on the virtual clock:",
        *("#   " + line for line in error_table(cal).splitlines()),
    ]
    return "\n".join(comment) + "\n\n" + gpu_to_toml(gpu) + "\n" + model_to_toml(model)
