"""Prompt synthesis: text of a requested token length, distinct per request, drawn ahead.

Without a tokenizer, prompts are sequences of common English words, each of which is a single
token (with its leading space) in the BPE vocabularies of Llama 3, Qwen 2.5, GPT-4 and Gemma,
so n words are close to n tokens. Every request draws its own words from its own seed, so
prompts are distinct and prefix caches only hit where a shared `system_prompt_tokens` prefix
asks them to. The result records the server's `usage.prompt_tokens` to show how close the
synthesis came.

With `[workload] tokenizer = "path/to/tokenizer.json"` (a Hugging Face tokenizer file, read
with the optional `tokenizers` package: `pip install 'harness[tokenizer]'`), the word count is
adjusted until the text encodes to exactly the requested number of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

WORDS: tuple[str, ...] = tuple(dict.fromkeys(  # noqa: SIM905 - reads as prose
    ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "his", "an", "be", "are", "were", "which", "this", "or", "had", "not", "but", "have", "one", "their", "all", "they", "has", "been", "who", "more", "when", "would", "there", "can", "she", "its", "first", "also", "after", "new", "other", "what", "two", "some", "time", "only", "into", "out", "about", "years", "up", "her", "we", "him", "most", "over", "many", "year", "such", "made", "state", "then", "these", "them", "may", "later", "during", "could", "under", "so", "city", "between", "where", "well", "used", "him", "both", "three", "while", "part", "school", "through", "people", "any", "before", "world", "each", "like", "same", "name", "since", "high", "century", "game", "found", "known", "very", "back", "life", "group", "being", "season", "south", "north", "film", "family", "united", "number", "around", "war", "against", "still", "west", "way", "team", "club", "area", "east", "another", "several", "because", "including", "day", "public", "early", "made", "long", "second", "work", "house", "early", "left", "government", "began", "four", "five", "every", "little", "large", "small", "old", "great", "good", "own", "place", "right", "down", "home", "water", "land", "light", "music", "party", "story", "point", "world", "power", "under", "end", "market", "country", "field", "order", "case", "light", "line", "book", "room", "house", "money", "point", "tree", "river", "road", "black", "white", "green", "red", "blue", "open", "close", "hand", "head", "side", "body", "face", "voice", "heart", "mind", "word", "idea", "fact", "data", "plan", "model", "test", "value", "rate", "level", "form", "type", "kind", "sort", "price", "cost", "share", "paper", "report", "history", "system", "program", "question", "problem", "answer", "reason", "result", "effect", "change", "moment", "period", "future", "past", "present", "today", "night", "morning", "evening", "week", "month", "hour", "minute"]
))
_WORD_ARRAY = np.array(WORDS, dtype=object)
_EXACT_ROUNDS = 64   # adjustments tried before settling for the closest length


def _words(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return list(_WORD_ARRAY[rng.integers(0, len(WORDS), size=max(n, 1))])


_SMALL = 64                 # up to this many words: the pure-Python generator below
_MASK64 = (1 << 64) - 1


def _small_words(n: int, seed: int) -> list[str]:
    """n words from a 64-bit LCG (Knuth's MMIX constants; high bits taken) whose start is the
    seed mixed by a splitmix64 step. About 1 us for 8 words where a numpy generator costs ~9 us
    to seed: prompts are made on the client's hot path, one per request."""
    x = ((seed + 0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 31
    words, n_words = WORDS, len(WORDS)
    out = []
    append = out.append
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & _MASK64
        append(words[(x >> 32) % n_words])
    return out


def synthesize(n_tokens: int, seed: int) -> str:
    """A prompt of n_tokens words drawn from the request's own seed (deterministic): up to
    `_SMALL` words from `_small_words`, longer prompts from numpy (cheaper there)."""
    if n_tokens <= _SMALL:
        return " ".join(_small_words(max(n_tokens, 1), seed))
    return " ".join(_words(n_tokens, seed))


def prefix_seed(scenario_seed: int) -> int:
    return (scenario_seed * 7919 + 17) & 0x7FFFFFFF


def shared_prefix(n_tokens: int, scenario_seed: int) -> str:
    """The system prompt shared by every request of a scenario (empty for 0 tokens)."""
    if n_tokens <= 0:
        return ""
    return synthesize(n_tokens, seed=prefix_seed(scenario_seed))


def load_tokenizer(path: str) -> Any:
    """A `tokenizers.Tokenizer` from a tokenizer.json. Raises ImportError or an Exception from
    the library for a file it cannot read; the scenario loader turns both into ConfigError."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


@dataclass(frozen=True)
class PromptMaker:
    """Makes prompt text: words alone (about one token each), or exact with a tokenizer."""

    tokenizer_path: str | None = None
    _tok: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.tokenizer_path is not None and self._tok is None:
            object.__setattr__(self, "_tok", load_tokenizer(self.tokenizer_path))

    def count(self, text: str) -> int:
        """Tokens in text: the tokenizer's count (no special tokens), else the word count."""
        if self._tok is None:
            return len(text.split())
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def text(self, n_tokens: int, seed: int) -> str:
        """Text of n_tokens tokens from this seed (deterministic for a given tokenizer).

        With a tokenizer: words are added until the text holds at least n_tokens tokens, the
        encoding is cut at n_tokens and decoded; where decoding and re-encoding do not round-trip
        exactly (merges across the cut), the nearest cut that does is taken."""
        if n_tokens <= 0:
            return ""
        if self._tok is None:
            return synthesize(n_tokens, seed)
        words = _words(n_tokens + 16, seed)
        k = n_tokens
        while self.count(" ".join(words[:k])) < n_tokens:
            words += _words(n_tokens + 16, seed + len(words))
            k = len(words)
        ids = self._tok.encode(" ".join(words[:k]), add_special_tokens=False).ids
        best: tuple[int, str] | None = None
        for cut in sorted(range(max(1, n_tokens - _EXACT_ROUNDS // 2), min(len(ids), n_tokens + _EXACT_ROUNDS // 2) + 1),
                          key=lambda c: abs(c - n_tokens)):
            text = self._tok.decode(ids[:cut])
            miss = abs(self.count(text) - n_tokens)
            if miss == 0:
                return text
            if best is None or miss < best[0]:
                best = (miss, text)
        assert best is not None
        return best[1]


def prompt_seed(plan_seed: int, seq: int) -> int:
    """The seed of request `seq`'s prompt words (distinct per request, fixed per scenario)."""
    return (plan_seed * 1_000_003 + seq * 7_919 + 1) & 0x7FFF_FFFF_FFFF
