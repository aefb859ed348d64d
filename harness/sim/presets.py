"""GPU and model presets for the simulator: load, validate, and derive sizes from them.

The built-in presets live in `presets/builtin.toml`; a user's `--preset-file` has the same
shape and adds to (or replaces) them. Everything here is pure: numbers in, numbers out.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError

BUILTIN_PRESETS = Path(__file__).with_name("presets") / "builtin.toml"
BYTES_PER_PARAM = 2  # bf16 weights
BYTES_PER_KV_ELEMENT = 2  # bf16 KV cache (vLLM's default kv_cache_dtype="auto")
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class GpuPreset:
    """One accelerator. Bandwidth in bytes/s, FLOP/s dense bf16, memory in bytes."""

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    flop_per_s: float

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def vllm_large_defaults(self) -> bool:
        """vLLM's rule: 70 GiB or more and not an A100 -> max_num_seqs 1024, 8192 tokens."""
        return self.memory_gib >= 70 and "a100" not in self.name.lower()


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """A decoder-only transformer served in bf16 (the fields of its config.json)."""

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

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def layer_params(self) -> int:
        """Matmul parameters of all decoder layers (attention q/k/v/o and a gated MLP)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * self.num_heads * d * 2 + h * self.num_kv_heads * d * 2
        mlp = 3 * h * self.intermediate_size
        return self.num_layers * (attn + mlp)

    @property
    def params(self) -> int:
        if self.params_override is not None:
            return self.params_override
        return self.layer_params + self.embedding_params + self.lm_head_params

    @property
    def weight_bytes(self) -> int:
        return self.params * BYTES_PER_PARAM

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, every KV head: 2 * layers * kv_heads * head_dim * 2 bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * BYTES_PER_KV_ELEMENT


@dataclass(frozen=True, slots=True)
class Presets:
    gpus: Mapping[str, GpuPreset]
    models: Mapping[str, ModelPreset]

    def gpu(self, name: str, where: str, key: str) -> GpuPreset:
        if name not in self.gpus:
            raise ConfigError(where, key, f"unknown GPU {name!r}; allowed: {', '.join(self.gpus)}")
        return self.gpus[name]

    def model(self, name: str, where: str, key: str) -> ModelPreset:
        if name not in self.models:
            allowed = ", ".join(self.models)
            raise ConfigError(where, key, f"unknown model {name!r}; allowed: {allowed}")
        return self.models[name]


_GPU_FIELDS = {"memory_gib": float, "bandwidth_gb_per_s": float, "bf16_tflop_per_s": float}
_MODEL_INT_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)


def _positive(where: str, key: str, value: object, kind: type) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()  # type: ignore[arg-type]
    if not ok or not value > 0:  # type: ignore[operator]
        what = "an integer" if kind is int else "a number"
        raise ConfigError(where, key, f"expected {what} > 0, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _parse_gpu(name: str, table: object, where: str) -> GpuPreset:
    key = f"gpu.{name}"
    if not isinstance(table, Mapping):
        raise ConfigError(where, key, "expected a table")
    unknown = set(table) - set(_GPU_FIELDS)
    if unknown:
        raise ConfigError(
            where, f"{key}.{sorted(unknown)[0]}", f"unknown key; allowed: {', '.join(_GPU_FIELDS)}"
        )
    missing = [f for f in _GPU_FIELDS if f not in table]
    if missing:
        raise ConfigError(where, f"{key}.{missing[0]}", "missing (a number > 0)")
    v = {f: _positive(where, f"{key}.{f}", table[f], float) for f in _GPU_FIELDS}
    return GpuPreset(
        name=name,
        memory_bytes=int(v["memory_gib"] * GIB),
        bandwidth_bytes_per_s=v["bandwidth_gb_per_s"] * 1e9,
        flop_per_s=v["bf16_tflop_per_s"] * 1e12,
    )


def _parse_model(name: str, table: object, where: str) -> ModelPreset:
    key = f"model.{name}"
    if not isinstance(table, Mapping):
        raise ConfigError(where, key, "expected a table")
    allowed = set(_MODEL_INT_FIELDS) | {"hf_id", "tie_word_embeddings", "params"}
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(
            where,
            f"{key}.{sorted(unknown)[0]}",
            f"unknown key; allowed: {', '.join(sorted(allowed))}",
        )
    missing = [f for f in _MODEL_INT_FIELDS if f not in table]
    if missing:
        raise ConfigError(where, f"{key}.{missing[0]}", "missing (an integer > 0)")
    ints = {f: int(_positive(where, f"{key}.{f}", table[f], int)) for f in _MODEL_INT_FIELDS}
    tie = table.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ConfigError(
            where, f"{key}.tie_word_embeddings", f"expected true or false, got {tie!r}"
        )
    hf_id = table.get("hf_id", name)
    if not isinstance(hf_id, str):
        raise ConfigError(where, f"{key}.hf_id", f"expected a string, got {hf_id!r}")
    params = table.get("params")
    if params is not None:
        params = int(_positive(where, f"{key}.params", params, int))
    return ModelPreset(
        name=name, hf_id=hf_id, tie_word_embeddings=tie, params_override=params, **ints
    )


def parse_presets(data: Mapping[str, object], where: str) -> Presets:
    """Validate a preset document (`[gpu.NAME]`, `[model.NAME]` tables). Raises ConfigError."""
    unknown = set(data) - {"gpu", "model"}
    if unknown:
        raise ConfigError(where, sorted(unknown)[0], "unknown table; allowed: gpu, model")
    gpus_t = data.get("gpu", {})
    models_t = data.get("model", {})
    if not isinstance(gpus_t, Mapping) or not isinstance(models_t, Mapping):
        raise ConfigError(
            where, "gpu" if not isinstance(gpus_t, Mapping) else "model", "expected tables"
        )
    gpus = {n: _parse_gpu(n, t, where) for n, t in gpus_t.items()}
    models = {n: _parse_model(n, t, where) for n, t in models_t.items()}
    return Presets(gpus=gpus, models=models)


def _read_toml(path: Path, where: str) -> Mapping[str, object]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(where, "", "preset file not found") from None
    except OSError as e:
        raise ConfigError(where, "", f"cannot read preset file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(where, "", f"not valid TOML: {e}") from None


def load_presets(preset_file: str | None = None) -> Presets:
    """Built-in presets, plus (and overridden by) the user's file if given. Raises ConfigError."""
    builtin = parse_presets(_read_toml(BUILTIN_PRESETS, str(BUILTIN_PRESETS)), str(BUILTIN_PRESETS))
    if preset_file is None:
        return builtin
    user = parse_presets(_read_toml(Path(preset_file), preset_file), preset_file)
    return Presets(gpus={**builtin.gpus, **user.gpus}, models={**builtin.models, **user.models})
