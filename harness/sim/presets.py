"""GPU and model presets for the simulator: load, validate, and derive sizes from them.

The built-in presets live in `presets/builtin.toml`; a user's `--preset-file` has the same
shape and adds to (or replaces) them. Here: model presets, a model by name or by its
config.json, and the preset file's reading; a GPU preset (datasheet figures with their
source, the roofline's defaults and what was fitted, its `[gpu.NAME]` table) is
`gpu_preset.py`'s, re-exported here with every name it had. Everything here is pure:
numbers in, numbers out.
"""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.sim.gpu_preset import (
    DEFAULT_ALLREDUCE_BANDWIDTH_EFFICIENCY as DEFAULT_ALLREDUCE_BANDWIDTH_EFFICIENCY,
)
from harness.sim.gpu_preset import DEFAULT_COMPUTE_EFFICIENCY as DEFAULT_COMPUTE_EFFICIENCY
from harness.sim.gpu_preset import (
    DEFAULT_INTAKE_S_PER_PROMPT_TOKEN as DEFAULT_INTAKE_S_PER_PROMPT_TOKEN,
)
from harness.sim.gpu_preset import DEFAULT_INTAKE_S_PER_REQUEST as DEFAULT_INTAKE_S_PER_REQUEST
from harness.sim.gpu_preset import DEFAULT_INTERCONNECT as DEFAULT_INTERCONNECT
from harness.sim.gpu_preset import (
    DEFAULT_KV_BANDWIDTH_EFFICIENCY as DEFAULT_KV_BANDWIDTH_EFFICIENCY,
)
from harness.sim.gpu_preset import (
    DEFAULT_PER_SEQUENCE_OVERHEAD_S as DEFAULT_PER_SEQUENCE_OVERHEAD_S,
)
from harness.sim.gpu_preset import (
    DEFAULT_PREFILL_EFFICIENCY_FACTOR as DEFAULT_PREFILL_EFFICIENCY_FACTOR,
)
from harness.sim.gpu_preset import DEFAULT_REQUEST_LATENCY_S as DEFAULT_REQUEST_LATENCY_S
from harness.sim.gpu_preset import DEFAULT_STEP_OVERHEAD_S as DEFAULT_STEP_OVERHEAD_S
from harness.sim.gpu_preset import DEFAULT_STREAM_S_PER_TOKEN as DEFAULT_STREAM_S_PER_TOKEN
from harness.sim.gpu_preset import DEFAULT_TP_SEQUENCE_OVERHEAD_S as DEFAULT_TP_SEQUENCE_OVERHEAD_S
from harness.sim.gpu_preset import DEFAULT_TP_STEP_OVERHEAD_S as DEFAULT_TP_STEP_OVERHEAD_S
from harness.sim.gpu_preset import (
    DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY as DEFAULT_WEIGHT_BANDWIDTH_EFFICIENCY,
)
from harness.sim.gpu_preset import GIB as GIB
from harness.sim.gpu_preset import INTERCONNECTS as INTERCONNECTS
from harness.sim.gpu_preset import Calibration as Calibration
from harness.sim.gpu_preset import GpuPreset as GpuPreset
from harness.sim.gpu_preset import _non_negative, _parse_gpu, _positive, _toml_value
from harness.sim.gpu_preset import gpu_to_toml as gpu_to_toml
from harness.sim.hf_config import find_config, model_from_config
from harness.sim.model_shape import (  # re-exported: ModelPreset lives beside its arithmetic
    BYTES_PER_KV_ELEMENT as BYTES_PER_KV_ELEMENT,
)
from harness.sim.model_shape import BYTES_PER_PARAM as BYTES_PER_PARAM
from harness.sim.model_shape import DTYPES as DTYPES
from harness.sim.model_shape import KV_CACHE_DTYPES as KV_CACHE_DTYPES
from harness.sim.model_shape import ModelPreset as ModelPreset

BUILTIN_PRESETS = Path(__file__).with_name("presets") / "builtin.toml"


@dataclass(frozen=True, slots=True)
class Presets:
    gpus: Mapping[str, GpuPreset]
    models: Mapping[str, ModelPreset]

    def gpu(self, name: str, where: str, key: str) -> GpuPreset:
        if name not in self.gpus:
            raise ConfigError(where, key, f"unknown GPU {name!r}; allowed: {', '.join(self.gpus)}")
        return self.gpus[name]

    def model(self, name: str, where: str, key: str) -> ModelPreset:
        """A preset by name, else the model whose config.json `name` points at (a folder, a
        file, or a repo name in the local Hugging Face cache: hf_config.py)."""
        if name in self.models:
            return self.models[name]
        path = find_config(name)
        if path is None:
            allowed = ", ".join(self.models)
            raise ConfigError(
                where,
                key,
                f"unknown model {name!r}; allowed: {allowed}, or a Hugging Face model folder, "
                "its config.json, or a repo name in the local Hugging Face cache",
            )
        return model_from_config(path, name if path.parent.parent.name == "snapshots" else None)


# Optional MoE shape fields of a model (config.json names; Mixtral calls num_experts
# num_local_experts and gives the expert size as intermediate_size).
_MODEL_MOE_FIELDS = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)
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


def _parse_model(name: str, table: object, where: str) -> ModelPreset:
    key = f"model.{name}"
    if not isinstance(table, Mapping):
        raise ConfigError(where, key, "expected a table")
    allowed = (
        set(_MODEL_INT_FIELDS)
        | set(_MODEL_MOE_FIELDS)
        | {
            "hf_id",
            "tie_word_embeddings",
            "params",
            "bytes_per_param",
            "kv_bytes_per_element",
        }
    )
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
    ints: dict[str, Any] = {
        f: int(_positive(where, f"{key}.{f}", table[f], int)) for f in _MODEL_INT_FIELDS
    }
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
    sizes: dict[str, Any] = {  # ModelPreset's float fields given here (else their defaults)
        f: _positive(where, f"{key}.{f}", table[f], float)
        for f in ("bytes_per_param", "kv_bytes_per_element")
        if f in table
    }
    moe: dict[str, Any] = {}  # ModelPreset's MoE fields given here (integers, checked)
    for f in _MODEL_MOE_FIELDS:
        if f in table:
            raw = table[f]
            if f == "shared_expert_intermediate_size":
                num = _non_negative(where, f"{key}.{f}", raw)
                if not num.is_integer():
                    raise ConfigError(where, f"{key}.{f}", f"expected an integer >= 0, got {raw!r}")
            else:
                num = _positive(where, f"{key}.{f}", raw, int)
            moe[f] = int(num)
    if moe:
        for f in _MODEL_MOE_FIELDS[:3]:
            if f not in moe:
                raise ConfigError(
                    where,
                    f"{key}.{f}",
                    "missing (an MoE model gives num_experts, num_experts_per_tok and "
                    "moe_intermediate_size)",
                )
        if moe["num_experts_per_tok"] > moe["num_experts"]:
            raise ConfigError(
                where,
                f"{key}.num_experts_per_tok",
                f"{moe['num_experts_per_tok']} is more than num_experts {moe['num_experts']}",
            )
    return ModelPreset(
        name=name,
        hf_id=hf_id,
        tie_word_embeddings=tie,
        params_override=params,
        **ints,
        **sizes,
        **moe,
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
    # sim sits below config (tests/test_architecture.py): the regular-file check is its own
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        raise ConfigError(where, "", "preset file not found") from None
    except OSError as e:
        raise ConfigError(where, "", f"cannot read preset file: {e.strerror}") from None
    if not regular:
        raise ConfigError(where, "", "cannot read preset file: not a regular file")
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(where, "", f"cannot read preset file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(where, "", f"not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(where, "", "tables and arrays nested too deep to read") from None


_builtin_cache: tuple[tuple[int, int], Presets] | None = None


def _builtin_presets() -> Presets:
    """The built-in file, parsed once per process while it is unchanged (size and mtime): the
    validation replay asked for it 864 times in one `--write` (3.6 ms each). Each caller gets
    its own dicts (of the same frozen presets), so none can change what the next one gets, and
    they pickle (worker processes, Ray)."""
    global _builtin_cache
    st = BUILTIN_PRESETS.stat()
    key = (st.st_mtime_ns, st.st_size)
    if _builtin_cache is None or _builtin_cache[0] != key:
        parsed = parse_presets(
            _read_toml(BUILTIN_PRESETS, str(BUILTIN_PRESETS)), str(BUILTIN_PRESETS)
        )
        _builtin_cache = (key, parsed)
    cached = _builtin_cache[1]
    return Presets(gpus=dict(cached.gpus), models=dict(cached.models))


def load_presets(preset_file: str | None = None) -> Presets:
    """Built-in presets, plus (and overridden by) the user's file if given. Raises ConfigError."""
    builtin = _builtin_presets()
    if preset_file is None:
        return builtin
    user = parse_presets(_read_toml(Path(preset_file), preset_file), preset_file)
    return Presets(gpus={**builtin.gpus, **user.gpus}, models={**builtin.models, **user.models})


def model_to_toml(model: ModelPreset) -> str:
    """The `[model."NAME"]` table that `parse_presets` reads back as `model`."""
    fields: dict[str, object] = {"hf_id": model.hf_id}
    fields.update({f: getattr(model, f) for f in _MODEL_INT_FIELDS})
    fields["tie_word_embeddings"] = model.tie_word_embeddings
    if model.params_override is not None:
        fields["params"] = model.params_override
    fields["bytes_per_param"] = float(model.bytes_per_param)
    fields["kv_bytes_per_element"] = float(model.kv_bytes_per_element)
    if model.is_moe:
        fields.update({f: getattr(model, f) for f in _MODEL_MOE_FIELDS})
    lines = [f'[model."{model.name}"]'] + [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"
