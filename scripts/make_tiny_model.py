#!/usr/bin/env python3
"""Make a small, random-initialised, Llama-shaped model folder that vLLM can serve, offline.

    python scripts/make_tiny_model.py OUT_DIR                    # the CI default (~3.7 M parameters)
    python scripts/make_tiny_model.py OUT_DIR --size 100m        # ~98 M parameters: batching shows
    python scripts/make_tiny_model.py OUT_DIR --layers 2 --hidden 128 --vocab 1024 --seed 3

Timing does not depend on weight values, so a random model measures a serving engine as well as
a trained one of the same shape (its answers are gibberish; use `ignore_eos` for fixed lengths).
Nothing is downloaded. The folder holds what vLLM and transformers read:

    config.json              LlamaForCausalLM's configuration
    generation_config.json   sampling defaults (none beyond the special tokens)
    model.safetensors        bfloat16 weights: normal(0, 0.02) matrices, unit RMSNorm gains
    tokenizer.json           byte-level BPE trained with `tokenizers` on generated English-like
                             text (the harness's prompt words, so synthesized prompts come out
                             close to their requested token counts), padded to --vocab tokens
    tokenizer_config.json    the chat template and special tokens

Deterministic: the same arguments give byte-identical files (seeded numpy weights written as
safetensors by hand, a single-threaded tokenizer trained on seeded text, sorted JSON keys, and
a fixed modification time on every file), so a cached model is recognisable by its digest.
Needs numpy and tokenizers (both in the vLLM venv made by scripts/install_vllm_cpu.sh, and in
the harness's test extras); no torch, no transformers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

# One tokenizer thread: merge ties are then broken in one fixed order (set before import).
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from harness.workload.prompts import WORDS  # noqa: E402  (numpy only; the vLLM venv has it)

FIXED_MTIME_S = 1767225600  # 2026-01-01T00:00:00Z on every file: same bytes, same stat
INIT_STD = 0.02  # LlamaConfig.initializer_range
TRAINING_TEXT_WORDS = 400_000  # enough text for 8k BPE merges in ~5 s on one core
SPECIAL_TOKENS = ("<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_position: int

    def parameters(self) -> int:
        head_dim = self.hidden // self.heads
        attn = (
            self.hidden * (self.heads * head_dim) * 2 + self.hidden * (self.kv_heads * head_dim) * 2
        )
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden
        return self.layers * per_layer + 2 * self.vocab * self.hidden + self.hidden


SIZES = {
    # CI: serves ~50 s after vLLM starts on 2 cores, a step takes a few ms.
    "ci": Shape(
        layers=4, hidden=256, heads=4, kv_heads=4, intermediate=512, vocab=2048, max_position=4096
    ),
    # ~98 M parameters: a decode step is weight-read-bound enough that batching pays off.
    "100m": Shape(
        layers=12,
        hidden=768,
        heads=12,
        kv_heads=12,
        intermediate=2048,
        vocab=8192,
        max_position=4096,
    ),
}


def training_text(seed: int, n_words: int = TRAINING_TEXT_WORDS) -> list[str]:
    """Seeded sentences of the harness's prompt words, plus capitalised words, digits,
    punctuation and random lower-case strings (so the BPE has enough to merge)."""
    rng = np.random.default_rng(seed)
    words = np.array(WORDS, dtype=object)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lines: list[str] = []
    done = 0
    while done < n_words:
        n = int(rng.integers(5, 40))
        picked = list(words[rng.integers(0, len(words), size=n)])
        for i in range(n):
            r = rng.random()
            if r < 0.08:
                picked[i] = picked[i].capitalize()
            elif r < 0.16:
                k = int(rng.integers(2, 9))
                picked[i] = "".join(letters[rng.integers(0, 26, size=k)])
            elif r < 0.19:
                picked[i] = str(int(rng.integers(0, 10_000)))
        sentence = " ".join(picked)
        lines.append(
            sentence[0].upper() + sentence[1:] + str(rng.choice([".", ".", "?", "!", ","]))
        )
        done += n
    return lines


def build_tokenizer(vocab: int, seed: int) -> str:
    """tokenizer.json text: byte-level BPE with exactly `vocab` tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(seed), trainer=trainer)
    short = vocab - tok.get_vocab_size()
    if short > 0:  # too little text to merge that far: fill with plain (decodable) tokens
        tok.add_tokens([f"w{i:05d}" for i in range(short)])
    if tok.get_vocab_size() != vocab:
        raise SystemExit(
            f"make_tiny_model: tokenizer has {tok.get_vocab_size()} tokens, wanted {vocab}"
        )
    return json.dumps(json.loads(tok.to_str()), sort_keys=True, ensure_ascii=False, indent=1)


def _bf16_bytes(x: np.ndarray) -> bytes:
    """float32 -> bfloat16 (round to nearest even), little-endian bytes."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def weights(shape: Shape, seed: int) -> dict[str, tuple[tuple[int, ...], bytes]]:
    """Tensor name -> (shape, bf16 bytes), in LlamaForCausalLM's naming."""
    rng = np.random.default_rng(seed)
    head_dim = shape.hidden // shape.heads
    h, q, kv, ff = (
        shape.hidden,
        shape.heads * head_dim,
        shape.kv_heads * head_dim,
        shape.intermediate,
    )
    out: dict[str, tuple[tuple[int, ...], bytes]] = {}

    def normal(name: str, dims: tuple[int, ...]) -> None:
        out[name] = (dims, _bf16_bytes(rng.normal(0.0, INIT_STD, size=dims).astype(np.float32)))

    def ones(name: str, n: int) -> None:
        out[name] = ((n,), _bf16_bytes(np.ones(n, np.float32)))

    normal("model.embed_tokens.weight", (shape.vocab, h))
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        normal(p + "self_attn.q_proj.weight", (q, h))
        normal(p + "self_attn.k_proj.weight", (kv, h))
        normal(p + "self_attn.v_proj.weight", (kv, h))
        normal(p + "self_attn.o_proj.weight", (h, q))
        normal(p + "mlp.gate_proj.weight", (ff, h))
        normal(p + "mlp.up_proj.weight", (ff, h))
        normal(p + "mlp.down_proj.weight", (h, ff))
        ones(p + "input_layernorm.weight", h)
        ones(p + "post_attention_layernorm.weight", h)
    ones("model.norm.weight", h)
    normal("lm_head.weight", (shape.vocab, h))
    return out


def safetensors_bytes(tensors: dict[str, tuple[tuple[int, ...], bytes]]) -> bytes:
    """The safetensors format: u64 header length, JSON header (8-byte aligned), raw data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        dims, data = tensors[name]
        header[name] = {
            "dtype": "BF16",
            "shape": list(dims),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(tensors[n][1] for n in sorted(tensors))


def config_json(shape: Shape, bos: int, eos: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.hidden // shape.heads,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_position,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": INIT_STD,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "vocab_size": shape.vocab,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def write_model(out: Path, shape: Shape, seed: int) -> dict[str, str]:
    """Write every file; returns {file name: sha256}."""
    if shape.hidden % shape.heads or shape.heads % shape.kv_heads:
        raise SystemExit(
            f"make_tiny_model: --hidden {shape.hidden} must divide by --heads {shape.heads}, "
            f"and --heads by --kv-heads {shape.kv_heads}"
        )
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(shape.vocab, seed)
    vocab = json.loads(tokenizer)["added_tokens"]
    ids = {t["content"]: t["id"] for t in vocab}
    bos, eos = ids["<s>"], ids["</s>"]
    files: dict[str, bytes] = {
        "config.json": config_json(shape, bos, eos),
        "generation_config.json": {"bos_token_id": bos, "eos_token_id": eos},
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": None,
            "pad_token": "</s>",
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": shape.max_position,
            "chat_template": CHAT_TEMPLATE,
        },
        "special_tokens_map.json": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>"},
    }  # type: ignore[dict-item]
    blobs = {
        name: (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()
        for name, doc in files.items()
    }
    blobs["tokenizer.json"] = (tokenizer + "\n").encode()
    blobs["model.safetensors"] = safetensors_bytes(weights(shape, seed))
    digests = {}
    for name, data in sorted(blobs.items()):
        path = out / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.utime(tmp, (FIXED_MTIME_S, FIXED_MTIME_S))
        tmp.replace(path)
        digests[name] = hashlib.sha256(data).hexdigest()
    return digests


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out_dir", help="folder to write (created; files in it are replaced)")
    p.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="ci",
        help="a preset shape: ci (the default) or 100m; the options below change it",
    )
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--intermediate", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--max-position", type=int, help="longest context (max_position_embeddings)")
    p.add_argument("--seed", type=int, default=0, help="weights and tokenizer text (default 0)")
    a = p.parse_args(argv)
    base = asdict(SIZES[a.size])
    for key in base:
        given = getattr(a, key)
        if given is not None:
            if given < 1:
                p.error(f"--{key.replace('_', '-')}: expected >= 1, got {given}")
            base[key] = given
    if base["vocab"] < 256 + len(SPECIAL_TOKENS):
        p.error(
            f"--vocab: expected at least {256 + len(SPECIAL_TOKENS)} (bytes and special tokens), "
            f"got {base['vocab']}"
        )
    shape = Shape(**base)
    digests = write_model(Path(a.out_dir), shape, a.seed)
    print(
        f"make_tiny_model: {shape.parameters():,} parameters ({shape.layers} layers, hidden {shape.hidden}, "
        f"vocab {shape.vocab}) in {a.out_dir}; model.safetensors sha256 {digests['model.safetensors'][:16]}",
        file=sys.stderr,
    )
    print(a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
