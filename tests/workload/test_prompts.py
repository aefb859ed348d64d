"""Prompt text: words of about one token each, or exact lengths with a tokenizer.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.workload.plan import build_plan
from harness.workload.prompts import WORDS, PromptMaker
from harness.workload.scenario import load_scenario

tokenizers = pytest.importorskip(
    "tokenizers", reason="the optional tokenizers package is not installed"
)


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory) -> Path:
    """A small BPE tokenizer (vocabulary 120) in which most of our words are several tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()  # as real tokenizer.json files carry
    trainer = trainers.BpeTrainer(
        vocab_size=120,
        special_tokens=["[UNK]"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([" ".join(WORDS)] * 3, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_without_tokenizer_words_are_tokens():
    m = PromptMaker()
    assert m.count(m.text(100, 1)) == 100 and m.text(100, 1) == m.text(100, 1) != m.text(100, 2)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 300])
def test_with_tokenizer_lengths_are_exact(tokenizer_json, n):
    m = PromptMaker(str(tokenizer_json))
    naive = PromptMaker().text(n, 5)
    assert m.count(naive) != n or n == 1  # the words alone would miss the length ...
    for seed in range(5):
        assert m.count(m.text(n, seed)) == n  # ... the tokenizer gets it exact


def test_scenario_tokenizer_key(write_scenario, tokenizer_json, tmp_path):
    text = f"""
name = "t"
[workload]
prompt_tokens = {{ dist = "fixed", value = 50 }}
output_tokens = {{ dist = "fixed", value = 5 }}
system_prompt_tokens = 20
tokenizer = "{tokenizer_json}"
[[phases]]
requests = 3
arrival = {{ process = "constant", rate = 1 }}
"""
    plan = build_plan(load_scenario(write_scenario(text)))
    assert plan.prompts.count(plan.system_prompt) == 20 and plan.system_prompt_tokens == 20
    assert plan.prompts.count(plan.prompt_text(50, 0)) == 50
    assert (
        plan.digest()
        != build_plan(
            load_scenario(write_scenario(text.replace(f'tokenizer = "{tokenizer_json}"\n', "")))
        ).digest()
    )


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("missing.json", "is not a file"), ("bad.json", "is not a tokenizer.json")],
)
def test_scenario_tokenizer_errors(write_scenario, tmp_path, value, fragment):
    (tmp_path / "bad.json").write_text("{}")
    text = f"""
name = "t"
[workload]
prompt_tokens = {{ dist = "fixed", value = 5 }}
output_tokens = {{ dist = "fixed", value = 5 }}
tokenizer = "{value}"
[[phases]]
requests = 1
arrival = {{ process = "constant", rate = 1 }}
"""
    with pytest.raises(ConfigError) as ei:
        load_scenario(write_scenario(text))
    assert ei.value.key == "workload.tokenizer" and fragment in str(ei.value)


@pytest.mark.parametrize("n", [0, 1, 8, 64, 65, 300])
def test_synthesis_is_sized_deterministic_and_distinct_on_both_paths(n):
    from harness.workload.prompts import synthesize

    texts = [synthesize(n, seed) for seed in range(200)]
    assert all(len(t.split()) == max(n, 1) and set(t.split()) <= set(WORDS) for t in texts)
    assert texts == [synthesize(n, seed) for seed in range(200)]
    if n >= 8:
        assert len(set(texts)) == 200
    assert len(set(texts)) > 100  # even one word: most seeds give another word
