"""Simulator settings: one frozen dataclass shared by the CLI, a scenario's `[sim]` table and
the launcher, plus the vLLM defaults that turn it into effective engine limits.

`SimSettings.from_mapping` validates a `[sim]` table (errors name the key and the allowed
values), `to_argv` gives the equivalent `python -m harness sim` flags, and `resolved()`
applies vLLM's defaults and sizes the KV cache from the presets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from harness.errors import ConfigError
from harness.sim import memory_profile
from harness.sim.presets import (
    DTYPES,
    GIB,
    KV_CACHE_DTYPES,
    GpuPreset,
    ModelPreset,
    load_presets,
)
from harness.sim.roofline import Roofline

BATCHING_MODES = ("continuous", "static")
# vllm: vLLM's OpenAI server (accepts its extensions, per-chunk usage, /metrics).
# openai-strict: a gateway that validates as OpenAI's API does (harness/sim/strict.py).
API_STYLES = ("vllm", "openai-strict")
MAX_CHUNK_TOKENS = 4096  # a coalesced chunk larger than this is surely a typo
FAULT_KINDS = ("http429", "http500", "disconnect", "stall", "malformed", "slow_headers")
DEFAULT_GPU = "H200"
DEFAULT_MODEL = "Qwen2.5-7B-Instruct"
DEFAULT_BLOCK_SIZE = 16  # vLLM's default KV block size (tokens)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
# vLLM's defaults for the OpenAI server: large-memory GPUs (>= 70 GiB, not A100) get more.
LARGE_GPU_MAX_NUM_SEQS, LARGE_GPU_MAX_BATCHED_TOKENS = 1024, 8192
SMALL_GPU_MAX_NUM_SEQS, SMALL_GPU_MAX_BATCHED_TOKENS = 256, 2048


def _int(lo: int) -> Callable[[object], int]:
    def check(v: object) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"expected an integer >= {lo}, got {v!r}")
        return v

    return check


def _opt_int(lo: int) -> Callable[[object], int | None]:
    inner = _int(lo)
    return lambda v: None if v is None else inner(v)


def _bool(v: object) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v


def _str(v: object) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected a non-empty string, got {v!r}")
    return v


def _opt_str(v: object) -> str | None:
    return None if v is None else _str(v)


def _batching(v: object) -> str:
    if v not in BATCHING_MODES:
        raise ValueError(f"expected one of {', '.join(BATCHING_MODES)}, got {v!r}")
    return str(v)


def _utilization(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
        raise ValueError(f"expected a fraction in (0, 1], got {v!r}")
    return float(v)


def _speedup(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
        raise ValueError(f"expected a number > 0 (1 = real time), got {v!r}")
    return float(v)


def _root_path(v: object) -> str:
    if not isinstance(v, str) or (v and not v.startswith("/")) or " " in v:
        raise ValueError(f"expected '' or a path starting with '/', such as '/api', got {v!r}")
    return v.rstrip("/")


def _faults(v: object) -> dict[str, float]:
    if not isinstance(v, Mapping):
        raise ValueError(f"expected a table of KIND = RATE, kinds: {', '.join(FAULT_KINDS)}")
    out: dict[str, float] = {}
    for kind, rate in v.items():
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; allowed: {', '.join(FAULT_KINDS)}")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ValueError(f"fault {kind}: expected a rate in [0, 1], got {rate!r}")
        out[str(kind)] = float(rate)
    if sum(out.values()) > 1 + 1e-9:
        raise ValueError(f"fault rates add up to {sum(out.values()):g}; at most 1 in all")
    return out


def _choice(allowed: tuple[str, ...]) -> Callable[[object], str]:
    def check(v: object) -> str:
        if v not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {v!r}")
        return str(v)

    return check


def _api_style(v: object) -> str:
    if v not in API_STYLES:
        raise ValueError(f"expected one of {', '.join(API_STYLES)}, got {v!r}")
    return str(v)


def _opt_seconds(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
        raise ValueError(f"expected seconds > 0, got {v!r}")
    return float(v)


def _seconds(v: object) -> float:
    out = _opt_seconds(v)
    if out is None:
        raise ValueError("expected seconds > 0, got None")
    return out


CHUNK_TOKENS_HELP = (
    "an integer (tokens per chunk), a list of integers drawn with equal weight, or "
    "{ values = [1, 2, 4], weights = [0.5, 0.3, 0.2] }"
)


def _weighted_ints(
    v: object, help_text: str, lo: int, hi: int, what: str, none_value: int
) -> tuple[tuple[int, float], ...]:
    """A distribution of integers lo..hi as ((value, weight), ...), weights summing to 1, from
    an integer, a list drawn with equal weight, or { values, weights } (or the normalised form
    itself, as the CLI and to_argv pass it). () when every value is `none_value` (the default
    behaviour). Raises ValueError naming what is allowed."""
    if isinstance(v, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in v):
        pairs = [(p[0], p[1]) for p in v]
    elif isinstance(v, Mapping):
        values, weights = v.get("values"), v.get("weights")
        if set(v) - {"values", "weights"} or not isinstance(values, list):
            raise ValueError(f"expected {help_text}")
        if weights is None:
            weights = [1.0] * len(values)
        if not isinstance(weights, list) or len(weights) != len(values):
            raise ValueError("values and weights must be lists of the same length")
        pairs = list(zip(values, weights, strict=True))
    elif isinstance(v, list):
        pairs = [(x, 1.0) for x in v]
    else:
        pairs = [(v, 1.0)]
    if not pairs:
        raise ValueError(f"expected {help_text}")
    for k, w in pairs:
        if isinstance(k, bool) or not isinstance(k, int) or not lo <= k <= hi:
            raise ValueError(f"{what} must be integers {lo}..{hi}, got {k!r}")
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w < math.inf:
            raise ValueError(f"weights must be numbers >= 0, got {w!r}")
    total = float(sum(w for _, w in pairs))
    if total <= 0:
        raise ValueError("the weights add up to 0")
    if all(k == none_value for k, _ in pairs):
        return ()
    return tuple((int(k), float(w) / total) for k, w in pairs)


def _chunk_tokens(v: object) -> tuple[tuple[int, float], ...]:
    """Tokens coalesced into one SSE chunk: a distribution as ((tokens, weight), ...), weights
    summing to 1. () means one token per chunk, vLLM's way."""
    return _weighted_ints(v, CHUNK_TOKENS_HELP, 1, MAX_CHUNK_TOKENS, "tokens per chunk", 1)


MAX_REASONING_TOKENS = 1_000_000  # a longer reasoning draw is surely a typo
REASONING_TOKENS_HELP = (
    "an integer (reasoning tokens per answer), a list of integers drawn with equal weight, or "
    "{ values = [100, 400, 1600], weights = [0.5, 0.3, 0.2] }"
)


def _reasoning_tokens(v: object) -> tuple[tuple[int, float], ...]:
    """A reasoning model's thinking length per request, a distribution as ((tokens, weight),
    ...); () (or every value 0): not a reasoning model."""
    return _weighted_ints(v, REASONING_TOKENS_HELP, 0, MAX_REASONING_TOKENS, "reasoning tokens", 0)


def _share(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
        raise ValueError(f"expected a share in [0, 1], got {v!r}")
    return float(v)


# Validators per field: each returns the clean value or raises ValueError("what is allowed").
VALIDATORS: dict[str, Callable[[object], object]] = {
    "gpu": _str,
    "model": _str,
    "max_num_seqs": _opt_int(1),
    "max_num_batched_tokens": _opt_int(1),
    "batching": _batching,
    "block_size": _int(1),
    "gpu_memory_utilization": _utilization,
    "num_gpu_blocks": _opt_int(1),
    "enable_chunked_prefill": _bool,
    "enable_prefix_caching": _bool,
    "enable_prompt_tokens_details": _bool,
    "speedup": _speedup,
    "seed": _int(0),
    "root_path": _root_path,
    "faults": _faults,
    "tensor_parallel_size": _int(1),
    "pipeline_parallel_size": _int(1),
    "dtype": _choice(DTYPES),
    "kv_cache_dtype": _choice(KV_CACHE_DTYPES),
    "max_model_len": _opt_int(1),
    "preset_file": _opt_str,
    "served_model_name": _opt_str,
    "api_style": _api_style,
    "chunk_tokens": _chunk_tokens,
    "keepalive_s": _opt_seconds,
    "rpm_limit": _opt_int(1),
    "tpm_limit": _opt_int(1),
    "rate_limit_burst_s": _seconds,
    "reasoning_tokens": _reasoning_tokens,
    "tool_call_share": _share,
}


@dataclass(frozen=True)
class SimSettings:
    """Everything that shapes the simulated engine (host, port and API key are not here)."""

    gpu: str = DEFAULT_GPU
    model: str = DEFAULT_MODEL
    max_num_seqs: int | None = None  # None: vLLM's default for the GPU
    max_num_batched_tokens: int | None = None  # None: vLLM's default for the GPU
    batching: str = "continuous"
    block_size: int = DEFAULT_BLOCK_SIZE
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    num_gpu_blocks: int | None = None  # None: sized from memory
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    # vLLM's --enable-prompt-tokens-details (off by default in vLLM, on here): each answer's
    # final usage carries prompt_tokens_details.cached_tokens, the prompt tokens found cached
    enable_prompt_tokens_details: bool = True
    speedup: float = 1.0
    seed: int = 0
    root_path: str = ""
    faults: Mapping[str, float] = field(default_factory=dict)
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1  # layers split into stages of tp GPUs each (roofline.py)
    # vLLM's names: weights ("fp8" stands for `--quantization fp8` / an FP8 checkpoint) and
    # KV cache; "auto" keeps the model preset's sizes (presets.ModelPreset.with_dtypes).
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None  # None: the model's, capped to what the KV cache holds
    preset_file: str | None = None
    served_model_name: str | None = None  # as vLLM's flag: the only name requests may carry
    # Gateway behaviour (README "Gateways"): the request validation and stream shape of
    # `api_style`; tokens coalesced into one chunk (a distribution, () = one per token); an SSE
    # comment `: ping` at the stream's start and whenever the next chunk is `keepalive_s` (model
    # seconds) away; request and token rate limits per minute of wall-clock time, answered with
    # 429 and Retry-After, enforced over `rate_limit_burst_s` as OpenAI quantises its limits.
    api_style: str = "vllm"
    chunk_tokens: tuple[tuple[int, float], ...] = ()
    keepalive_s: float | None = None
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    rate_limit_burst_s: float = 1.0
    # A reasoning model (README "Token channels"): each chat answer first thinks a number of
    # tokens drawn from this distribution (() = a model that does not reason), within
    # max_tokens; and a chat request that carries `tools` calls one with `tool_choice`
    # "required" or a named function, never with "none", and with "auto" at this share.
    reasoning_tokens: tuple[tuple[int, float], ...] = ()
    tool_call_share: float = 1.0

    @classmethod
    def from_mapping(cls, d: Mapping[str, object], where: str) -> SimSettings:
        """Validate a scenario's `[sim]` table. Raises ConfigError(where, "sim.<key>", ...)."""
        names = [f.name for f in fields(cls)]
        values: dict[str, Any] = {}  # fields, each checked by its VALIDATORS entry
        for key, raw in d.items():
            if key not in VALIDATORS:
                raise ConfigError(where, f"sim.{key}", f"unknown key; allowed: {', '.join(names)}")
            try:
                values[key] = VALIDATORS[key](raw)
            except ValueError as e:
                raise ConfigError(where, f"sim.{key}", str(e)) from None
        settings = cls(**values)
        settings.resolved(where, key_prefix="sim.")
        return settings

    def to_argv(self) -> list[str]:
        """The `python -m harness sim` flags that give these settings (defaults left out)."""
        default = SimSettings()
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            if f.name == "enable_chunked_prefill":
                argv.append("--no-chunked-prefill")
            elif f.name == "enable_prefix_caching":
                argv.append("--no-prefix-caching")
            elif f.name == "enable_prompt_tokens_details":
                argv.append("--no-prompt-tokens-details")
            elif f.name == "faults":
                for kind, rate in value.items():
                    argv += ["--fault", f"{kind}={rate!r}"]
            elif f.name in ("chunk_tokens", "reasoning_tokens"):
                argv += [
                    "--" + f.name.replace("_", "-"),
                    ",".join(f"{k}:{w!r}" for k, w in value),
                ]
            elif f.name.endswith("_s"):
                argv += ["--" + f.name[:-2].replace("_", "-"), repr(value)]
            else:
                argv += ["--" + f.name.replace("_", "-"), str(value)]
        return argv

    def resolved(self, where: str = "sim", key_prefix: str = "") -> ResolvedSim:
        """Apply vLLM's defaults and size the KV cache. Raises ConfigError if it cannot fit."""
        presets = load_presets(self.preset_file)
        gpu = presets.gpu(self.gpu, where, key_prefix + "gpu")
        model = presets.model(self.model, where, key_prefix + "model").with_dtypes(
            self.dtype, self.kv_cache_dtype
        )
        tp = self.tensor_parallel_size
        pp = self.pipeline_parallel_size
        large = gpu.vllm_large_defaults
        max_num_seqs = self.max_num_seqs or (
            LARGE_GPU_MAX_NUM_SEQS if large else SMALL_GPU_MAX_NUM_SEQS
        )
        default_budget = LARGE_GPU_MAX_BATCHED_TOKENS if large else SMALL_GPU_MAX_BATCHED_TOKENS
        # vLLM profiles with the budget it will schedule: before the KV cache caps max_model_len
        profile_len = self.max_model_len or model.max_position_embeddings
        profile_budget = self.max_num_batched_tokens or (
            default_budget if self.enable_chunked_prefill else max(profile_len, default_budget)
        )
        if self.num_gpu_blocks is not None:
            num_blocks = self.num_gpu_blocks
        else:
            free = memory_profile.kv_cache_bytes(
                gpu.memory_bytes,
                self.gpu_memory_utilization,
                model,
                profile_budget,
                max_num_seqs,
                tp,
                pp,
            )
            # MLA's latent is cached whole on every GPU of the group (model_shape.py)
            copies = tp if model.kv_replicated_over_tp else 1
            num_blocks = int(free // (self.block_size * model.kv_bytes_per_token * copies))
            if num_blocks < 1:
                overhead = memory_profile.overhead_bytes_per_gpu(
                    model, profile_budget, max_num_seqs, tp, pp
                )
                need = (model.weight_bytes / (tp * pp) + overhead) / GIB
                usable = memory_profile.usable_bytes_per_gpu(
                    gpu.memory_bytes, self.gpu_memory_utilization
                )
                raise ConfigError(
                    where,
                    key_prefix + "gpu",
                    f"{model.name} does not fit on {self.gpu} x{tp * pp}: needs {need:.1f} GiB per GPU "
                    f"before any KV cache, {usable / GIB:.1f} GiB usable; use a larger GPU or "
                    "tensor_parallel_size",
                )
        kv_tokens = num_blocks * self.block_size
        max_model_len = self.max_model_len or min(model.max_position_embeddings, kv_tokens)
        if self.max_model_len is not None and self.max_model_len > model.max_position_embeddings:
            raise ConfigError(
                where,
                key_prefix + "max_model_len",
                f"{self.max_model_len} exceeds {model.name}'s {model.max_position_embeddings}",
            )
        if self.enable_chunked_prefill:
            budget = self.max_num_batched_tokens or default_budget
        else:
            budget = self.max_num_batched_tokens or max(max_model_len, default_budget)
            if budget < max_model_len:
                raise ConfigError(
                    where,
                    key_prefix + "max_num_batched_tokens",
                    f"{budget} is smaller than max_model_len {max_model_len} with chunked prefill "
                    "off; raise it, lower max_model_len, or enable chunked prefill",
                )
        return ResolvedSim(
            settings=self,
            gpu_preset=gpu,
            model_preset=model,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=budget,
            num_gpu_blocks=num_blocks,
            max_model_len=max_model_len,
            roofline=Roofline.build(gpu, model, tp, pp),
        )


@dataclass(frozen=True)
class ResolvedSim:
    """The effective engine limits after vLLM's defaults (what the scheduler runs with)."""

    settings: SimSettings
    gpu_preset: GpuPreset
    model_preset: ModelPreset
    max_num_seqs: int
    max_num_batched_tokens: int
    num_gpu_blocks: int
    max_model_len: int
    roofline: Roofline

    @property
    def block_size(self) -> int:
        return self.settings.block_size

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.settings.block_size
