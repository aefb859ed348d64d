"""The KV cache the simulator sizes (harness/sim/memory_profile.py through SimSettings.resolved)
against vLLM's own startup logs (harness/sim/validation/kv_memory.toml).

Over the 9 clean points the KV cache in GiB per GPU is off by a median of 3.8 % and at worst
+75.1 % (Qwen3-32B on one H100, a build with PyTorch's sort-based sampler: the rule does not
count its 3.5 GiB; counted, every point is within 7 %); the fixed 2 GiB reserve before it: median
7.1 %, worst +101.7 % there. The 5 points at gpu_memory_utilization <= 0.5 (Qwen2-7B on A100):
median 0.9 %, worst +6.6 % (the reserve: 4.1 %, -23.8 % at 0.25 on one GPU).
The tenth point, Qwen3-235B-FP8 on 4 H100 with the LMCache connector, is kept out of the bound:
its log prints no weights or profile breakdown, and the 6 GiB per GPU the rule misses there is
not explained by anything the rule models (the connector's buffers are the likely part).
"""

from __future__ import annotations

import statistics
import tomllib
from pathlib import Path
from typing import Any

import pytest

from harness.sim import memory_profile
from harness.sim.presets import GIB, load_presets
from harness.sim.settings import SimSettings

DATA = Path(memory_profile.__file__).with_name("validation") / "kv_memory.toml"
with DATA.open("rb") as _f:
    POINTS: list[dict[str, Any]] = tomllib.load(_f)["point"]
# Not held to the bound: the log names no weights, and a KV connector shares the GPU
UNEXPLAINED = {"vllm-21348-qwen3-235b-fp8-h100-tp4-u0.9"}
CLEAN = [p for p in POINTS if p["id"] not in UNEXPLAINED]
OLD_RESERVE_BYTES = 2 * GIB  # the fixed per-GPU reserve the rule replaced
# What PyTorch's sort-based top-k/top-p holds beyond the rule's fp32 logits and probabilities:
# scaled logits, sorted values, int64 indices, cumulative sum (the llm-d breakdowns: 23-26)
SORT_SAMPLER_EXTRA_BYTES_PER_LOGIT = 24


def _settings(p: dict[str, Any]) -> SimSettings:
    return SimSettings(
        gpu=p["gpu"],
        model=p["model"],
        dtype=p["dtype"],
        tensor_parallel_size=p["tp"],
        gpu_memory_utilization=p["gpu_memory_utilization"],
        max_num_seqs=p["max_num_seqs"],
        max_num_batched_tokens=p["max_num_batched_tokens"],
    )


def _kv_gib_per_gpu(p: dict[str, Any]) -> float:
    """The simulator's KV cache per GPU, GiB, as SimSettings.resolved sizes it."""
    r = _settings(p).resolved()
    tokens = r.kv_capacity_tokens
    return tokens * r.model_preset.kv_bytes_per_token / p["tp"] / GIB


def _old_kv_gib_per_gpu(p: dict[str, Any]) -> float:
    """The rule before: memory x utilization - weights - 2 GiB, per GPU."""
    presets = load_presets()
    gpu = presets.gpus[p["gpu"]]
    model = presets.models[p["model"]].with_dtypes(p["dtype"], "auto")
    free = gpu.memory_bytes * p["gpu_memory_utilization"] - model.weight_bytes / p["tp"]
    return (free - OLD_RESERVE_BYTES) / GIB


def _error(p: dict[str, Any], kv_gib: float) -> float:
    return kv_gib / p["kv_cache_gib"] - 1


def _sort_sampler_extra_gib(p: dict[str, Any]) -> float:
    """What a sort-based build's sampler holds beyond the rule, per GPU (0 for other builds)."""
    if p.get("sampler") != "sort-based":
        return 0.0
    model = load_presets().models[p["model"]]
    rows = min(p["max_num_seqs"], p["max_num_batched_tokens"])
    return rows * model.vocab_size * SORT_SAMPLER_EXTRA_BYTES_PER_LOGIT / GIB


def test_every_point_names_its_source_and_what_the_log_states() -> None:
    assert len(POINTS) >= 10
    for p in POINTS:
        assert p["source"].startswith("https://github.com/"), p["id"]
        assert p["kv_cache_gib"] > 0 and 0 < p["gpu_memory_utilization"] <= 1, p["id"]
        assert p["limits_how"] and p["vllm_version"], p["id"]


@pytest.mark.parametrize("p", CLEAN, ids=[p["id"] for p in CLEAN])
def test_kv_cache_within_7_percent_of_the_log_once_the_sampler_is_the_builds(
    p: dict[str, Any],
) -> None:
    kv = _kv_gib_per_gpu(p) - _sort_sampler_extra_gib(p)
    assert abs(_error(p, kv)) <= 0.07


def test_median_error_and_the_old_reserve() -> None:
    new = [abs(_error(p, _kv_gib_per_gpu(p))) for p in CLEAN]
    old = [abs(_error(p, _old_kv_gib_per_gpu(p))) for p in CLEAN]
    assert statistics.median(new) <= 0.04 < statistics.median(old)
    assert max(new) < max(old)
    low = [p for p in CLEAN if p["gpu_memory_utilization"] <= 0.5]
    assert len(low) >= 4
    low_new = [abs(_error(p, _kv_gib_per_gpu(p))) for p in low]
    low_old = [abs(_error(p, _old_kv_gib_per_gpu(p))) for p in low]
    assert max(low_new) <= 0.07 < 0.2 < max(low_old)
    assert statistics.median(low_new) < statistics.median(low_old)


def test_sort_based_builds_hold_the_sampler_extra_the_rule_leaves_out() -> None:
    # printed torch peak - (the rule's activation + sampler) = 20-30 bytes a logit more
    presets = load_presets()
    sort_based = [p for p in POINTS if p.get("sampler") == "sort-based"]
    assert len(sort_based) >= 3
    for p in sort_based:
        model = presets.models[p["model"]].with_dtypes(p["dtype"], "auto")
        t, s = p["max_num_batched_tokens"], p["max_num_seqs"]
        ours = memory_profile.activation_peak_bytes(model, t, p["tp"])
        ours += memory_profile.sampler_bytes(model, s, t)
        extra = (p["activation_gib"] * GIB - ours) / (min(s, t) * model.vocab_size)
        assert 20 <= extra <= 30, p["id"]
        non_torch = memory_profile.non_torch_bytes(p["tp"]) / GIB
        assert non_torch == pytest.approx(p["non_torch_gib"], abs=0.1), p["id"]


def test_weights_match_the_logged_model_loading() -> None:
    presets = load_presets()
    for p in POINTS:
        if "weights_gib" not in p:
            continue
        model = presets.models[p["model"]].with_dtypes(p["dtype"], "auto")
        assert model.weight_bytes / p["tp"] / GIB == pytest.approx(p["weights_gib"], rel=0.01)


def test_a_larger_budget_or_running_set_leaves_less_cache() -> None:
    base = SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct")
    blocks = base.resolved().num_gpu_blocks
    for more in (
        SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct", max_num_batched_tokens=16384),
        SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct", max_num_seqs=2048),
    ):
        assert more.resolved().num_gpu_blocks < blocks
    fewer = SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct", max_num_seqs=64)
    assert fewer.resolved().num_gpu_blocks > blocks
