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

A CPU (llama.cpp)
-----------------
On a CPU the matrix kernels, not memory, set the pace, and their speed depends on how many
rows (tokens) a matmul has. llama.cpp's repacked quantised weights go through a GEMM kernel
that takes activation rows in tiles of 4; rows left over (`rows % 4`) go through a
matrix-vector kernel, one pass over the weights per row. Measured on the 2-core EPYC
(docs/calibration.md): a decode step of 1, 2, 3 sequences costs ~11, 23, 35 ms (one matvec
pass per row), 4 sequences ~36 ms (one GEMM), 8 sequences ~44 ms (one GEMM of two tiles).
So a preset may set `gemm_tile_rows` (4), a matvec rate and efficiency for the leftover rows,
and `gemm_fixed_rows`: the cost of one GEMM call that does not depend on its rows
(packing and dequantising the weights), expressed in rows. The layers' matmuls see every
scheduled token as a row, the logits matmul one row per sampled sequence. With the defaults
(tile 1, no fixed rows) this reduces to the GPU model above. Efficiencies are relative to the
preset's rates and may exceed 1 on a CPU, whose rates are numpy float32 figures while
llama.cpp's kernels do int8 dot products.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from harness.sim.presets import (
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_KV_BANDWIDTH_EFFICIENCY,
    DEFAULT_PER_SEQUENCE_OVERHEAD_S,
    DEFAULT_STEP_OVERHEAD_S,
    DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY,
    GpuPreset,
    ModelPreset,
)

Num = TypeVar("Num", float, np.ndarray)

# The GPU defaults, under the names the rest of the simulator has always used.
WEIGHT_BANDWIDTH_EFFICIENCY = DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY
KV_BANDWIDTH_EFFICIENCY = DEFAULT_KV_BANDWIDTH_EFFICIENCY
COMPUTE_EFFICIENCY = DEFAULT_COMPUTE_EFFICIENCY
STEP_OVERHEAD_S = DEFAULT_STEP_OVERHEAD_S
PER_SEQUENCE_OVERHEAD_S = DEFAULT_PER_SEQUENCE_OVERHEAD_S
ALLREDUCE_LATENCY_S = 6e-6  # one NVLink all-reduce of a step's activations (tp > 1)

# The coefficients `sim calibrate` may fit (Roofline field names).
TUNABLE = (
    "compute_efficiency",
    "matvec_efficiency",
    "gemm_fixed_rows",
    "weight_bandwidth_efficiency",
    "kv_bandwidth_efficiency",
    "step_overhead_s",
    "per_sequence_overhead_s",
)


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
    matvec_flop_per_s: float = 0.0  # 0: the same as flop_per_s
    gemm_tile_rows: int = 1
    compute_efficiency: float = COMPUTE_EFFICIENCY
    matvec_efficiency: float = COMPUTE_EFFICIENCY
    gemm_fixed_rows: float = 0.0
    weight_bandwidth_efficiency: float = WEIGHT_BANDWIDTH_EFFICIENCY
    kv_bandwidth_efficiency: float = KV_BANDWIDTH_EFFICIENCY
    step_overhead_s: float = STEP_OVERHEAD_S
    per_sequence_overhead_s: float = PER_SEQUENCE_OVERHEAD_S

    @classmethod
    def build(cls, gpu: GpuPreset, model: ModelPreset, tp: int) -> Roofline:
        lm_head = model.vocab_size * model.hidden_size
        # Every parameter is streamed each step except an untied input embedding (gathered).
        streamed = model.params - (0 if model.tie_word_embeddings else model.embedding_params)
        matmul = max(streamed - lm_head, 0)
        return cls(
            weight_bytes=streamed * model.bytes_per_param / tp,
            kv_bytes_per_token=model.kv_bytes_per_token / tp,
            matmul_flop_per_token=2.0 * matmul / tp,
            lm_head_flop_per_sample=2.0 * lm_head / tp,
            attention_flop_per_pair=4.0 * model.num_layers * model.num_heads * model.head_dim / tp,
            bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
            flop_per_s=gpu.flop_per_s,
            comm_s=0.0 if tp == 1 else 2 * model.num_layers * ALLREDUCE_LATENCY_S,
            matvec_flop_per_s=gpu.matvec_flop_per_s or gpu.flop_per_s,
            gemm_tile_rows=gpu.gemm_tile_rows,
            compute_efficiency=gpu.compute_efficiency,
            matvec_efficiency=gpu.matvec_efficiency,
            gemm_fixed_rows=gpu.gemm_fixed_rows,
            weight_bandwidth_efficiency=gpu.weight_bandwidth_efficiency,
            kv_bandwidth_efficiency=gpu.kv_bandwidth_efficiency,
            step_overhead_s=gpu.step_overhead_s,
            per_sequence_overhead_s=gpu.per_sequence_overhead_s,
        )

    def with_coefficients(self, **values: float) -> Roofline:
        """A copy with some TUNABLE coefficients replaced (what calibration varies)."""
        unknown = set(values) - set(TUNABLE)
        if unknown:
            raise ValueError(f"not a tunable coefficient: {sorted(unknown)[0]}")
        return replace(self, **values)  # type: ignore[arg-type]  # only TUNABLE float fields (checked above)

    def _matmul_s(self, rows: Num, flop_per_row: float) -> Num:
        """Seconds of one matmul group over `rows` activation rows (tiles + matvec rows).
        Floats or arrays alike (plain arithmetic only)."""
        tile = self.gemm_tile_rows
        gemm_rows = rows if tile <= 1 else rows // tile * tile
        mv_rows = rows - gemm_rows
        gemm = gemm_rows + (gemm_rows > 0) * self.gemm_fixed_rows
        t = flop_per_row * gemm / (self.flop_per_s * self.compute_efficiency)
        mv_rate = (self.matvec_flop_per_s or self.flop_per_s) * self.matvec_efficiency
        return t + flop_per_row * mv_rows / mv_rate

    def _time(self, n_tok: Num, n_seqs: Num, n_sampled: Num, kv_read: Num, pairs: Num) -> Num:
        bw = self.bandwidth_bytes_per_s
        t_mem = self.weight_bytes / (bw * self.weight_bandwidth_efficiency)
        t_mem = t_mem + (kv_read + n_tok) * self.kv_bytes_per_token / (
            bw * self.kv_bandwidth_efficiency
        )
        t_compute = (
            self._matmul_s(n_tok, self.matmul_flop_per_token)
            + self._matmul_s(n_sampled, self.lm_head_flop_per_sample)
            + self.attention_flop_per_pair * pairs / (self.flop_per_s * self.compute_efficiency)
        )
        return (
            (t_mem * t_mem + t_compute * t_compute) ** 0.5
            + self.step_overhead_s
            + self.per_sequence_overhead_s * n_seqs
            + self.comm_s
        )

    def step_times_s(
        self,
        num_tokens: np.ndarray,
        num_seqs: np.ndarray,
        num_sampled: np.ndarray,
        kv_read_tokens: np.ndarray,
        attention_pairs: np.ndarray,
    ) -> np.ndarray:
        """`step_time_s` over arrays of steps (float64 arrays of one length)."""
        t = self._time(num_tokens, num_seqs, num_sampled, kv_read_tokens, attention_pairs)
        return np.where(num_seqs > 0, t, 0.0)

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
        return float(
            self._time(
                float(num_tokens),
                float(num_seqs),
                float(num_sampled),
                float(kv_read_tokens),
                float(attention_pairs),
            )
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
