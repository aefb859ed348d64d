"""Pipeline parallelism in the simulator (roofline.py, "Pipeline parallelism"): the layers split
into stages of tp GPUs that a step runs one after another, so a step costs the whole model's
time at tp plus pp - 1 hand-offs of the step's hidden states; memory is sized over tp x pp GPUs.
"""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.sim.memory_profile import activation_peak_bytes
from harness.sim.roofline import ACTIVATION_BYTES, PP_LINK_BYTES_PER_S
from harness.sim.settings import ResolvedSim, SimSettings

LLAMA8 = "Llama-3.1-8B-Instruct"
LLAMA70 = "Llama-3.1-70B-Instruct"


def _resolved(model: str = LLAMA8, **kw: object) -> ResolvedSim:
    return SimSettings.from_mapping({"gpu": "H100-SXM", "model": model, **kw}, "t").resolved()


@pytest.mark.parametrize(
    ("pp", "batch"),
    [
        (1, 1),  # no stages: no hand-off
        (2, 1),  # one hand-off of one token's hidden state
        (4, 256),  # three hand-offs of 256 tokens' hidden states
    ],
)
def test_a_step_is_the_models_time_at_tp_plus_the_hand_offs(pp: int, batch: int) -> None:
    one = _resolved().roofline
    staged = _resolved(pipeline_parallel_size=pp).roofline
    hidden = _resolved().model_preset.hidden_size
    hop = one.allreduce_latency_s + batch * hidden * ACTIVATION_BYTES / PP_LINK_BYTES_PER_S
    got = staged.decode_step_s(batch, 500) - one.decode_step_s(batch, 500)
    assert got == pytest.approx((pp - 1) * hop, rel=1e-9, abs=1e-15)


def test_stages_hold_a_model_one_gpu_cannot_and_more_kv_cache() -> None:
    # Llama-3.1-70B in bf16 (~141 GB) fits no single H100 (80 GB) ...
    with pytest.raises(ConfigError, match="does not fit on H100-SXM x1"):
        _resolved(LLAMA70)
    # ... and fits two stages of one GPU as it fits tp 2: the same memory, but each stage's
    # profiling pass runs the full-width MLP that tp splits, so the cache is smaller by the two
    # GPUs' tp-2 activation peak (memory_profile.py)
    two_pp = _resolved(LLAMA70, pipeline_parallel_size=2)
    two_tp = _resolved(LLAMA70, tensor_parallel_size=2)
    model = two_tp.model_preset
    gap = 2 * activation_peak_bytes(model, two_tp.max_num_batched_tokens, 2)
    gap_blocks = gap / (two_tp.block_size * model.kv_bytes_per_token)
    assert 0 < two_pp.num_gpu_blocks < two_tp.num_gpu_blocks
    assert two_tp.num_gpu_blocks - two_pp.num_gpu_blocks == pytest.approx(gap_blocks, abs=1)
    # tp 2 x pp 2 = four GPUs: more than twice the KV cache of two (weights paid once)
    four = _resolved(LLAMA70, tensor_parallel_size=2, pipeline_parallel_size=2)
    assert four.num_gpu_blocks > 2 * two_tp.num_gpu_blocks


def test_a_bad_pipeline_size_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        SimSettings.from_mapping({"pipeline_parallel_size": 0}, "t")
    assert exc.value.key.endswith("pipeline_parallel_size")
