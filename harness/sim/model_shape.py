"""A model's shape as the simulator sees it (`ModelPreset`): parameters, weight bytes and KV-cache
bytes per token, derived from the fields of its config.json. Pure: numbers in, numbers out.

Built-in and user presets (`presets.py`) and any Hugging Face config.json (`hf_config.py`) end
here. Beyond a plain decoder (Llama, Qwen, Mistral) the shape covers:

- mixture of experts: routed experts of `moe_intermediate_size`, top-k per token, an
  always-on shared expert, the router, and `num_dense_layers` leading layers with a dense MLP
  (DeepSeek-V3's `first_k_dense_replace`);
- multi-head latent attention (DeepSeek-V3): the KV cache holds one compressed latent of
  `kv_lora_rank + qk_rope_head_dim` elements per layer and token, not K and V per head, and
  vLLM keeps the whole latent on every tensor-parallel GPU (`kv_replicated_over_tp`);
- sliding-window layers (Mistral 7B v0.1, Gemma 3's 5 local : 1 global, gpt-oss's alternating
  layers): `num_sliding_layers` of them keep at most `sliding_window` tokens per sequence;
- data types: `bytes_per_param` for every weight, `layer_bytes_per_param` for the decoder
  layers' matmuls (FP8 checkpoints), `expert_bytes_per_param` for the routed experts alone
  (gpt-oss's MXFP4 experts: 4.25 bits a weight).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

BYTES_PER_PARAM = 2  # bf16 weights (a quantised model sets its own bytes_per_param)
BYTES_PER_KV_ELEMENT = 2  # bf16 KV cache (vLLM's default kv_cache_dtype="auto"; llama.cpp: f16)
# Weight and KV-cache data types (`[sim] dtype`, `kv_cache_dtype`), bytes per element.
DTYPES = ("auto", "bfloat16", "float16", "fp8")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """A decoder-only transformer (the fields of its config.json), bf16 unless it says.

    Mixture of experts: with `num_experts` > 0 every decoder layer but the first
    `num_dense_layers` has an MLP of `num_experts` gated experts of `moe_intermediate_size`
    each, `num_experts_per_tok` of them run per token, plus an optional always-on shared expert
    of `shared_expert_intermediate_size` and the router (`hidden_size x num_experts`); the dense
    layers have an MLP of `intermediate_size`. Memory holds every expert (`params`); a token
    computes with the active ones (`active_layer_params`).

    Data types: `bytes_per_param` covers every weight unless `layer_bytes_per_param` is set,
    which then covers the decoder layers' matmul weights (what FP8 quantisation converts; the
    embedding and the LM head stay in `bytes_per_param`), and `expert_bytes_per_param` the routed
    experts alone. `fp8_compute`: the layers' matmuls may run on FP8 tensor cores (W8A8), where
    the GPU has them. `extra_params`: weights outside the matmuls (norms, biases, attention
    sinks), counted in memory at `bytes_per_param`.
    """

    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    params_override: int | None = None
    bytes_per_param: float = BYTES_PER_PARAM  # mean over all weights (Q4_K_M GGUF: ~0.92)
    kv_bytes_per_element: float = BYTES_PER_KV_ELEMENT
    num_experts: int = 0  # 0: a dense model
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    layer_bytes_per_param: float | None = None  # None: bytes_per_param
    fp8_compute: bool = False
    num_dense_layers: int = 0  # MoE: leading layers with a dense MLP (first_k_dense_replace)
    attention_params: int | None = None  # per layer, where q/k/v/o is not the shape (MLA)
    kv_lora_rank: int = 0  # MLA: the compressed KV latent per layer; 0: K and V per KV head
    qk_rope_head_dim: int = 0  # MLA: the decoupled RoPE key, cached beside the latent
    sliding_window: int = 0  # tokens a sliding-window layer attends to; 0: none
    num_sliding_layers: int = 0  # layers with a sliding window (the rest attend to everything)
    extra_params: int = 0  # norms, biases, attention sinks: memory only
    expert_bytes_per_param: float | None = None  # None: layer bytes (MXFP4 experts: 0.53125)
    source: str = ""  # where the shape came from ("config.json at ...")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_replicated_over_tp(self) -> bool:
        """MLA's latent is not split over KV heads: every tensor-parallel GPU caches all of it."""
        return self.is_mla

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def attention_params_per_layer(self) -> int:
        """q/k/v/o projections of one layer (MLA: its down and up projections, as given)."""
        if self.attention_params is not None:
            return self.attention_params
        h, d = self.hidden_size, self.head_dim
        return h * self.num_heads * d * 2 + h * self.num_kv_heads * d * 2

    @property
    def dense_mlp_params(self) -> int:
        """One dense layer's MLP (gate, up, down)."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """One routed expert of one layer (gate, up, down); 0 for a dense model."""
        return 3 * self.hidden_size * self.moe_intermediate_size if self.is_moe else 0

    @property
    def always_on_params_per_layer(self) -> int:
        """The matmul parameters every token of one MoE layer uses: attention, the router and
        the shared expert (a dense model: attention plus the dense MLP)."""
        h = self.hidden_size
        if not self.is_moe:
            return self.attention_params_per_layer + self.dense_mlp_params
        shared = 3 * h * self.shared_expert_intermediate_size
        return self.attention_params_per_layer + h * self.num_experts + shared

    @property
    def _dense_layers_params(self) -> int:
        """Matmul parameters of the layers with a dense MLP (all of a dense model's)."""
        n = self.num_layers if not self.is_moe else self.num_dense_layers
        return n * (self.attention_params_per_layer + self.dense_mlp_params)

    @property
    def layer_params(self) -> int:
        """Matmul parameters of all decoder layers, every expert included (memory)."""
        per = self.always_on_params_per_layer + self.num_experts * self.expert_params
        return self._dense_layers_params + self.num_moe_layers * per

    @property
    def active_layer_params(self) -> int:
        """Matmul parameters of all decoder layers that one token computes with."""
        per = self.always_on_params_per_layer + self.num_experts_per_tok * self.expert_params
        return self._dense_layers_params + self.num_moe_layers * per

    @property
    def routed_expert_params(self) -> int:
        """Every routed expert of every layer."""
        return self.num_moe_layers * self.num_experts * self.expert_params

    @property
    def params(self) -> int:
        if self.params_override is not None:
            return self.params_override
        return self.layer_params + self.embedding_params + self.lm_head_params + self.extra_params

    @property
    def layer_bytes(self) -> float:
        """Bytes per decoder-layer matmul weight."""
        lb = self.layer_bytes_per_param
        return self.bytes_per_param if lb is None else lb

    @property
    def expert_bytes(self) -> float:
        """Bytes per routed-expert weight."""
        eb = self.expert_bytes_per_param
        return self.layer_bytes if eb is None else eb

    @property
    def weight_bytes(self) -> int:
        layers = min(self.layer_params, self.params)
        experts = min(self.routed_expert_params, layers)
        rest = self.params - layers
        return int(
            experts * self.expert_bytes
            + (layers - experts) * self.layer_bytes
            + rest * self.bytes_per_param
        )

    @property
    def kv_elements_per_layer(self) -> int:
        """Elements one token caches in one layer: K and V of every KV head, or MLA's latent."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """One token's KV cache over every layer (what the simulator's block pool counts: a
        sliding-window layer's cache of a token is counted until the sequence ends)."""
        return int(self.num_layers * self.kv_elements_per_layer * self.kv_bytes_per_element)

    @property
    def full_attention_kv_bytes_per_token(self) -> int:
        """One token's KV cache over the layers without a sliding window."""
        full = self.num_layers - self.num_sliding_layers
        return int(full * self.kv_elements_per_layer * self.kv_bytes_per_element)

    def kv_bytes_for_context(self, tokens: int) -> int:
        """A sequence's KV cache at `tokens` of context when each sliding-window layer keeps
        only its window (vLLM's hybrid KV-cache manager frees blocks that leave the window)."""
        sliding = self.kv_bytes_per_token - self.full_attention_kv_bytes_per_token
        window = tokens if self.sliding_window <= 0 else min(tokens, self.sliding_window)
        return self.full_attention_kv_bytes_per_token * tokens + sliding * window

    def with_dtypes(self, dtype: str = "auto", kv_cache_dtype: str = "auto") -> ModelPreset:
        """This model served with vLLM's weight and KV-cache data types (DTYPES,
        KV_CACHE_DTYPES). "auto" keeps the preset's own sizes; "bfloat16"/"float16" are 2 bytes;
        "fp8" (vLLM's `--quantization fp8` or an FP8 checkpoint) stores the decoder layers'
        matmul weights in 1 byte and runs them on FP8 tensor cores where the GPU has them
        (elsewhere vLLM's W8A16 Marlin kernels read 1 byte and compute in 16-bit); the
        embedding and LM head stay 16-bit. An fp8 KV cache stores 1 byte per element."""
        changes: dict[str, Any] = {}
        if dtype == "fp8":
            changes.update(layer_bytes_per_param=1.0, expert_bytes_per_param=None, fp8_compute=True)
        elif dtype in ("bfloat16", "float16"):
            changes.update(
                bytes_per_param=2.0,
                layer_bytes_per_param=None,
                expert_bytes_per_param=None,
                fp8_compute=False,
            )
        elif dtype != "auto":
            raise ValueError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPES)}")
        if kv_cache_dtype.startswith("fp8"):
            changes["kv_bytes_per_element"] = 1.0
        elif kv_cache_dtype in ("bfloat16", "float16"):
            changes["kv_bytes_per_element"] = 2.0
        elif kv_cache_dtype != "auto":
            allowed = ", ".join(KV_CACHE_DTYPES)
            raise ValueError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; allowed: {allowed}")
        return replace(self, **changes) if changes else self
