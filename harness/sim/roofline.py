"""Roofline step time: how long one engine step takes on the modelled GPU.

Theory of operation
-------------------
A step runs every scheduled token of every scheduled sequence through the model once. Its
cost has two sides, each computed per GPU (tensor parallelism splits weights, KV heads and
FLOPs evenly over `tp` GPUs):

- memory: the weights are read once per step (`weight_bytes / tp`), the KV cache is read
  for every context token of every sequence and written for every new token
  (`kv_bytes_per_token / tp` each). Weights stream at ~62 % of peak bandwidth, KV (paged,
  scattered) at ~30 % (both fitted on published vLLM runs: presets.py, docs/validation.md).
- compute: `2 * matmul_params * tokens` for the layers, `2 * lm_head * sampled` for the
  logits (only the last token of each sequence is sampled), and attention
  `4 * layers * heads * head_dim` per (query token, context token) pair. At ~39 % of peak
  (fitted, as above: vLLM's kernels at the shapes served, prefill included; the A100 presets
  set 55 %, fitted on that class's points).

The two are combined smoothly, `sqrt(T_mem^2 + T_compute^2)`, so a step is memory-bound for
small decode batches and compute-bound for large prefills, with a soft knee between. On top:
a fixed per-step overhead (scheduling, kernel launches; ~0.15 ms), a small per-sequence
overhead (input preparation, sampling) and, with tp > 1, the communication below.

Prefill efficiency: rows beyond one per sequence are prompt rows (a decoding sequence has one);
their matmuls run at `compute_efficiency * prefill_efficiency_factor` (1 by default: as fast
as any row). A GPU class whose measured prefill rate falls short of its decode fit sets < 1.

Tensor parallelism
------------------
Megatron-style TP splits every matmul over `tp` GPUs and joins the partial results with two
all-reduces per layer (after attention, after the MLP). Each moves the step's activations,
`tokens * hidden_size * 2` bytes (bf16); a ring all-reduce sends `2 (tp-1)/tp` of that over
each GPU's link, so one costs `allreduce_latency_s + 2 (tp-1)/tp * bytes / (link *
allreduce_bandwidth_efficiency)` with `link` the interconnect's datasheet rate per direction
(NVLink 3: 300 GB/s, NVLink 4: 450, PCIe 4.0 x16: 32, PCIe 5.0 x16: 64). Decode steps move
little (256 tokens: 2 MB); an 8,192-token prefill on PCIe moves enough to matter. Every GPU
beyond the first adds `tp_step_overhead_s` per step and `tp_sequence_overhead_s` per sequence of
the step: vLLM V1 sends every worker each scheduled request's update and gathers the sampled
tokens, and the slowest GPU sets the pace. Both were fitted on published V1 points (0.43 ms and
16.4 us, docs/validation.md); vLLM's V0 engine broadcast the whole scheduler output each step
(2.25 ms per step fitted on V0 points, which the validation alone uses).

Pipeline parallelism
--------------------
vLLM's pipeline parallelism (`--pipeline-parallel-size`) splits the layers into `pp` stages,
each on its own `tp` GPUs, typically one node a stage (docs.vllm.ai/en/v0.8.3/serving/
distributed_serving.html: TP within a node, PP across nodes), and hands the step's hidden
states, `tokens * hidden_size * 2` bytes, from one stage to the next. Here a step runs its
batch through the stages one after another: each stage reads its share of the weights and KV
cache and computes its share of the FLOPs, so the stages' times add up to the whole model's at
`tp`, plus `pp - 1` hand-offs of `allreduce_latency_s + tokens * hidden * 2 / PP_LINK` each,
PP_LINK being one 400 Gb/s network port per GPU (50 GB/s: the DGX H100/H200's eight
single-port ConnectX-7 at up to 400 Gb/s, docs.nvidia.com/dgx-basepod, "Core Components"). The KV cache and the weights are sized over `tp * pp` GPUs (settings.py). vLLM keeps up
to `pp` batches in flight, one per stage; this model keeps one, so at `pp > 1` its throughput
is a lower bound (its per-token latency is not).

FP8 and MoE
-----------
FP8 weights (ModelPreset.with_dtypes) are read at 1 byte per parameter and their matmuls run
at the GPU's `fp8_flop_per_s` (W8A8); a GPU without FP8 tensor cores (A100) computes them at
the bf16 rate, as vLLM's W8A16 Marlin kernels do. An FP8 KV cache halves the KV bytes.
A mixture-of-experts model computes with its active parameters (`2 * active_layer_params`
FLOPs per token) but reads, per step and layer, the experts its tokens pick: with n tokens each
picking k of E experts uniformly, `E * (1 - (1 - k/E)^n)` distinct experts are expected (k for
one token, all E for a large batch); the attention, router and shared weights are read every
step (leading dense layers, DeepSeek's, are read whole). Routed experts are read at their own
bytes per weight (gpt-oss's MXFP4: 4.25 bits). Memory and the KV cache are sized on the total
parameters. MLA (DeepSeek-V3) caches one latent per layer and token, the same on every
tensor-parallel GPU, so its KV bytes per token are not divided by tp.

The API server's costs (`intake_s_per_request`, `intake_s_per_prompt_token`,
`stream_s_per_token`, and `request_latency_s`, a fixed delay that occupies nothing) ride on the Roofline so that one object holds every tunable coefficient;
the scheduler applies them (scheduler.py, "The API server"), not the step time.

Anchor: Llama-3.1-8B on one H100-SXM, one request with a short context, decodes at
~15.0 GB / (3.35 TB/s * 0.630) + 0.15 ms ~ 7.3 ms per token; published single-stream TPOTs
of 8B models on H100 are 6.5-7.2 ms (docs/validation.md).
At tp 1 in bf16 on a dense model the terms above add nothing (factor 1, no communication).

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
    DEFAULT_ALLREDUCE_BANDWIDTH_EFFICIENCY,
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_INTAKE_S_PER_PROMPT_TOKEN,
    DEFAULT_INTAKE_S_PER_REQUEST,
    DEFAULT_KV_BANDWIDTH_EFFICIENCY,
    DEFAULT_PER_SEQUENCE_OVERHEAD_S,
    DEFAULT_PREFILL_EFFICIENCY_FACTOR,
    DEFAULT_REQUEST_LATENCY_S,
    DEFAULT_STEP_OVERHEAD_S,
    DEFAULT_STREAM_S_PER_TOKEN,
    DEFAULT_TP_SEQUENCE_OVERHEAD_S,
    DEFAULT_TP_STEP_OVERHEAD_S,
    DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY,
    INTERCONNECTS,
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
ALLREDUCE_LATENCY_S = INTERCONNECTS["nvlink4"][1]  # one NVLink all-reduce's fixed cost
PP_LINK_BYTES_PER_S = 50e9  # one 400 Gb/s port per GPU between pipeline stages (DGX H100/H200)
ACTIVATION_BYTES = 2  # bf16 activations, whatever the weights' type (also under FP8 W8A8)

# The coefficients `sim calibrate` may fit (Roofline field names, also GpuPreset attributes).
TUNABLE = (
    "compute_efficiency",
    "matvec_efficiency",
    "gemm_fixed_rows",
    "weight_bandwidth_efficiency",
    "kv_bandwidth_efficiency",
    "step_overhead_s",
    "per_sequence_overhead_s",
    "prefill_efficiency_factor",
    "allreduce_latency_s",
    "allreduce_bandwidth_efficiency",
    "tp_step_overhead_s",
    "tp_sequence_overhead_s",
    "intake_s_per_request",
    "intake_s_per_prompt_token",
    "stream_s_per_token",
    "request_latency_s",
)


@dataclass(frozen=True, slots=True)
class Roofline:
    """Per-GPU coefficients of the step-time model for one (GPU, model, tp) triple, and the
    API server's costs (read by the scheduler's intake and delivery, scheduler.py)."""

    weight_bytes: float  # read every step, per GPU (MoE: all but the routed experts)
    kv_bytes_per_token: float  # per GPU
    matmul_flop_per_token: float  # 2 * active decoder-layer params / tp
    lm_head_flop_per_sample: float  # 2 * vocab * hidden / tp
    attention_flop_per_pair: float  # 4 * layers * heads * head_dim / tp
    bandwidth_bytes_per_s: float
    flop_per_s: float
    matvec_flop_per_s: float = 0.0  # 0: the same as flop_per_s
    layer_flop_per_s: float = 0.0  # the decoder layers' matmul rate (FP8); 0: flop_per_s
    gemm_tile_rows: int = 1
    # MoE: one routed expert's bytes over all layers (per GPU), the experts per layer and
    # the experts each token picks (0 experts: a dense model).
    expert_bytes: float = 0.0
    num_experts: int = 0
    experts_per_token: int = 0
    # Tensor parallelism: all-reduces per step, ring bytes per step token of each, the link.
    tp_extra_gpus: int = 0  # tp - 1
    allreduces_per_step: int = 0  # 2 per layer when tp > 1
    allreduce_bytes_per_token: float = 0.0  # 2 (tp-1)/tp * hidden * ACTIVATION_BYTES
    link_bytes_per_s: float = INTERCONNECTS["nvlink4"][0] * 1e9
    # Pipeline parallelism: stage-to-stage transfers per step, bytes per step token of each
    pp_transfers_per_step: int = 0  # pp - 1
    pp_bytes_per_token: float = 0.0  # hidden * ACTIVATION_BYTES
    compute_efficiency: float = COMPUTE_EFFICIENCY
    matvec_efficiency: float = COMPUTE_EFFICIENCY
    gemm_fixed_rows: float = 0.0
    weight_bandwidth_efficiency: float = WEIGHT_BANDWIDTH_EFFICIENCY
    # the step's coefficients, under the names a GPU preset (harness.sim.gpu_preset) gives them:
    # a preset's values pass straight through, so the two field lists match on purpose
    kv_bandwidth_efficiency: float = KV_BANDWIDTH_EFFICIENCY
    step_overhead_s: float = STEP_OVERHEAD_S
    per_sequence_overhead_s: float = PER_SEQUENCE_OVERHEAD_S
    prefill_efficiency_factor: float = DEFAULT_PREFILL_EFFICIENCY_FACTOR
    allreduce_latency_s: float = ALLREDUCE_LATENCY_S
    allreduce_bandwidth_efficiency: float = DEFAULT_ALLREDUCE_BANDWIDTH_EFFICIENCY
    tp_step_overhead_s: float = DEFAULT_TP_STEP_OVERHEAD_S
    tp_sequence_overhead_s: float = DEFAULT_TP_SEQUENCE_OVERHEAD_S
    intake_s_per_request: float = DEFAULT_INTAKE_S_PER_REQUEST
    intake_s_per_prompt_token: float = DEFAULT_INTAKE_S_PER_PROMPT_TOKEN
    stream_s_per_token: float = DEFAULT_STREAM_S_PER_TOKEN
    request_latency_s: float = DEFAULT_REQUEST_LATENCY_S

    @classmethod
    def build(cls, gpu: GpuPreset, model: ModelPreset, tp: int, pp: int = 1) -> Roofline:
        """The step-time model of `model` on `gpu` at tensor parallel `tp` and pipeline
        parallel `pp` (the stages run one after another: "Pipeline parallelism" above)."""
        lm_head = model.vocab_size * model.hidden_size
        # Every parameter is streamed each step except an untied input embedding (gathered).
        embed = 0 if model.tie_word_embeddings else model.embedding_params
        streamed_bytes = model.weight_bytes - embed * model.bytes_per_param
        # Routed experts are read only when a token of the step picks them (_time).
        experts = model.num_moe_layers * model.expert_params * model.expert_bytes
        streamed_bytes -= model.num_experts * experts
        # The layers' matmuls: the active parameters (all of them for a dense model).
        matmul = model.active_layer_params
        if model.params_override is not None:  # a measured total: the layers are the rest
            matmul = max(model.params - embed - lm_head, 0)
        fp8 = model.fp8_compute and gpu.fp8_flop_per_s is not None
        return cls(
            weight_bytes=max(streamed_bytes, 0.0) / tp,
            kv_bytes_per_token=model.kv_bytes_per_token
            / (1 if model.kv_replicated_over_tp else tp),
            matmul_flop_per_token=2.0 * matmul / tp,
            lm_head_flop_per_sample=2.0 * lm_head / tp,
            attention_flop_per_pair=4.0 * model.num_layers * model.num_heads * model.head_dim / tp,
            bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
            flop_per_s=gpu.flop_per_s,
            matvec_flop_per_s=gpu.matvec_flop_per_s or gpu.flop_per_s,
            layer_flop_per_s=(gpu.fp8_flop_per_s or 0.0) if fp8 else 0.0,
            gemm_tile_rows=gpu.gemm_tile_rows,
            expert_bytes=experts / tp,
            num_experts=model.num_experts,
            experts_per_token=model.num_experts_per_tok,
            tp_extra_gpus=tp - 1,
            allreduces_per_step=0 if tp == 1 else 2 * model.num_layers,
            allreduce_bytes_per_token=2.0 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES,
            link_bytes_per_s=gpu.link_bytes_per_s,
            pp_transfers_per_step=pp - 1,
            pp_bytes_per_token=model.hidden_size * ACTIVATION_BYTES if pp > 1 else 0.0,
            compute_efficiency=gpu.compute_efficiency,
            matvec_efficiency=gpu.matvec_efficiency,
            gemm_fixed_rows=gpu.gemm_fixed_rows,
            weight_bandwidth_efficiency=gpu.weight_bandwidth_efficiency,
            kv_bandwidth_efficiency=gpu.kv_bandwidth_efficiency,
            step_overhead_s=gpu.step_overhead_s,
            per_sequence_overhead_s=gpu.per_sequence_overhead_s,
            prefill_efficiency_factor=gpu.prefill_efficiency_factor,
            allreduce_latency_s=gpu.link_latency_s,
            allreduce_bandwidth_efficiency=gpu.allreduce_bandwidth_efficiency,
            tp_step_overhead_s=gpu.tp_step_overhead_s,
            tp_sequence_overhead_s=gpu.tp_sequence_overhead_s,
            intake_s_per_request=gpu.intake_s_per_request,
            intake_s_per_prompt_token=gpu.intake_s_per_prompt_token,
            stream_s_per_token=gpu.stream_s_per_token,
            request_latency_s=gpu.request_latency_s,
        )

    def with_coefficients(self, **values: float) -> Roofline:
        """A copy with some TUNABLE coefficients replaced (what calibration varies)."""
        unknown = set(values) - set(TUNABLE)
        if unknown:
            raise ValueError(f"not a tunable coefficient: {sorted(unknown)[0]}")
        return replace(self, **values)  # type: ignore[arg-type]  # only TUNABLE float fields (checked above)

    def _matmul_s(self, rows: Num, flop_per_row: float, flop_per_s: float) -> Num:
        """Seconds of one matmul group over `rows` activation rows (tiles + matvec rows).
        Floats or arrays alike (plain arithmetic only)."""
        tile = self.gemm_tile_rows
        gemm_rows = rows if tile <= 1 else rows // tile * tile
        mv_rows = rows - gemm_rows
        gemm = gemm_rows + (gemm_rows > 0) * self.gemm_fixed_rows
        t = flop_per_row * gemm / (flop_per_s * self.compute_efficiency)
        mv_rate = (self.matvec_flop_per_s or self.flop_per_s) * self.matvec_efficiency
        return t + flop_per_row * mv_rows / mv_rate

    def experts_read(self, n_tok: Num) -> Num:
        """Expected distinct routed experts per layer that `n_tok` tokens pick, each token
        `k` of `E` uniformly: E * (1 - (1 - k/E)^n). 0 for a dense model."""
        e = self.num_experts
        if e <= 0:
            return n_tok * 0.0
        return e * (1.0 - (1.0 - self.experts_per_token / e) ** n_tok)

    def comm_s(self, n_tok: Num, n_seqs: Num) -> Num:
        """Tensor parallelism's cost for a step of `n_tok` tokens of `n_seqs` sequences: its
        all-reduces (latency plus ring bandwidth) and, for every GPU beyond the first, a per-step
        and a per-sequence overhead; with pipeline stages, their `pp - 1` activation transfers.
        0 at tp 1 and pp 1."""
        link = self.link_bytes_per_s * self.allreduce_bandwidth_efficiency
        one = self.allreduce_latency_s + n_tok * self.allreduce_bytes_per_token / link
        workers = self.tp_step_overhead_s + self.tp_sequence_overhead_s * n_seqs
        hop = self.allreduce_latency_s + n_tok * self.pp_bytes_per_token / PP_LINK_BYTES_PER_S
        return (
            self.allreduces_per_step * one
            + self.tp_extra_gpus * workers
            + self.pp_transfers_per_step * hop
        )

    def intake_s(self, prompt_tokens: int) -> float:
        """The API server's time to tokenize and admit one request (scheduler.py)."""
        return self.intake_s_per_request + self.intake_s_per_prompt_token * prompt_tokens

    def _time(self, n_tok: Num, n_seqs: Num, n_sampled: Num, kv_read: Num, pairs: Num) -> Num:
        bw = self.bandwidth_bytes_per_s
        weights = self.weight_bytes + self.expert_bytes * self.experts_read(n_tok)
        t_mem = weights / (bw * self.weight_bandwidth_efficiency)
        t_mem = t_mem + (kv_read + n_tok) * self.kv_bytes_per_token / (
            bw * self.kv_bandwidth_efficiency
        )
        layer_rate = self.layer_flop_per_s or self.flop_per_s
        t_compute = (
            self._matmul_s(n_tok, self.matmul_flop_per_token, layer_rate)
            + self._matmul_s(n_sampled, self.lm_head_flop_per_sample, self.flop_per_s)
            + self.attention_flop_per_pair * pairs / (self.flop_per_s * self.compute_efficiency)
        )
        if self.prefill_efficiency_factor != 1.0:
            # Rows beyond one per sequence are prompt rows: they run at the factor's share of
            # compute_efficiency (a decode row is one per sequence).
            prompt_rows = n_tok - n_seqs
            slower = 1.0 / self.prefill_efficiency_factor - 1.0
            t_compute = t_compute + slower * self.matmul_flop_per_token * prompt_rows / (
                layer_rate * self.compute_efficiency
            )
        return (
            (t_mem * t_mem + t_compute * t_compute) ** 0.5
            + self.step_overhead_s
            + self.per_sequence_overhead_s * n_seqs
            + self.comm_s(n_tok, n_seqs)
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
