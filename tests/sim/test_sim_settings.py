"""SimSettings validation, vLLM defaults, KV sizing, presets and the CLI flag mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError, UsageError
from harness.sim.cli import build_parser, main, settings_from_args
from harness.sim.presets import GIB, load_presets
from harness.sim.roofline import Roofline
from harness.sim.settings import SimSettings


def _from_flags(argv: list[str]) -> SimSettings:
    return settings_from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("gpu", "seqs", "tokens"),
    [
        ("H200", 1024, 8192),  # >= 70 GiB, not A100: vLLM's large defaults
        ("H100-SXM", 1024, 8192),
        ("A100-80GB", 256, 2048),  # A100 keeps the small defaults even at 80 GiB
        ("A100-40GB", 256, 2048),
        ("L40S", 256, 2048),
    ],
)
def test_vllm_defaults_by_gpu(gpu: str, seqs: int, tokens: int) -> None:
    r = SimSettings(gpu=gpu, model="Qwen2.5-7B-Instruct").resolved()
    assert (r.max_num_seqs, r.max_num_batched_tokens) == (seqs, tokens)


def test_explicit_limits_override_defaults() -> None:
    r = SimSettings(max_num_seqs=7, max_num_batched_tokens=333, num_gpu_blocks=99).resolved()
    assert (r.max_num_seqs, r.max_num_batched_tokens, r.num_gpu_blocks) == (7, 333, 99)


def test_kv_pool_size_for_llama_8b_on_h100() -> None:
    r = SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct").resolved()
    # (80 GiB * 0.99 visible * 0.9 - 14.96 GiB weights - 0.66 GiB activations of 8,192 tokens
    #  - 0.98 GiB sampler of 1,024 rows x 128,256 vocab - 0.13 GiB non-torch)
    #  / (16 tokens * 128 KiB) = 27,933 (memory_profile.py)
    assert r.num_gpu_blocks == 27933
    assert r.max_model_len == 131072
    half = SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct", gpu_memory_utilization=0.5)
    assert half.resolved().num_gpu_blocks < r.num_gpu_blocks


def test_max_model_len_is_capped_by_what_the_cache_holds() -> None:
    r = SimSettings(num_gpu_blocks=100).resolved()
    assert r.max_model_len == 1600


def test_tensor_parallel_fits_a_model_a_single_gpu_cannot() -> None:
    with pytest.raises(ConfigError, match="does not fit"):
        SimSettings(gpu="L4", model="Llama-3.1-8B-Instruct", gpu_memory_utilization=0.5).resolved()
    r = SimSettings(gpu="L4", model="Llama-3.1-8B-Instruct", tensor_parallel_size=2).resolved()
    assert r.num_gpu_blocks > 0
    one = SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct").resolved().roofline
    two = Roofline.build(r.gpu_preset, r.model_preset, 2)
    assert two.decode_step_s(1, 100) < Roofline.build(
        r.gpu_preset, r.model_preset, 1
    ).decode_step_s(1, 100)
    assert one.decode_step_s(1, 100) > 0


def test_no_chunked_prefill_needs_a_budget_of_max_model_len() -> None:
    r = SimSettings(enable_chunked_prefill=False, max_model_len=4096).resolved()
    assert r.max_num_batched_tokens == 8192  # max(max_model_len, default)
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        SimSettings(
            enable_chunked_prefill=False, max_model_len=4096, max_num_batched_tokens=2048
        ).resolved()


def test_model_params_match_the_published_sizes() -> None:
    p = load_presets()
    assert p.models["Llama-3.1-8B-Instruct"].params == pytest.approx(8.03e9, rel=0.01)
    assert p.models["Qwen2.5-7B-Instruct"].params == pytest.approx(7.61e9, rel=0.01)
    assert p.models["Llama-3.1-8B-Instruct"].kv_bytes_per_token == 128 * 1024


# ---- from_mapping: the scenario's [sim] table ---------------------------------------------


def test_from_mapping_accepts_every_field() -> None:
    s = SimSettings.from_mapping(
        {
            "gpu": "H100-SXM",
            "model": "Llama-3.1-8B-Instruct",
            "max_num_seqs": 32,
            "max_num_batched_tokens": 4096,
            "batching": "static",
            "block_size": 32,
            "gpu_memory_utilization": 0.8,
            "num_gpu_blocks": 5000,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": False,
            "speedup": 4,
            "seed": 3,
            "root_path": "/api/",
            "faults": {"http429": 0.1, "stall": 0.05},
            "tensor_parallel_size": 2,
            "max_model_len": 8192,
        },
        "s.toml",
    )
    assert s.max_num_seqs == 32 and s.batching == "static" and s.speedup == 4.0
    assert s.root_path == "/api"
    assert s.faults == {"http429": 0.1, "stall": 0.05}


@pytest.mark.parametrize(
    ("table", "key", "fragment"),
    [
        ({"max_num_seq": 4}, "sim.max_num_seq", "allowed: gpu, model"),  # typo of a key
        ({"batching": "dynamic"}, "sim.batching", "continuous, static"),
        ({"max_num_seqs": 0}, "sim.max_num_seqs", ">= 1"),
        ({"max_num_seqs": 2.5}, "sim.max_num_seqs", "integer"),
        ({"max_num_seqs": True}, "sim.max_num_seqs", "integer"),
        ({"gpu_memory_utilization": 1.5}, "sim.gpu_memory_utilization", "(0, 1]"),
        ({"speedup": 0}, "sim.speedup", "> 0"),
        ({"root_path": "api"}, "sim.root_path", "starting with '/'"),
        ({"faults": {"boom": 0.1}}, "sim.faults", "http429"),
        ({"faults": {"http500": 2}}, "sim.faults", "[0, 1]"),
        ({"faults": {"http500": 0.6, "stall": 0.6}}, "sim.faults", "at most 1"),
        ({"gpu": "B300"}, "sim.gpu", "allowed: A100-40GB"),
        ({"model": "gpt-4"}, "sim.model", "Llama-3.1-8B-Instruct"),
        ({"enable_prefix_caching": "no"}, "sim.enable_prefix_caching", "true or false"),
    ],
)
def test_from_mapping_names_the_key_and_what_is_allowed(
    table: dict[str, object], key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as e:
        SimSettings.from_mapping(table, "scenario.toml")
    assert e.value.where == "scenario.toml"
    assert e.value.key == key
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    "settings",
    [
        SimSettings(),
        SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct", max_num_seqs=32),
        SimSettings(
            batching="static",
            enable_chunked_prefill=False,
            enable_prefix_caching=False,
            speedup=2.5,
            seed=9,
            root_path="/api",
            faults={"disconnect": 0.25, "malformed": 0.125},
            num_gpu_blocks=1234,
            max_model_len=2048,
            block_size=32,
            gpu_memory_utilization=0.85,
            tensor_parallel_size=2,
            max_num_batched_tokens=4096,
        ),
    ],
)
def test_to_argv_round_trips_through_the_cli(settings: SimSettings) -> None:
    assert _from_flags(settings.to_argv()) == settings


def test_preset_file_adds_a_gpu_and_a_model(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(
        '[gpu."MI300X"]\nmemory_gib = 192\nbandwidth_gb_per_s = 5300\nbf16_tflop_per_s = 1307\n'
        '[model."Tiny-1B"]\nnum_layers = 16\nhidden_size = 2048\nnum_heads = 32\n'
        "num_kv_heads = 8\nhead_dim = 64\nintermediate_size = 8192\nvocab_size = 128256\n"
        "max_position_embeddings = 131072\ntie_word_embeddings = true\n"
    )
    s = SimSettings.from_mapping(
        {"gpu": "MI300X", "model": "Tiny-1B", "preset_file": str(f)}, "s.toml"
    )
    r = s.resolved()
    assert r.gpu_preset.memory_bytes == 192 * GIB
    assert r.model_preset.params == pytest.approx(1.24e9, rel=0.02)  # Llama-3.2-1B's size
    assert _from_flags(s.to_argv()) == s


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[gpu."X"]\nmemory_gib = 1\n', "gpu.X.bandwidth_gb_per_s: missing"),
        ('[gpu."X"]\nmemory_gib = -1\nbandwidth_gb_per_s = 1\nbf16_tflop_per_s = 1\n', "> 0"),
        ('[gpu."X"]\nmemroy_gib = 1\n', "gpu.X.memroy_gib: unknown key"),
        ("[cpu]\n", "cpu: unknown table"),
        ("not toml = = =", "not valid TOML"),
    ],
)
def test_bad_preset_files_are_explained(tmp_path: Path, text: str, fragment: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match="bad.toml") as e:
        load_presets(str(f))
    assert fragment in str(e.value)


def test_missing_preset_file() -> None:
    with pytest.raises(ConfigError, match="not found"):
        SimSettings.from_mapping({"preset_file": "/nonexistent/p.toml"}, "s.toml")


# ---- CLI flag errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--batching", "dynamic"], "--batching: expected one of continuous, static"),
        (["--max-num-seqs", "many"], "--max-num-seqs: expected an integer"),
        (["--gpu", "B300"], "--gpu: unknown GPU 'B300'; allowed:"),
        (["--fault", "boom=0.1"], "--fault: unknown fault 'boom'"),
        (["--fault", "http429"], "--fault: expected KIND=RATE"),
        (["--port", "70000"], "--port: expected 0..65535"),
        (["--speedup", "-1"], "--speedup: expected a number > 0"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_cli_flag_errors_are_one_line_and_exit_2(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    assert fragment in err


def test_settings_from_args_raises_usage_error() -> None:
    with pytest.raises(UsageError):
        _from_flags(["--block-size", "0"])
