"""Where a GPU preset's numbers come from, in one line for `plan` and `predict`: which
coefficients were fitted on which published measurements, which the preset fitted on its own
class, and which are datasheet figures or unfitted defaults.

The shared coefficients (presets.py DEFAULT_*) were fitted once for every GPU on the fit split of
docs/validation.md ("The fit, and the split"); a preset that sets a coefficient names what it
was fitted on in its `fitted` table; a preset with a `calibration` (`sim calibrate`) says that
instead.
"""

from __future__ import annotations

from harness.sim import presets as p

FIT_SOURCES = "GPUStack's and Lambda's published vLLM runs on H100 and A100 (docs/validation.md)"
TP_FIT_SOURCES = "the V1 tensor-parallel points of that split"
# GpuPreset attribute -> (its preset-file name, the shared default, how it was set).
SHARED: dict[str, tuple[str, float, str]] = {
    "weight_bandwidth_efficiency": (
        "weight_bandwidth_efficiency",
        p.DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY,
        "fit",
    ),
    "kv_bandwidth_efficiency": (
        "kv_bandwidth_efficiency",
        p.DEFAULT_KV_BANDWIDTH_EFFICIENCY,
        "fit",
    ),
    "compute_efficiency": ("compute_efficiency", p.DEFAULT_COMPUTE_EFFICIENCY, "fit"),
    "per_sequence_overhead_s": (
        "per_sequence_overhead_ms",
        p.DEFAULT_PER_SEQUENCE_OVERHEAD_S,
        "fit",
    ),
    "intake_s_per_request": ("intake_ms_per_request", p.DEFAULT_INTAKE_S_PER_REQUEST, "fit"),
    "stream_s_per_token": ("stream_us_per_token", p.DEFAULT_STREAM_S_PER_TOKEN, "fit"),
    "request_latency_s": ("request_latency_ms", p.DEFAULT_REQUEST_LATENCY_S, "fit"),
    "tp_step_overhead_s": ("tp_step_overhead_ms", p.DEFAULT_TP_STEP_OVERHEAD_S, "tp"),
    "tp_sequence_overhead_s": (
        "tp_sequence_overhead_us",
        p.DEFAULT_TP_SEQUENCE_OVERHEAD_S,
        "tp",
    ),
    "step_overhead_s": ("step_overhead_ms", p.DEFAULT_STEP_OVERHEAD_S, "default"),
    "prefill_efficiency_factor": (
        "prefill_efficiency_factor",
        p.DEFAULT_PREFILL_EFFICIENCY_FACTOR,
        "default",
    ),
    "allreduce_bandwidth_efficiency": (
        "allreduce_bandwidth_efficiency",
        p.DEFAULT_ALLREDUCE_BANDWIDTH_EFFICIENCY,
        "default",
    ),
    "intake_s_per_prompt_token": (
        "intake_us_per_prompt_token",
        p.DEFAULT_INTAKE_S_PER_PROMPT_TOKEN,
        "default",
    ),
}


def coefficient_sources(gpu: p.GpuPreset) -> str:
    """One line: 'coefficients fitted on ...: a, b; on its own class: c (...); datasheet: ...;
    unfitted defaults: ...'. A calibrated preset (a CPU's) gives its calibration instead."""
    if gpu.calibration is not None:
        return gpu.calibration.describe()
    shared: dict[str, list[str]] = {"fit": [], "tp": [], "default": []}
    own: list[str] = []
    unsourced: list[str] = []
    for attr, (name, default, how) in SHARED.items():
        if getattr(gpu, attr) == default:
            shared[how].append(name)
        elif name in gpu.fitted:
            own.append(f"{name} ({gpu.fitted[name]})")
        else:
            unsourced.append(name)
    parts = [f"coefficients fitted on {FIT_SOURCES}: {', '.join(shared['fit'])}"]
    if shared["tp"]:
        parts.append(f"on {TP_FIT_SOURCES}: {', '.join(shared['tp'])}")
    if own:
        parts.append(f"fitted for this preset: {', '.join(own)}")
    if unsourced:
        parts.append(f"set by the preset file without a source: {', '.join(unsourced)}")
    parts.append(
        "datasheet: memory, bandwidth, FLOP/s, interconnect"
        + (f" ({gpu.source})" if gpu.source else "")
    )
    if shared["default"]:
        parts.append(f"unfitted defaults: {', '.join(shared['default'])}")
    return "; ".join(parts)
