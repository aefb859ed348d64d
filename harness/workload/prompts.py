"""Prompt synthesis without a tokenizer.

Prompts are sequences of common English words, each of which is a single token (with its
leading space) in the BPE vocabularies of Llama 3, Qwen 2.5, GPT-4 and Gemma, so n words are
close to n tokens. Every request draws its own words from its own seed, so prompts are
distinct and prefix caches only hit where a shared `system_prompt_tokens` prefix asks them to.
The result records the server's `usage.prompt_tokens` to show how close the synthesis came.
"""

from __future__ import annotations

import numpy as np

WORDS: tuple[str, ...] = tuple(dict.fromkeys(  # noqa: SIM905 - reads as prose
    ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "his", "an", "be", "are", "were", "which", "this", "or", "had", "not", "but", "have", "one", "their", "all", "they", "has", "been", "who", "more", "when", "would", "there", "can", "she", "its", "first", "also", "after", "new", "other", "what", "two", "some", "time", "only", "into", "out", "about", "years", "up", "her", "we", "him", "most", "over", "many", "year", "such", "made", "state", "then", "these", "them", "may", "later", "during", "could", "under", "so", "city", "between", "where", "well", "used", "him", "both", "three", "while", "part", "school", "through", "people", "any", "before", "world", "each", "like", "same", "name", "since", "high", "century", "game", "found", "known", "very", "back", "life", "group", "being", "season", "south", "north", "film", "family", "united", "number", "around", "war", "against", "still", "west", "way", "team", "club", "area", "east", "another", "several", "because", "including", "day", "public", "early", "made", "long", "second", "work", "house", "early", "left", "government", "began", "four", "five", "every", "little", "large", "small", "old", "great", "good", "own", "place", "right", "down", "home", "water", "land", "light", "music", "party", "story", "point", "world", "power", "under", "end", "market", "country", "field", "order", "case", "light", "line", "book", "room", "house", "money", "point", "tree", "river", "road", "black", "white", "green", "red", "blue", "open", "close", "hand", "head", "side", "body", "face", "voice", "heart", "mind", "word", "idea", "fact", "data", "plan", "model", "test", "value", "rate", "level", "form", "type", "kind", "sort", "price", "cost", "share", "paper", "report", "history", "system", "program", "question", "problem", "answer", "reason", "result", "effect", "change", "moment", "period", "future", "past", "present", "today", "night", "morning", "evening", "week", "month", "hour", "minute"]
))
_WORD_ARRAY = np.array(WORDS, dtype=object)


def synthesize(n_tokens: int, seed: int) -> str:
    """A prompt of n_tokens words drawn from the request's own seed (deterministic)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(WORDS), size=max(n_tokens, 1))
    return " ".join(_WORD_ARRAY[idx])


def shared_prefix(n_tokens: int, scenario_seed: int) -> str:
    """The system prompt shared by every request of a scenario (empty for 0 tokens)."""
    if n_tokens <= 0:
        return ""
    return synthesize(n_tokens, seed=(scenario_seed * 7919 + 17) & 0x7FFFFFFF)
