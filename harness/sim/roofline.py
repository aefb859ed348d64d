"""Roofline step time: how long one engine step takes on the modelled GPU.

Theory of operation
-------------------
A step runs every scheduled token of every scheduled sequence through the model once. Its
cost has two sides, each computed per GPU (tensor parallelism splits weights, KV heads and
FLOPs evenly over `tp` GPUs):

- memory: the weights are read once per step (`weight_bytes / tp`), the KV cache is read
  for every context token of every sequence and written for every new token
  (`kv_bytes_per_token / tp` each). Weights stream at ~70 % of peak bandwidth, KV (paged,
  scattered) at ~50 %.
- compute: `2 * matmul_params * tokens` for the layers, `2 * lm_head * sampled` for the
  logits (only the last token of each sequence is sampled), and attention
  `4 * layers * heads * head_dim` per (query token, context token) pair. At ~65 % of peak.

The two are combined smoothly, `sqrt(T_mem^2 + T_compute^2)`, so a step is memory-bound for
small decode batches and compute-bound for large prefills, with a soft knee between. On top:
a fixed per-step overhead (scheduling, kernel launches; ~0.15 ms), a small per-sequence
overhead (input preparation, sampling) and, with tp > 1, two all-reduces per layer.

Anchor: Llama-3.1-8B on one H100-SXM, one request with a short context, decodes at
~15.0 GB / (3.35 TB/s * 0.70) + 0.15 ms ~ 6.6 ms per token; the public figure is ~6.5 ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.sim.presets import BYTES_PER_PARAM, GpuPreset, ModelPreset

WEIGHT_BANDWIDTH_EFFICIENCY = 0.70  # large sequential reads reach ~70 % of peak HBM bandwidth
KV_BANDWIDTH_EFFICIENCY = 0.50  # paged KV reads are scattered 16-token blocks
COMPUTE_EFFICIENCY = 0.65  # bf16 GEMMs at realistic shapes
STEP_OVERHEAD_S = 0.15e-3  # scheduler, input preparation, CUDA-graph launch per step
PER_SEQUENCE_OVERHEAD_S = 1.5e-6  # per scheduled sequence: metadata, sampling, detokenising
ALLREDUCE_LATENCY_S = 6e-6  # one NVLink all-reduce of a step's activations (tp > 1)


@dataclass(frozen=True, slots=True)
class Roofline:
    """Per-GPU coefficients of the step-time model for one (GPU, model, tp) triple."""

    weight_bytes: float  # read once per step, per GPU
    kv_bytes_per_token: float  # per GPU
    matmul_flop_per_token: float  # 2 * decoder-layer params / tp
    lm_head_flop_per_sample: float  # 2 * vocab * hidden / tp
    attention_flop_per_pair: float  # 4 * layers * heads * head_dim / tp
    bandwidth_bytes_per_s: float
    flop_per_s: float
    comm_s: float  # all-reduce cost per step (0 when tp == 1)

    @classmethod
    def build(cls, gpu: GpuPreset, model: ModelPreset, tp: int) -> Roofline:
        lm_head = model.vocab_size * model.hidden_size
        # Every parameter is streamed each step except an untied input embedding (gathered).
        streamed = model.params - (0 if model.tie_word_embeddings else model.embedding_params)
        matmul = max(streamed - lm_head, 0)
        return cls(
            weight_bytes=streamed * BYTES_PER_PARAM / tp,
            kv_bytes_per_token=model.kv_bytes_per_token / tp,
            matmul_flop_per_token=2.0 * matmul / tp,
            lm_head_flop_per_sample=2.0 * lm_head / tp,
            attention_flop_per_pair=4.0 * model.num_layers * model.num_heads * model.head_dim / tp,
            bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
            flop_per_s=gpu.flop_per_s,
            comm_s=0.0 if tp == 1 else 2 * model.num_layers * ALLREDUCE_LATENCY_S,
        )

    def step_time_s(
        self,
        num_tokens: float,
        num_seqs: float,
        num_sampled: float,
        kv_read_tokens: float,
        attention_pairs: float,
    ) -> float:
        """Seconds for one step, without jitter.

        num_tokens: tokens computed (prefill chunks + one per decode); num_seqs: sequences in
        the batch; num_sampled: sequences that sample a token; kv_read_tokens: context tokens
        whose KV is read; attention_pairs: (query, key) pairs. Returns 0 for an empty step.
        """
        if num_seqs <= 0:
            return 0.0
        t_mem = self.weight_bytes / (self.bandwidth_bytes_per_s * WEIGHT_BANDWIDTH_EFFICIENCY)
        kv_bytes = (kv_read_tokens + num_tokens) * self.kv_bytes_per_token
        t_mem += kv_bytes / (self.bandwidth_bytes_per_s * KV_BANDWIDTH_EFFICIENCY)
        flop = (
            self.matmul_flop_per_token * num_tokens
            + self.lm_head_flop_per_sample * num_sampled
            + self.attention_flop_per_pair * attention_pairs
        )
        t_compute = flop / (self.flop_per_s * COMPUTE_EFFICIENCY)
        return (
            math.hypot(t_mem, t_compute)
            + STEP_OVERHEAD_S
            + PER_SEQUENCE_OVERHEAD_S * num_seqs
            + self.comm_s
        )

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        """Convenience: a pure decode step of `batch` sequences, each with `context_tokens`."""
        return self.step_time_s(
            num_tokens=batch,
            num_seqs=batch,
            num_sampled=batch,
            kv_read_tokens=batch * context_tokens,
            attention_pairs=batch * (context_tokens + 1),
        )
