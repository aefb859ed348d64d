"""Parameter counts a config.json implies beyond the plain q/k/v/o + MLP shape: multi-head latent
attention's projections (DeepSeek-V3) and the small weights outside the matmuls (norms, biases,
attention sinks). `hf_config.py` reads the keys; this does the arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from harness.sim.model_shape import ModelPreset

# Model types whose attention has biases on q, k and v (Qwen2, Qwen2.5) without saying so.
QKV_BIAS_TYPES = ("qwen2", "qwen2_moe")
# Model types that normalise each head's query and key (one head_dim weight each).
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2")
# Model types with four norms per layer (before and after attention and MLP), not two.
FOUR_NORM_TYPES = ("gemma2", "gemma3", "gemma3_text")


class IntReader(Protocol):
    def int(self, *keys: str, default: int | None = None, zero_ok: bool = False) -> int: ...


def mla_attention_params(r: IntReader, hidden: int, heads: int) -> int:
    """One MLA layer's projections: q (through q_lora_rank when set), the joint KV down
    projection to the latent and the decoupled RoPE key, the latent's up projection to every
    head's key and value, and the output."""
    nope, rope = r.int("qk_nope_head_dim"), r.int("qk_rope_head_dim")
    v_dim, kv_rank = r.int("v_head_dim"), r.int("kv_lora_rank")
    q_rank = r.int("q_lora_rank", default=0, zero_ok=True)
    q_out = heads * (nope + rope)
    q = hidden * q_rank + q_rank * q_out if q_rank else hidden * q_out
    kv_down = hidden * (kv_rank + rope)
    kv_up = kv_rank * heads * (nope + v_dim)
    return q + kv_down + kv_up + heads * v_dim * hidden


def extra_params(doc: Mapping[str, Any], m: ModelPreset) -> int:
    """Norms, biases and sinks over the whole model (a fraction of a percent of it, counted so
    that the total matches the published one)."""
    kind = str(doc.get("model_type", ""))
    h, d = m.hidden_size, m.head_dim
    per_layer = (4 if kind in FOUR_NORM_TYPES else 2) * h
    if kind in QK_NORM_TYPES:
        per_layer += 2 * d
    if m.is_mla:
        per_layer += m.kv_lora_rank + int(doc.get("q_lora_rank") or 0)
    q_out, kv_out = m.num_heads * d, m.num_kv_heads * d
    if kind in QKV_BIAS_TYPES:
        per_layer += q_out + 2 * kv_out
    if doc.get("attention_bias") is True:
        per_layer += q_out + 2 * kv_out + h
    if kind == "gpt_oss":  # a learned sink per head, router and expert biases
        i = m.moe_intermediate_size
        per_layer += m.num_heads + m.num_experts * (1 + 2 * i + h)
    return m.num_layers * per_layer + h  # + the final norm
