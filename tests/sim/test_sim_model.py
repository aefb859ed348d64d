"""The roofline's newer terms, in model times: tensor parallelism's all-reduce bandwidth and
per-GPU overhead, prefill efficiency, FP8 weights and KV cache, MoE on active parameters, and
the presets that carry them (parsing, errors, round trips, tunability)."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from harness.calibrate.fit import BOUNDS
from harness.calibrate.report import calibrated_gpu
from harness.errors import ConfigError, UsageError
from harness.sim.cli import build_parser, settings_from_args
from harness.sim.presets import (
    INTERCONNECTS,
    GpuPreset,
    gpu_to_toml,
    load_presets,
    model_to_toml,
    parse_presets,
)
from harness.sim.roofline import TUNABLE, Roofline
from harness.sim.settings import SimSettings

LLAMA8 = "Llama-3.1-8B-Instruct"


def _roof(gpu: str = "H100-SXM", model: str = LLAMA8, tp: int = 1, **kw: str) -> Roofline:
    return SimSettings(gpu=gpu, model=model, tensor_parallel_size=tp, **kw).resolved().roofline


def _prefill_s(r: Roofline, n: int) -> float:
    return r.step_time_s(n, 1, 1, 0, n * (n + 1) / 2)


# ---- tensor parallelism ------------------------------------------------------------------


def test_all_reduce_costs_latency_plus_ring_bandwidth_per_step_token() -> None:
    r2 = _roof(tp=2)
    gpu = load_presets().gpus["H100-SXM"]
    assert gpu.interconnect == "nvlink4" and gpu.link_bytes_per_s == 450e9
    # 2 all-reduces per layer, each 2 (tp-1)/tp * tokens * hidden * 2 bytes over the link
    per_token = 2 * 32 * (2 * 1 / 2 * 4096 * 2) / (450e9 * r2.allreduce_bandwidth_efficiency)
    fixed = 2 * 32 * r2.allreduce_latency_s + 1 * r2.tp_step_overhead_s
    assert r2.comm_s(0.0, 0.0) == pytest.approx(fixed)
    assert r2.comm_s(1000.0, 0.0) - r2.comm_s(0.0, 0.0) == pytest.approx(1000 * per_token)
    assert _roof(tp=1).comm_s(8192.0, 0.0) == 0.0


def test_the_per_step_overhead_grows_with_each_extra_gpu() -> None:
    r2, r4 = (
        _roof(model="Llama-3.1-70B-Instruct", tp=2),
        _roof(model="Llama-3.1-70B-Instruct", tp=4),
    )
    assert r2.tp_step_overhead_s > 0
    # same all-reduce count; tp 4 has two more GPUs' overhead and a larger ring share
    fixed_gap = r4.comm_s(0.0, 0.0) - r2.comm_s(0.0, 0.0)
    assert fixed_gap == pytest.approx(2 * r2.tp_step_overhead_s)
    assert r4.allreduce_bytes_per_token == pytest.approx(1.5 * r2.allreduce_bytes_per_token)


def test_the_per_sequence_tp_overhead_grows_with_the_batch_and_each_extra_gpu() -> None:
    r2, r4 = (
        _roof(model="Llama-3.1-70B-Instruct", tp=2).with_coefficients(tp_sequence_overhead_s=2e-5),
        _roof(model="Llama-3.1-70B-Instruct", tp=4).with_coefficients(tp_sequence_overhead_s=2e-5),
    )
    # 256 sequences on tp 2: 256 x 20 us more than an empty step; on tp 4, three GPUs' worth
    assert r2.comm_s(256.0, 256.0) - r2.comm_s(256.0, 0.0) == pytest.approx(256 * 2e-5)
    assert r4.comm_s(256.0, 256.0) - r4.comm_s(256.0, 0.0) == pytest.approx(3 * 256 * 2e-5)
    assert _roof(tp=1).with_coefficients(tp_sequence_overhead_s=2e-5).comm_s(256.0, 256.0) == 0.0


def test_pcie_makes_tensor_parallel_prefill_slower_than_nvlink() -> None:
    sxm = _roof("H100-SXM", tp=2).with_coefficients(compute_efficiency=0.5)
    pcie = dataclasses.replace(sxm, link_bytes_per_s=INTERCONNECTS["pcie5"][0] * 1e9)
    assert _prefill_s(pcie, 8192) > _prefill_s(sxm, 8192) * 1.5
    # one decode token: the bandwidth term is tiny either way
    assert pcie.decode_step_s(1, 128) == pytest.approx(sxm.decode_step_s(1, 128), rel=0.01)


def test_tensor_parallel_speeds_decode_by_less_than_its_gpu_count() -> None:
    r1, r2 = _roof(tp=1), _roof(tp=2)
    ratio = r1.decode_step_s(256, 1000) / r2.decode_step_s(256, 1000)
    assert 1.0 < ratio < 1.9


# ---- prefill efficiency ----------------------------------------------------------------


def test_prefill_efficiency_slows_prompt_rows_and_not_decode() -> None:
    base = _roof()
    slow = base.with_coefficients(prefill_efficiency_factor=0.5)
    assert slow.decode_step_s(64, 500) == base.decode_step_s(64, 500)
    t_base, t_slow = _prefill_s(base, 4096), _prefill_s(slow, 4096)
    # compute-bound: the 4095 prompt rows' matmuls take twice as long
    extra = 4095 * base.matmul_flop_per_token / (base.flop_per_s * base.compute_efficiency)
    assert t_slow - t_base == pytest.approx(extra, rel=0.05)


# ---- FP8 ---------------------------------------------------------------------------------


def test_fp8_weights_are_one_byte_and_the_embedding_and_head_stay_16_bit() -> None:
    model = load_presets().models[LLAMA8]
    fp8 = model.with_dtypes("fp8")
    assert fp8.weight_bytes == model.layer_params + 2 * (model.params - model.layer_params)
    assert model.with_dtypes("bfloat16").weight_bytes == model.weight_bytes == 2 * model.params
    assert model.with_dtypes(kv_cache_dtype="fp8").kv_bytes_per_token * 2 == (
        model.kv_bytes_per_token
    )
    with pytest.raises(ValueError, match="allowed: auto, bfloat16, float16, fp8"):
        model.with_dtypes("int4")


def test_fp8_runs_on_fp8_tensor_cores_where_the_gpu_has_them() -> None:
    h100, h100_fp8 = _roof(), _roof(dtype="fp8")
    assert h100_fp8.layer_flop_per_s == 1979e12
    assert h100_fp8.weight_bytes < 0.6 * h100.weight_bytes
    assert h100_fp8.decode_step_s(1, 128) < 0.65 * h100.decode_step_s(1, 128)
    assert _prefill_s(h100_fp8, 8192) < 0.6 * _prefill_s(h100, 8192)
    # A100 has no FP8 tensor cores: vLLM's W8A16 path reads 1 byte and computes in bf16
    a100, a100_fp8 = _roof("A100-80GB"), _roof("A100-80GB", dtype="fp8")
    assert a100_fp8.layer_flop_per_s == 0.0
    assert a100_fp8.decode_step_s(1, 128) < 0.65 * a100.decode_step_s(1, 128)
    assert _prefill_s(a100_fp8, 8192) == pytest.approx(_prefill_s(a100, 8192), rel=0.03)


def test_an_fp8_kv_cache_holds_twice_the_tokens() -> None:
    bf16 = SimSettings(gpu="H100-SXM", model=LLAMA8).resolved()
    kv8 = SimSettings(gpu="H100-SXM", model=LLAMA8, kv_cache_dtype="fp8").resolved()
    assert kv8.num_gpu_blocks == pytest.approx(2 * bf16.num_gpu_blocks, abs=1)


def test_bad_dtypes_are_refused_naming_the_allowed_values() -> None:
    with pytest.raises(ConfigError, match=r"sim\.dtype.*auto, bfloat16, float16, fp8"):
        SimSettings.from_mapping({"dtype": "fp4"}, "s.toml")
    with pytest.raises(ConfigError, match=r"sim\.kv_cache_dtype.*fp8_e4m3"):
        SimSettings.from_mapping({"kv_cache_dtype": "int8"}, "s.toml")
    ns = build_parser().parse_args(["--dtype", "fp8", "--kv-cache-dtype", "fp8_e5m2"])
    s = settings_from_args(ns)
    assert (s.dtype, s.kv_cache_dtype) == ("fp8", "fp8_e5m2")
    assert s.to_argv() == ["--dtype", "fp8", "--kv-cache-dtype", "fp8_e5m2"]
    with pytest.raises(UsageError, match="--dtype: expected one of auto"):
        settings_from_args(build_parser().parse_args(["--dtype", "int8"]))


# ---- MoE ---------------------------------------------------------------------------------


def test_moe_presets_count_total_and_active_parameters() -> None:
    models = load_presets().models
    mixtral, qwen = models["Mixtral-8x7B-Instruct-v0.1"], models["Qwen3-30B-A3B"]
    # Mistral AI: 46.7B total, 12.9B used per token; Qwen: 30.5B total, 3.3B activated
    assert mixtral.params / 1e9 == pytest.approx(46.7, abs=0.1)
    embed = mixtral.embedding_params + mixtral.lm_head_params
    assert (mixtral.active_layer_params + embed) / 1e9 == pytest.approx(12.9, abs=0.1)
    assert qwen.params / 1e9 == pytest.approx(30.5, abs=0.1)
    embed = qwen.embedding_params + qwen.lm_head_params
    assert (qwen.active_layer_params + embed) / 1e9 == pytest.approx(3.3, abs=0.1)
    assert mixtral.weight_bytes == 2 * mixtral.params  # memory holds every expert


def test_moe_reads_the_experts_its_tokens_pick() -> None:
    r = _roof(model="Mixtral-8x7B-Instruct-v0.1", tp=2)
    assert r.experts_read(1.0) == pytest.approx(2.0)  # one token: its top-2
    assert r.experts_read(2.0) == pytest.approx(8 * (1 - (6 / 8) ** 2))
    assert r.experts_read(256.0) == pytest.approx(8.0)  # a large batch touches them all
    # compute on the active parameters only
    model = load_presets().models["Mixtral-8x7B-Instruct-v0.1"]
    assert r.matmul_flop_per_token == pytest.approx(2 * model.active_layer_params / 2)
    # a one-token decode step reads 2 of 8 experts: far less than the whole model
    all_read = r.weight_bytes + 8 * r.expert_bytes
    assert all_read == pytest.approx(model.weight_bytes / 2 - model.embedding_params, rel=1e-6)
    one = r.weight_bytes + 2 * r.expert_bytes
    assert one < 0.35 * all_read
    assert r.decode_step_s(1, 128) < r.decode_step_s(64, 128) < r.decode_step_s(256, 128) * 1.01


def test_moe_preset_errors_name_the_key() -> None:
    base = {
        "num_layers": 2,
        "hidden_size": 64,
        "num_heads": 4,
        "num_kv_heads": 4,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": 100,
        "max_position_embeddings": 512,
    }
    with pytest.raises(ConfigError, match=r"model\.m\.moe_intermediate_size.*missing"):
        parse_presets({"model": {"m": {**base, "num_experts": 4, "num_experts_per_tok": 2}}}, "f")
    bad = {**base, "num_experts": 4, "num_experts_per_tok": 8, "moe_intermediate_size": 32}
    with pytest.raises(ConfigError, match="num_experts_per_tok.*more than num_experts 4"):
        parse_presets({"model": {"m": bad}}, "f")


# ---- presets -----------------------------------------------------------------------------


def test_every_builtin_gpu_names_its_interconnect_and_fp8_where_it_has_it() -> None:
    gpus = load_presets().gpus
    links = {n: g.interconnect for n, g in gpus.items() if not n.startswith("cpu-")}
    assert links == {
        "A100-40GB": "nvlink3",
        "A100-80GB": "nvlink3",
        "H100-SXM": "nvlink4",
        "H100-PCIe": "pcie5",
        "H200": "nvlink4",
        "L40S": "pcie4",
        "L4": "pcie4",
        "B200": "nvlink5",
        "GB200": "nvlink5",
        "H20": "nvlink4",
        "MI300X": "xgmi",
        "MI325X": "xgmi",
        "RTX-PRO-6000": "pcie5",
    }
    fp8 = {n: g.fp8_flop_per_s / 1e12 for n, g in gpus.items() if g.fp8_flop_per_s}
    assert fp8 == {
        "H100-SXM": 1979,
        "H100-PCIe": 1513,
        "H200": 1979,
        "L40S": 733,
        "L4": 242.5,
        "B200": 4500,
        "GB200": 5000,
        "H20": 296,
        "MI300X": 2614.9,
        "MI325X": 2614.9,
        "RTX-PRO-6000": 1007.6,
    }


def test_an_unknown_interconnect_is_refused_with_the_allowed_names() -> None:
    gpu = {"memory_gib": 8, "bandwidth_gb_per_s": 100, "bf16_tflop_per_s": 10}
    with pytest.raises(ConfigError, match="unknown interconnect 'ib'; allowed: nvlink3, nvlink4"):
        parse_presets({"gpu": {"g": {**gpu, "interconnect": "ib"}}}, "f")


def test_new_gpu_and_model_fields_survive_a_round_trip() -> None:
    gpu = dataclasses.replace(
        load_presets().gpus["H100-PCIe"],
        tp_step_overhead_s=2e-3,
        intake_s_per_request=1e-3,
        stream_s_per_token=5e-5,
        prefill_efficiency_factor=0.8,
        allreduce_latency_s=1.2e-5,
    )
    back = parse_presets(tomllib.loads(gpu_to_toml(gpu)), "t").gpus["H100-PCIe"]
    for name in TUNABLE + ("interconnect", "fp8_flop_per_s", "memory_bytes"):
        assert getattr(back, name) == pytest.approx(getattr(gpu, name)), name
    model = load_presets().models["Qwen3-30B-A3B"]
    again = parse_presets(tomllib.loads(model_to_toml(model)), "t").models[model.name]
    assert again.params == model.params and again.active_layer_params == model.active_layer_params


def test_every_tunable_coefficient_can_be_fitted_and_written_back() -> None:
    gpu = load_presets().gpus["H100-SXM"]
    for name in TUNABLE:
        assert name in BOUNDS, name
        assert hasattr(GpuPreset, name) or name in {f.name for f in dataclasses.fields(gpu)}
    r = _roof(tp=2).with_coefficients(tp_step_overhead_s=3e-3, intake_s_per_request=4e-3)
    out = calibrated_gpu(gpu, r, "H100-fitted")
    assert out.tp_step_overhead_s == 3e-3 and out.intake_s_per_request == 4e-3
    assert Roofline.build(out, load_presets().models[LLAMA8], 2).tp_step_overhead_s == 3e-3
