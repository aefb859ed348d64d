"""Any model from its config.json (harness/sim/hf_config.py): the parameter count each config
implies against the publisher's total, the KV-cache bytes per token the config implies, how
`--model` finds the file (folder, file, local Hugging Face cache), and bad configs refused with
one line naming the file and the key.

The fixtures under tests/data/hf_configs/ hold the keys of the published config.json files
(huggingface.co/<repo>/blob/main/config.json for each repo named below; Gemma 3 27B's
text_config with the keys transformers would otherwise default written out).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.sim.hf_config import find_config, model_from_config
from harness.sim.presets import load_presets
from harness.sim.settings import SimSettings

CONFIGS = Path(__file__).resolve().parent.parent / "data" / "hf_configs"

# Published totals (parameters, billions), each with where it is stated:
PUBLISHED_PARAMS_B = {
    # huggingface.co/meta-llama/Llama-3.1-8B-Instruct: safetensors "8.03B params"
    "llama-3.1-8b-instruct": 8.03,
    # huggingface.co/meta-llama/Llama-3.1-70B-Instruct: safetensors "70.6B params"
    "llama-3.1-70b-instruct": 70.6,
    # huggingface.co/Qwen/Qwen2.5-7B-Instruct model card: "Number of Parameters: 7.61B"
    "qwen2.5-7b-instruct": 7.61,
    # huggingface.co/Qwen/Qwen2.5-32B-Instruct model card: "Number of Parameters: 32.5B"
    "qwen2.5-32b-instruct": 32.5,
    # huggingface.co/Qwen/Qwen3-8B model card: "Number of Parameters: 8.2B"
    "qwen3-8b": 8.2,
    # huggingface.co/Qwen/Qwen3-30B-A3B model card: "30.5B in total and 3.3B activated"
    "qwen3-30b-a3b": 30.5,
    # huggingface.co/mistralai/Mistral-7B-v0.1: safetensors "7.24B params"
    "mistral-7b-v0.1": 7.24,
    # mistral.ai/news/mixtral-of-experts: "46.7B total parameters but only uses 12.9B per token"
    "mixtral-8x7b-instruct-v0.1": 46.7,
    # DeepSeek-V3 Technical Report (arXiv 2412.19437), abstract: "671B total parameters with 37B
    # activated for each token" (the 14B multi-token-prediction module is not in the 671B)
    "deepseek-v3": 671.0,
    # gpt-oss-120b & gpt-oss-20b Model Card (OpenAI, arXiv 2508.10925), Table 1: total 20.91B
    # and 116.83B, active per token 3.61B and 5.13B; checkpoint 12.8 GiB and 60.8 GiB
    "gpt-oss-20b": 20.91,
    "gpt-oss-120b": 116.83,
    # Gemma 3 Technical Report (arXiv 2503.19786), Table 1: 1B = 302M embedding + 698M
    # non-embedding; 27B = 1,416M embedding + 25,600M non-embedding (+ 417M vision encoder,
    # which the text model does not count)
    "gemma-3-1b-it": 1.0,
    "gemma-3-27b-it": 27.016,
}
# Active per token (the same sources as above): the layers a token computes with plus the output
# head, and (Qwen, Mistral, DeepSeek) the input embedding too; OpenAI's figure counts one
# vocab x hidden matrix, not both.
PUBLISHED_ACTIVE_B = {
    "qwen3-30b-a3b": (3.3, True),
    "mixtral-8x7b-instruct-v0.1": (12.9, True),
    "deepseek-v3": (37.0, True),
    "gpt-oss-20b": (3.61, False),
    "gpt-oss-120b": (5.13, False),
}
# KV-cache bytes per token in bf16 that each config implies: 2 (K, V) x layers x KV heads x
# head_dim x 2 bytes; MLA (DeepSeek-V3): layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2.
# The second figure: the layers without a sliding window alone (what grows past the window).
KV_BYTES = {
    "llama-3.1-8b-instruct": (2 * 32 * 8 * 128 * 2, 131072),
    "llama-3.1-70b-instruct": (2 * 80 * 8 * 128 * 2, 327680),
    "qwen2.5-7b-instruct": (2 * 28 * 4 * 128 * 2, 57344),
    "qwen2.5-32b-instruct": (2 * 64 * 8 * 128 * 2, 262144),
    "qwen3-8b": (2 * 36 * 8 * 128 * 2, 147456),
    "qwen3-30b-a3b": (2 * 48 * 4 * 128 * 2, 98304),
    "mistral-7b-v0.1": (2 * 32 * 8 * 128 * 2, 0),  # every layer has the 4,096-token window
    "mixtral-8x7b-instruct-v0.1": (2 * 32 * 8 * 128 * 2, 131072),
    "deepseek-v3": (61 * (512 + 64) * 2, 61 * (512 + 64) * 2),
    "gpt-oss-20b": (2 * 24 * 8 * 64 * 2, 2 * 12 * 8 * 64 * 2),  # 12 of 24 layers full
    "gpt-oss-120b": (2 * 36 * 8 * 64 * 2, 2 * 18 * 8 * 64 * 2),
    "gemma-3-1b-it": (2 * 26 * 1 * 256 * 2, 2 * 4 * 1 * 256 * 2),  # 4 of 26 layers global
    "gemma-3-27b-it": (2 * 62 * 16 * 128 * 2, 2 * 10 * 16 * 128 * 2),  # 10 of 62 global
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS_B))
def test_parameter_count_matches_the_published_total(name: str) -> None:
    model = model_from_config(CONFIGS / f"{name}.json")
    assert model.params / 1e9 == pytest.approx(PUBLISHED_PARAMS_B[name], rel=0.02)


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE_B))
def test_active_parameters_match_the_published_figure(name: str) -> None:
    m = model_from_config(CONFIGS / f"{name}.json")
    published, with_embedding = PUBLISHED_ACTIVE_B[name]
    matrices = 2 if with_embedding else 1
    active = m.active_layer_params + matrices * m.vocab_size * m.hidden_size
    assert active / 1e9 == pytest.approx(published, rel=0.02)


@pytest.mark.parametrize("name", sorted(KV_BYTES))
def test_kv_bytes_per_token_is_what_the_config_implies(name: str) -> None:
    model = model_from_config(CONFIGS / f"{name}.json")
    every_layer, full_layers = KV_BYTES[name]
    assert model.kv_bytes_per_token == every_layer
    assert model.full_attention_kv_bytes_per_token == full_layers


def test_sliding_window_layers_keep_only_their_window() -> None:
    oss = model_from_config(CONFIGS / "gpt-oss-20b.json")
    assert (oss.sliding_window, oss.num_sliding_layers) == (128, 12)
    sliding_per_token = oss.kv_bytes_per_token - oss.full_attention_kv_bytes_per_token
    assert oss.kv_bytes_for_context(8192) == 24576 * 8192 + sliding_per_token * 128
    assert oss.kv_bytes_for_context(100) == oss.kv_bytes_per_token * 100
    gemma = model_from_config(CONFIGS / "gemma-3-27b-it.json")
    assert (gemma.sliding_window, gemma.num_sliding_layers) == (1024, 52)


def test_data_types_from_the_config() -> None:
    deepseek = model_from_config(CONFIGS / "deepseek-v3.json")
    assert deepseek.layer_bytes == 1.0 and deepseek.fp8_compute  # quant_method fp8
    assert deepseek.bytes_per_param == 2.0  # embedding and head stay bf16
    assert deepseek.is_mla and deepseek.kv_replicated_over_tp
    assert (deepseek.num_dense_layers, deepseek.num_moe_layers) == (3, 58)
    oss = model_from_config(CONFIGS / "gpt-oss-120b.json")
    assert oss.expert_bytes == pytest.approx(4.25 / 8)  # MXFP4: 4 bits + a scale per 32
    # the model card's checkpoint size: 60.8 GiB (MXFP4 experts, bf16 everything else)
    assert oss.weight_bytes / 2**30 == pytest.approx(60.8, rel=0.02)
    assert model_from_config(CONFIGS / "gemma-3-1b-it.json").tie_word_embeddings  # default


def test_mla_kv_cache_is_not_split_over_tensor_parallel_gpus(tmp_path: Path) -> None:
    """vLLM caches DeepSeek's whole latent on every GPU: tp 8 gives no more KV tokens per GPU
    than the memory left after an eighth of the weights allows."""
    settings = SimSettings(gpu="H200", model=str(CONFIGS / "deepseek-v3.json"))
    r = replace(settings, tensor_parallel_size=8).resolved()
    assert r.roofline.kv_bytes_per_token == 61 * 576 * 2  # not divided by 8
    llama = replace(settings, model=str(CONFIGS / "llama-3.1-70b-instruct.json"))
    assert replace(llama, tensor_parallel_size=8).resolved().roofline.kv_bytes_per_token == (
        327680 / 8
    )


def test_model_is_found_as_folder_file_or_cached_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = (CONFIGS / "qwen3-8b.json").read_text()
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(src)
    presets = load_presets()
    assert presets.model(str(folder), "cli", "model").name == "Qwen3-8B"
    assert presets.model(str(folder / "config.json"), "cli", "model").num_layers == 36
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(src)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    cached = presets.model("Qwen/Qwen3-8B", "cli", "model")
    assert (cached.name, cached.params) == (
        "Qwen/Qwen3-8B",
        presets.model(str(folder), "", "").params,
    )
    assert find_config("Qwen/Qwen3-32B") is None  # not in the cache: no network, refused
    with pytest.raises(ConfigError, match="unknown model 'Qwen/Qwen3-32B'.*local Hugging Face"):
        presets.model("Qwen/Qwen3-32B", "cli", "model")


def _bad(tmp_path: Path, change: dict[str, object], drop: str | None = None) -> str:
    doc = json.loads((CONFIGS / "llama-3.1-8b-instruct.json").read_text())
    doc.update(change)
    if drop:
        del doc[drop]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as err:
        model_from_config(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_bad_configs_name_the_file_and_the_key(tmp_path: Path) -> None:
    assert "num_hidden_layers: missing" in _bad(tmp_path, {}, drop="num_hidden_layers")
    assert "hidden_size: expected an integer > 0, got -4096" in _bad(
        tmp_path, {"hidden_size": -4096}
    )
    assert "num_key_value_heads: 5 does not divide the 32 heads" in _bad(
        tmp_path, {"num_key_value_heads": 5}
    )
    assert "torch_dtype: unknown 'int3'; allowed: bfloat16" in _bad(
        tmp_path, {"torch_dtype": "int3"}
    )
    assert "quantization_config.quant_method: unknown 'bitsandbytes'; allowed: fp8" in _bad(
        tmp_path, {"quantization_config": {"quant_method": "bitsandbytes"}}
    )
    assert "layer_types: expected a list of 32" in _bad(
        tmp_path, {"layer_types": ["full_attention"]}
    )
    assert "num_experts_per_tok: 9 is more than num_local_experts 8" in _bad(
        tmp_path, {"num_local_experts": 8, "num_experts_per_tok": 9}
    )
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        model_from_config(tmp_path / "x.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no config.json here"):
        load_presets().model(str(tmp_path / "empty"), "cli", "model")


def test_a_bad_config_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    doc = json.loads((CONFIGS / "llama-3.1-8b-instruct.json").read_text())
    doc["vocab_size"] = "many"
    path.write_text(json.dumps(doc))
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "steady.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "predict", str(scenario), "--model", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "vocab_size" in lines[0] and str(path) in lines[0]
    assert "Traceback" not in proc.stderr
