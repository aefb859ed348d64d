"""The memory vLLM's startup profile keeps away from the KV cache, per GPU: what
`settings.SimSettings.resolved` subtracts before it divides the rest into KV blocks.

Theory of operation. vLLM V1 (`gpu_worker.determine_available_memory`) loads the weights, runs
one dummy forward pass of `max_num_batched_tokens` tokens and a dummy sampler step over
`min(max_num_seqs, max_num_batched_tokens)` rows, and then gives the KV cache

    total device memory x gpu_memory_utilization
      - weights - the torch peak increase of that dummy pass - the non-torch increase

per GPU. CUDA graphs are captured after the KV cache is allocated and are not subtracted by the
versions the points below come from (vLLM PR 30515 added an estimate of them, off by default;
later versions turn it on), so they are not subtracted here. Each part, as modelled:

- **device memory**: what CUDA reports as total is `VISIBLE_MEMORY_FRACTION` of the preset's
  memory (an "80 GB" H100 or A100 reports 79.15-79.22 GiB in the logs below).
- **weights**: the model preset's weight bytes over the tp x pp GPUs.
- **activation peak**: the largest tensors alive at once in the dummy pass, the MLP's gate/up
  projection output and its activation output: 3 x intermediate size (MoE: the routed experts
  a token runs plus the shared expert) / tp, in bf16, per batched token.
- **sampler**: the dummy sampler step holds `SAMPLER_BYTES_PER_LOGIT` bytes per row and vocab
  entry: fp32 logits and fp32 probabilities, as a build whose top-k/top-p runs FlashInfer's
  kernels holds them. A build on PyTorch's sort-based path holds about 24 bytes more per logit
  (scaled logits, sorted values and their int64 indices, cumulative sum): 3-3.5 GiB at
  H100's defaults of 1,024 rows, what llm-d-benchmark's H100 breakdowns print.
- **non-torch**: `NON_TORCH_BYTES` of cuBLAS workspaces and allocator slack, plus
  `MULTI_GPU_NON_TORCH_BYTES` of NCCL and custom all-reduce buffers when the model spans GPUs.

Fitted on harness/sim/validation/kv_memory.toml (vLLM's own "Available KV cache memory" lines,
10 server starts, 9 held to the rule; tests/sim/test_memory_profile.py states the errors): the
sampler bytes on the KV sizes of Qwen2-7B on A100 at gpu_memory_utilization 0.25 and 0.5 (vLLM
0.10.1.1 with FlashInfer installed, dennislee22/vLLM-benchmarking), the non-torch constants on
the breakdowns llm-d-benchmark prints for H100. Over the 9 points the KV cache is off by a
median of 3.8 % (at utilization <= 0.5: 0.9 %, worst 6.6 %); a sort-based build runs tighter:
+6 % to +75 % where its extra sampler memory is not counted (Qwen3-32B on one H100: 4.45 GiB
printed, 7.79 modelled). The fixed 2 GiB reserve this replaced: median 7.1 %, -23.8 % on the
A100 start at 0.25. The sort-based figure (27 bytes) was tried as the default and not kept:
it made the held-out validation worse (docs/history/validation-log.md, 2026-12-06).
"""

from __future__ import annotations

from harness.sim.model_shape import ModelPreset
from harness.sim.presets import GIB

# CUDA's total over the preset's memory: 79.18-79.22 GiB of an 80 GiB H100, 79.15 of an A100 80GB.
VISIBLE_MEMORY_FRACTION = 0.99
ACTIVATION_BYTES = 2  # bf16 activations, whatever the weights' dtype
MLP_INTERMEDIATE_COPIES = 3  # gate and up projections (2 x intermediate) and the activation output
SAMPLER_BYTES_PER_LOGIT = 8  # fp32 logits and probabilities per (row, vocab entry); fitted
NON_TORCH_BYTES = 0.13 * GIB  # one GPU (llm-d's H100 starts: 0.13-0.14 GiB)
MULTI_GPU_NON_TORCH_BYTES = 0.42 * GIB  # NCCL and all-reduce buffers (llm-d's TP=2: 0.55 GiB)


def usable_bytes_per_gpu(memory_bytes: float, gpu_memory_utilization: float) -> float:
    """The memory one vLLM instance may use on a GPU: total as CUDA reports it x utilization."""
    return memory_bytes * VISIBLE_MEMORY_FRACTION * gpu_memory_utilization


def mlp_intermediate_size(model: ModelPreset) -> int:
    """The widest MLP a token runs through: dense, or top-k routed experts plus the shared one."""
    if not model.is_moe:
        return model.intermediate_size
    moe = model.num_experts_per_tok * model.moe_intermediate_size
    moe += model.shared_expert_intermediate_size
    dense = model.intermediate_size if model.num_dense_layers else 0
    return max(moe, dense)


def activation_peak_bytes(model: ModelPreset, max_num_batched_tokens: int, tp: int) -> float:
    """Torch's peak increase over the weights in the dummy forward pass, per GPU."""
    per_token = MLP_INTERMEDIATE_COPIES * mlp_intermediate_size(model) / tp * ACTIVATION_BYTES
    return max_num_batched_tokens * per_token


def sampler_bytes(model: ModelPreset, max_num_seqs: int, max_num_batched_tokens: int) -> float:
    """The dummy sampler step: one row per request the batch can hold (all-gathered over tp)."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    return rows * model.vocab_size * SAMPLER_BYTES_PER_LOGIT


def non_torch_bytes(gpus: int) -> float:
    """Memory outside torch's allocator that the profile sees grow, per GPU."""
    return NON_TORCH_BYTES + (MULTI_GPU_NON_TORCH_BYTES if gpus > 1 else 0.0)


def overhead_bytes_per_gpu(
    model: ModelPreset, max_num_batched_tokens: int, max_num_seqs: int, tp: int, pp: int
) -> float:
    """Everything vLLM's profile subtracts per GPU besides the weights: activation peak,
    sampler and non-torch memory."""
    return (
        activation_peak_bytes(model, max_num_batched_tokens, tp)
        + sampler_bytes(model, max_num_seqs, max_num_batched_tokens)
        + non_torch_bytes(tp * pp)
    )


def kv_cache_bytes(
    memory_bytes: float,
    gpu_memory_utilization: float,
    model: ModelPreset,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int = 1,
    pp: int = 1,
) -> float:
    """Bytes left for the KV cache over all tp x pp GPUs together (negative: the model does not
    fit); the caller divides it by the bytes of a block."""
    gpus = tp * pp
    per_gpu = usable_bytes_per_gpu(memory_bytes, gpu_memory_utilization)
    per_gpu -= overhead_bytes_per_gpu(model, max_num_batched_tokens, max_num_seqs, tp, pp)
    return per_gpu * gpus - model.weight_bytes
