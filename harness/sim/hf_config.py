"""Any model from its Hugging Face config.json: find the file (`--model PATH_OR_NAME`: a model
folder, a config.json, or a repo name already in the local Hugging Face cache) and turn it into
the simulator's `ModelPreset`. No network: a name that is neither a preset, a path nor cached is
refused.

What is read (transformers' names; the families' aliases beside them):

- shape: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads (default: the
  heads), head_dim (default hidden / heads), intermediate_size, vocab_size,
  tie_word_embeddings (transformers' default: true), max_position_embeddings;
- mixture of experts: num_experts / num_local_experts / n_routed_experts, num_experts_per_tok,
  moe_intermediate_size (Mixtral and gpt-oss give the expert size as intermediate_size),
  shared_expert_intermediate_size or n_shared_experts, first_k_dense_replace (DeepSeek), and
  Qwen's decoder_sparse_step / mlp_only_layers;
- MLA (DeepSeek-V3): q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
  v_head_dim;
- sliding windows: layer_types ("sliding_attention" / "full_attention": gpt-oss, Gemma 3 in
  current transformers), else sliding_window_pattern (Gemma 3: every Nth layer global), else
  use_sliding_window / max_window_layers (Qwen2), else a sliding_window on every layer
  (Mistral 7B v0.1);
- data type: torch_dtype (or dtype), quantization_config.quant_method (fp8, mxfp4, awq, gptq);
- a multimodal config's text_config (Gemma 3 4B-27B): the language model alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.sim.hf_params import extra_params, mla_attention_params
from harness.sim.model_shape import ModelPreset

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few kB; anything this large is not one
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 2.0}  # vLLM serves fp32 in 16 bits
QUANT_METHODS = ("fp8", "mxfp4", "awq", "gptq")
MXFP4_BYTES = 0.53125  # 4-bit values and one 8-bit scale per 32 (OCP MX: 4.25 bits a weight)
LAYER_TYPES = ("sliding_attention", "full_attention")


def hf_cache_dir() -> Path:
    """The local Hugging Face hub cache: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/..."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home) / "hub"


def _cached_config(repo: str) -> Path | None:
    """models--ORG--NAME/snapshots/<the snapshot refs/main names, else the newest>/config.json."""
    folder = hf_cache_dir() / ("models--" + repo.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = folder / "refs" / "main"
    if ref.is_file():
        pick = snapshots / ref.read_text(encoding="utf-8").strip() / "config.json"
        if pick.is_file():
            return pick
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def find_config(name: str) -> Path | None:
    """The config.json `name` points at (a folder holding one, a JSON file, or a repo name in
    the local cache), or None when it is none of these."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path / "config.json"  # missing: read_config says so, naming the file
    if path.is_file():
        return path
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        return _cached_config(name)
    return None


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object in `path`. Raises ConfigError naming the file."""
    where = str(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(where, "", f"larger than {MAX_CONFIG_BYTES} bytes: not a config.json")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            where, "", "no config.json here (a Hugging Face model folder has one)"
        ) from None
    except OSError as e:
        raise ConfigError(where, "", f"cannot read: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(where, "", f"not valid JSON: {str(e)[:120]}") from None
    if not isinstance(doc, dict):
        raise ConfigError(where, "", "expected a JSON object (a model's config.json)")
    return doc


class _Reader:
    """Typed reads of one config's keys; every error names the file and the key."""

    def __init__(self, doc: Mapping[str, Any], where: str, prefix: str = "") -> None:
        self.doc, self.where, self.prefix = doc, where, prefix

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.where, self.prefix + key, message)

    def first(self, *keys: str) -> tuple[str, Any]:
        """The first of `keys` present and not null: (its name, its value); (keys[0], None)."""
        for k in keys:
            if self.doc.get(k) is not None:
                return k, self.doc[k]
        return keys[0], None

    def int(self, *keys: str, default: int | None = None, zero_ok: bool = False) -> int:
        key, value = self.first(*keys)
        if value is None:
            if default is None:
                raise self.fail(key, "missing (an integer > 0)")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero_ok else 1):
            raise self.fail(
                key, f"expected an integer {'>= 0' if zero_ok else '> 0'}, got {value!r}"
            )
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.doc.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}")
        return value


def _text_doc(doc: Mapping[str, Any], where: str) -> tuple[dict[str, Any], str]:
    """The language model's keys: a multimodal config's text_config, with the top level's
    data type and quantisation where the text part does not give its own."""
    text = doc.get("text_config")
    if text is None:
        return dict(doc), ""
    if not isinstance(text, dict):
        raise ConfigError(where, "text_config", "expected an object")
    merged = {k: doc[k] for k in ("torch_dtype", "dtype", "quantization_config") if k in doc}
    return merged | text, "text_config."


def _sliding_layers(r: _Reader, layers: int) -> tuple[int, int]:
    """(sliding_window, layers that use it)."""
    types = r.doc.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise r.fail("layer_types", f"expected a list of {layers} layer types")
        bad = [t for t in types if t not in LAYER_TYPES]
        if bad:
            raise r.fail("layer_types", f"unknown {bad[0]!r}; allowed: {', '.join(LAYER_TYPES)}")
        n = types.count("sliding_attention")
        return (r.int("sliding_window") if n else 0), n
    if r.doc.get("sliding_window") is None or r.doc.get("use_sliding_window") is False:
        return 0, 0
    window = r.int("sliding_window")
    if "sliding_window_pattern" in r.doc:  # Gemma 3: layer i is global when (i + 1) % N == 0
        pattern = r.int("sliding_window_pattern")
        return window, layers - layers // pattern
    if r.doc.get("use_sliding_window") is True:  # Qwen2: layers from max_window_layers on
        return window, max(layers - r.int("max_window_layers", default=layers, zero_ok=True), 0)
    return window, layers


def _moe(r: _Reader, layers: int, intermediate: int) -> dict[str, int]:
    key, experts = r.first("num_experts", "num_local_experts", "n_routed_experts")
    if experts is None or experts == 0:
        return {}
    e = r.int(key)
    k = r.int("num_experts_per_tok", "experts_per_token", "moe_topk")
    if k > e:
        raise r.fail("num_experts_per_tok", f"{k} is more than {key} {e}")
    size = r.int("moe_intermediate_size", default=intermediate)
    shared = r.int("shared_expert_intermediate_size", default=0, zero_ok=True)
    if "n_shared_experts" in r.doc and r.doc["n_shared_experts"] is not None:
        shared = r.int("n_shared_experts", zero_ok=True) * size
    dense = r.int("first_k_dense_replace", default=0, zero_ok=True)
    step = r.int("decoder_sparse_step", default=1)
    only = r.doc.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise r.fail("mlp_only_layers", "expected a list of layer numbers")
    if step != 1 or only:
        dense = sum(1 for i in range(layers) if i in only or (i + 1) % step != 0)
    if dense > layers:
        raise r.fail("first_k_dense_replace", f"{dense} is more than the {layers} layers")
    return {
        "num_experts": e,
        "num_experts_per_tok": k,
        "moe_intermediate_size": size,
        "shared_expert_intermediate_size": shared,
        "num_dense_layers": dense,
    }


def _dtypes(r: _Reader) -> dict[str, Any]:
    key, dtype = r.first("torch_dtype", "dtype")
    out: dict[str, Any] = {}
    if dtype is not None:
        if dtype not in DTYPE_BYTES:
            raise r.fail(key, f"unknown {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
        out["bytes_per_param"] = DTYPE_BYTES[dtype]
    quant = r.doc.get("quantization_config")
    if quant is None:
        return out
    if not isinstance(quant, dict):
        raise r.fail("quantization_config", "expected an object")
    q = _Reader(quant, r.where, r.prefix + "quantization_config.")
    method = quant.get("quant_method")
    if method == "fp8":
        out.update(layer_bytes_per_param=1.0, fp8_compute=True)
    elif method == "mxfp4":
        out["expert_bytes_per_param"] = MXFP4_BYTES
    elif method in ("awq", "gptq"):  # integer weights and a 16-bit scale per group
        bits, group = (
            q.int("bits", "w_bit", default=4),
            q.int("group_size", "q_group_size", default=128),
        )
        out["layer_bytes_per_param"] = bits / 8 + 2 / group
    else:
        raise q.fail("quant_method", f"unknown {method!r}; allowed: {', '.join(QUANT_METHODS)}")
    return out


def model_from_config(path: Path, name: str | None = None) -> ModelPreset:
    """The ModelPreset a config.json describes. Raises ConfigError naming the file and key."""
    where = str(path)
    doc, prefix = _text_doc(read_config(path), where)
    r = _Reader(doc, where, prefix)
    layers = r.int("num_hidden_layers", "n_layer", "num_layers")
    hidden = r.int("hidden_size", "n_embd", "d_model")
    heads = r.int("num_attention_heads", "n_head")
    kv_heads = r.int("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise r.fail("num_key_value_heads", f"{kv_heads} does not divide the {heads} heads")
    mla: dict[str, Any] = {}
    if doc.get("kv_lora_rank") is not None:
        rope = r.int("qk_rope_head_dim")
        head_dim = r.int("qk_nope_head_dim") + rope
        mla = {
            "kv_lora_rank": r.int("kv_lora_rank"),
            "qk_rope_head_dim": rope,
            "attention_params": mla_attention_params(r, hidden, heads),
        }
    elif doc.get("head_dim") is not None:
        head_dim = r.int("head_dim")
    elif hidden % heads:
        raise r.fail("head_dim", f"missing, and hidden_size {hidden} is not a multiple of {heads}")
    else:
        head_dim = hidden // heads
    intermediate = r.int("intermediate_size", "ffn_dim", "n_inner")
    window, sliding = _sliding_layers(r, layers)
    shape: dict[str, Any] = {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": intermediate,
        "vocab_size": r.int("vocab_size"),
        "tie_word_embeddings": r.bool("tie_word_embeddings", True),
        "max_position_embeddings": r.int("max_position_embeddings", "n_positions", "seq_length"),
        "sliding_window": window,
        "num_sliding_layers": sliding,
        **mla,
        **_moe(r, layers, intermediate),
        **_dtypes(r),
    }
    label = name or (path.parent.name if path.name == "config.json" else path.stem)
    hf_id = doc.get("_name_or_path")
    model = ModelPreset(
        name=label,
        hf_id=hf_id if isinstance(hf_id, str) and hf_id else label,
        source=f"config.json at {path}"
        + (" (text model; vision tower not counted)" if prefix else ""),
        **shape,
    )
    return replace(model, extra_params=extra_params(doc, model))
