"""scripts/make_tiny_model.py: same arguments, byte-identical files; shapes as asked; no network."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "make_tiny_model.py"
SMALL = [
    "--layers",
    "2",
    "--hidden",
    "64",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--intermediate",
    "96",
    "--vocab",
    "600",
]


def make(out: Path, *extra: str) -> None:
    pytest.importorskip("tokenizers")
    subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *extra],
        check=True,
        capture_output=True,
        timeout=120,
    )


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_same_arguments_give_byte_identical_files(tmp_path):
    make(tmp_path / "a", *SMALL)
    make(tmp_path / "b", *SMALL)
    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    assert set(a) == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    assert a == b
    # the same modification time on every file too
    assert {p.stat().st_mtime for p in (tmp_path / "a").iterdir()} == {1767225600.0}
    make(tmp_path / "c", *SMALL, "--seed", "1")  # another seed: other weights
    assert files(tmp_path / "c")["model.safetensors"] != a["model.safetensors"]


def test_shapes_config_and_tokenizer(tmp_path):
    make(tmp_path / "m", *SMALL)
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 2
    assert cfg["hidden_size"] == 64 and cfg["vocab_size"] == 600 and cfg["num_key_value_heads"] == 2
    raw = (tmp_path / "m" / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    assert header["model.embed_tokens.weight"] == {
        "dtype": "BF16",
        "shape": [600, 64],
        "data_offsets": header["model.embed_tokens.weight"]["data_offsets"],
    }
    assert header["model.layers.1.self_attn.k_proj.weight"]["shape"] == [32, 64]  # 2 kv heads x 16
    params = sum(
        int.__mul__(*v["shape"]) if len(v["shape"]) == 2 else v["shape"][0]
        for k, v in header.items()
        if k != "__metadata__"
    )
    assert len(raw) == 8 + n + 2 * params  # bf16: two bytes a parameter
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json"))
    assert tok.get_vocab_size() == 600
    tcfg = json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())
    assert "add_generation_prompt" in tcfg["chat_template"] and tcfg["eos_token"] == "</s>"


def test_the_ci_default_tokenizes_the_prompt_words_whole(tmp_path):
    """The CI default (2,048 tokens): the harness's prompt words, after a space, are one token
    each, so synthesized prompts come out close to their requested lengths."""
    make(tmp_path / "m")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json"))
    assert tok.get_vocab_size() == 2048
    assert len(tok.encode(" the world of music history").ids) == 5


def test_bad_arguments_exit_2(tmp_path):
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "x"), "--vocab", "100"], capture_output=True
    )
    assert r.returncode == 2 and b"--vocab" in r.stderr
