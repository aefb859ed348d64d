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

WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(  # noqa: SIM905 - reads as prose
        [
            "the",
            "of",
            "and",
            "to",
            "in",
            "is",
            "was",
            "for",
            "on",
            "that",
            "with",
            "as",
            "by",
            "at",
            "from",
            "his",
            "an",
            "be",
            "are",
            "were",
            "which",
            "this",
            "or",
            "had",
            "not",
            "but",
            "have",
            "one",
            "their",
            "all",
            "they",
            "has",
            "been",
            "who",
            "more",
            "when",
            "would",
            "there",
            "can",
            "she",
            "its",
            "first",
            "also",
            "after",
            "new",
            "other",
            "what",
            "two",
            "some",
            "time",
            "only",
            "into",
            "out",
            "about",
            "years",
            "up",
            "her",
            "we",
            "him",
            "most",
            "over",
            "many",
            "year",
            "such",
            "made",
            "state",
            "then",
            "these",
            "them",
            "may",
            "later",
            "during",
            "could",
            "under",
            "so",
            "city",
            "between",
            "where",
            "well",
            "used",
            "him",
            "both",
            "three",
            "while",
            "part",
            "school",
            "through",
            "people",
            "any",
            "before",
            "world",
            "each",
            "like",
            "same",
            "name",
            "since",
            "high",
            "century",
            "game",
            "found",
            "known",
            "very",
            "back",
            "life",
            "group",
            "being",
            "season",
            "south",
            "north",
            "film",
            "family",
            "united",
            "number",
            "around",
            "war",
            "against",
            "still",
            "west",
            "way",
            "team",
            "club",
            "area",
            "east",
            "another",
            "several",
            "because",
            "including",
            "day",
            "public",
            "early",
            "made",
            "long",
            "second",
            "work",
            "house",
            "early",
            "left",
            "government",
            "began",
            "four",
            "five",
            "every",
            "little",
            "large",
            "small",
            "old",
            "great",
            "good",
            "own",
            "place",
            "right",
            "down",
            "home",
            "water",
            "land",
            "light",
            "music",
            "party",
            "story",
            "point",
            "world",
            "power",
            "under",
            "end",
            "market",
            "country",
            "field",
            "order",
            "case",
            "light",
            "line",
            "book",
            "room",
            "house",
            "money",
            "point",
            "tree",
            "river",
            "road",
            "black",
            "white",
            "green",
            "red",
            "blue",
            "open",
            "close",
            "hand",
            "head",
            "side",
            "body",
            "face",
            "voice",
            "heart",
            "mind",
            "word",
            "idea",
            "fact",
            "data",
            "plan",
            "model",
            "test",
            "value",
            "rate",
            "level",
            "form",
            "type",
            "kind",
            "sort",
            "price",
            "cost",
            "share",
            "paper",
            "report",
            "history",
            "system",
            "program",
            "question",
            "problem",
            "answer",
            "reason",
            "result",
            "effect",
            "change",
            "moment",
            "period",
            "future",
            "past",
            "present",
            "today",
            "night",
            "morning",
            "evening",
            "week",
            "month",
            "hour",
            "minute",
        ]
    )
)
_WORD_ARRAY = np.array(WORDS, dtype=object)
_EXACT_ROUNDS = 64  # adjustments tried before settling for the closest length


def _words(n: int, seed: int, words: np.ndarray = _WORD_ARRAY) -> list[str]:
    rng = np.random.default_rng(seed)
    return list(words[rng.integers(0, len(words), size=max(n, 1))])


_SMALL = 64  # up to this many words: the pure-Python generator below
_MASK64 = (1 << 64) - 1


def _small_words(n: int, seed: int, words: tuple[str, ...] = WORDS) -> list[str]:
    """n words from a 64-bit LCG (Knuth's MMIX constants; high bits taken) whose start is the
    seed mixed by a splitmix64 step. About 1 us for 8 words where a numpy generator costs ~9 us
    to seed: prompts are made on the client's hot path, one per request."""
    x = ((seed + 0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 31
    n_words = len(words)
    out: list[str] = []
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


@dataclass(frozen=True, slots=True)
class ServerVocabulary:
    """What the target's own tokenizer said, asked through its /tokenize once per run
    (harness.client.tokenize): `words` are one token each after a space, `first_words` one token
    at the start of a text too, and `template_tokens` is what the server adds around a request's
    text (chat template, BOS), measured with the run's system prompt."""

    words: tuple[str, ...]
    first_words: tuple[str, ...]
    template_tokens: int

    def digest_bytes(self) -> bytes:
        return "|".join((*self.words, "/", *self.first_words, str(self.template_tokens))).encode()


@dataclass(frozen=True)
class PromptMaker:
    """Makes prompt text: words alone (about one token each), exact with a tokenizer file, or
    exact with the words the server's /tokenize counted as one token each (`vocabulary`)."""

    tokenizer_path: str | None = None
    vocabulary: ServerVocabulary | None = None
    _tok: Any = field(default=None, compare=False, repr=False)
    _array: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.tokenizer_path is not None and self._tok is None:
            object.__setattr__(self, "_tok", load_tokenizer(self.tokenizer_path))
        if self.vocabulary is not None:
            object.__setattr__(self, "_array", np.array(self.vocabulary.words, dtype=object))

    def content_tokens(self, n_tokens: int) -> int:
        """The words a request's own text gets so that the server counts `n_tokens` in all: less
        the server's template tokens when /tokenize measured them (at least 1)."""
        if self.vocabulary is None:
            return n_tokens
        return max(n_tokens - self.vocabulary.template_tokens, 1)

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
        if self.vocabulary is not None:
            return self._vocabulary_text(n_tokens, seed)
        if self._tok is None:
            return synthesize(n_tokens, seed)
        words = _words(n_tokens + 16, seed)
        k = n_tokens
        while self.count(" ".join(words[:k])) < n_tokens:
            words += _words(n_tokens + 16, seed + len(words))
            k = len(words)
        ids = self._tok.encode(" ".join(words[:k]), add_special_tokens=False).ids
        best: tuple[int, str] | None = None
        for cut in sorted(
            range(
                max(1, n_tokens - _EXACT_ROUNDS // 2),
                min(len(ids), n_tokens + _EXACT_ROUNDS // 2) + 1,
            ),
            key=lambda c: abs(c - n_tokens),
        ):
            text = self._tok.decode(ids[:cut])
            miss = abs(self.count(text) - n_tokens)
            if miss == 0:
                return text
            if best is None or miss < best[0]:
                best = (miss, text)
        assert best is not None
        return best[1]

    def _vocabulary_text(self, n_tokens: int, seed: int) -> str:
        """n_tokens words of the server-measured vocabulary, drawn as `synthesize` draws (the
        same text where every word is one token), the first from `first_words`."""
        v = self.vocabulary
        assert v is not None
        words = (
            _small_words(n_tokens, seed, v.words)
            if n_tokens <= _SMALL
            else _words(n_tokens, seed, self._array)
        )
        if words[0] not in v.first_words:
            words[0] = v.first_words[seed % len(v.first_words)]
        return " ".join(words)


def prompt_seed(plan_seed: int, seq: int) -> int:
    """The seed of request `seq`'s prompt words (distinct per request, fixed per scenario)."""
    return (plan_seed * 1_000_003 + seq * 7_919 + 1) & 0x7FFF_FFFF_FFFF
