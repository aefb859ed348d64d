"""Datasets as prompts: real prompt text from ShareGPT JSON, JSON lines or a local Hugging Face dataset.

`[workload] dataset = { format = "sharegpt" | "jsonl" | "hf", file = "...", ... }`

- sharegpt  a JSON list of `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}`:
            the first human turn is the prompt, the turn after it the answer; with `[workload]
            conversation`, the later (human, answer) pairs are a session's later turns
            (`PromptTable.later_turns`).
- jsonl     one object per line with `prompt` (text) or `messages` (`[{role, content}]`), and an
            optional `output_tokens`. A `messages` row ending in an assistant message takes that
            as its answer; the messages before it are sent as one user message (role-less text):
            sessions take their turns from ShareGPT conversations only.
- hf        a Hugging Face dataset saved on disk (`datasets.save_to_disk`), or `.parquet` /
            `.arrow` files, read with the optional `datasets` package (`pip install
            'harness[datasets]'`), offline: nothing is fetched from a hub. Rows are read as
            above (`conversations`, `messages` or `prompt` columns), or through `columns = {
            prompt = "question", answer = "answer" }`; `split` picks a split of a DatasetDict.

Lengths: a prompt's planned length is its token count with `[workload] tokenizer`, else its
word count (exact on the simulator, which counts words; below a real tokenizer's count for most
text). Output lengths are the answers' lengths, as `vllm bench serve` does, unless the
scenario sets `[workload] output_tokens`. Filters (`min_prompt_tokens`, `max_prompt_tokens`,
`min_output_tokens`, `max_output_tokens`) drop rows at load. Which row each request gets is
drawn in the plan (`DatasetSampler`): `order = "random"` (seeded) or `"file"`, `replacement =
false` (each row once per pass through the usable rows; a new shuffled pass after that) or true.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from harness.config.bounded import bounded_lines, file_problem
from harness.config.validate import Table
from harness.errors import ConfigError, preview
from harness.workload.prompts import PromptMaker

DATASET_FORMATS = ("sharegpt", "jsonl", "hf")
HUMAN_ROLES = ("human", "user")
ANSWER_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")
MAX_TOKENS = 10_000_000


@dataclass(frozen=True, slots=True, eq=False)
class PromptTable:
    """The usable rows: prompt text, its planned tokens, the answer's tokens (0: no answer)."""

    texts: tuple[str, ...]
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    # ShareGPT rows: the conversation's later turns, (user text, its tokens, the answer's tokens)
    # per turn, aligned with texts; () where no row has any (multi-turn sessions use them)
    later_turns: tuple[tuple[tuple[str, int, int], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Dataset:
    format: str
    path: str
    order: str  # "random" | "file"
    replacement: bool
    output_from_answers: bool  # False: [workload] output_tokens sets the output lengths
    table: PromptTable = field(compare=False, repr=False)
    info: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)

    def __str__(self) -> str:
        return f"dataset({self.format}, {Path(self.path).name}, {len(self.table.texts)} prompts)"


@dataclass(frozen=True, slots=True, eq=False)
class DatasetPrompts:
    """A phase's prompts from a dataset: request k gets row rows[k] (closed loop: k mod count)."""

    texts: tuple[str, ...]
    rows: np.ndarray  # int64 row per request

    def text(self, k: int, n_tokens: int, seq: int, plan_seed: int, maker: PromptMaker) -> str:
        return self.texts[int(self.rows[k % len(self.rows)])]

    def digest_bytes(self) -> bytes:
        return b"dataset|" + self.rows.tobytes()


class DatasetSampler:
    """Row indices for the run's requests, phase after phase, from one seeded generator."""

    def __init__(self, ds: Dataset, rng: np.random.Generator) -> None:
        self.ds, self.rng = ds, rng
        self.n = len(ds.table.texts)
        self._pass: np.ndarray = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self.passes = 0

    def _new_pass(self) -> None:
        self._pass = (
            self.rng.permutation(self.n) if self.ds.order == "random" else np.arange(self.n)
        ).astype(np.int64)
        self._pos = 0
        self.passes += 1

    def take(self, count: int) -> np.ndarray:
        if self.ds.replacement:
            if self.ds.order == "file":
                out = (np.arange(self._pos, self._pos + count) % self.n).astype(np.int64)
                self._pos += count
                return out
            return self.rng.integers(0, self.n, size=count, dtype=np.int64)
        parts: list[np.ndarray] = []
        left = count
        while left > 0:
            if self._pos >= len(self._pass):
                self._new_pass()
            part = self._pass[self._pos : self._pos + left]
            parts.append(part)
            self._pos += len(part)
            left -= len(part)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# --- rows -> (prompt, answer) -----------------------------------------------------------------------


class RowError(Exception):
    """A row whose shape is wrong (not merely unusable); the loader adds file and row."""


def _text(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI content parts
        return " ".join(
            p.get("text", "")
            for p in value
            if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    raise RowError(f"{what}: expected text, got {type(value).__name__}")


def _sharegpt(conversations: object) -> tuple[str | None, str | None]:
    if not isinstance(conversations, list):
        raise RowError("conversations: expected a list of {from, value} turns")
    prompt: str | None = None
    for turn in conversations:
        if not isinstance(turn, Mapping):
            raise RowError("conversations: expected a list of {from, value} turns")
        who = str(turn.get("from", turn.get("role", ""))).lower()
        value = turn.get("value", turn.get("content"))
        if prompt is None:
            if who in HUMAN_ROLES:
                prompt = _text(value, "value")
        elif who in ANSWER_ROLES:
            return prompt, _text(value, "value")
        else:
            break
    return prompt, None


def outside_bounds(
    bounds: Mapping[str, tuple[int, int]] | None, n_prompt: int, n_out: int, need_answers: bool
) -> str | None:
    """Why a (prompt, answer) of these lengths is outside the dataset's min/max_prompt_tokens and
    min/max_output_tokens (the answer's only where output lengths come from it); None if inside."""
    (p_lo, p_hi), (o_lo, o_hi) = (
        (bounds or {}).get("prompt", (1, MAX_TOKENS)),
        (bounds or {}).get("output", (1, MAX_TOKENS)),
    )
    if not p_lo <= n_prompt <= p_hi:
        return f"prompt outside {p_lo}..{p_hi} tokens"
    if need_answers and not o_lo <= n_out <= o_hi:
        return f"answer outside {o_lo}..{o_hi} tokens"
    return None


def sharegpt_later_turns(
    conversations: list[Any],
    maker: PromptMaker,
    need_answers: bool,
    bounds: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[tuple[str, int, int], ...]:
    """The turns after a ShareGPT conversation's first turn (its first human message and the
    answer to it, if any): (human text, its tokens, the answer's tokens) each, up to the first
    human message without an answer where output lengths come from the answers, the first
    message that is not a human's, or the first turn outside `bounds` (the dataset's
    min/max_prompt_tokens and min/max_output_tokens, which the first turn met)."""
    out: list[tuple[str, int, int]] = []
    msgs = [
        (str(t.get("from", t.get("role", ""))).lower(), t.get("value", t.get("content")))
        for t in conversations
        if isinstance(t, Mapping)
    ]
    first = next((i for i, (who, _) in enumerate(msgs) if who in HUMAN_ROLES), None)
    if first is None:
        return ()
    i = first + 1
    if i < len(msgs) and msgs[i][0] in ANSWER_ROLES:
        i += 1
    while i < len(msgs) and msgs[i][0] in HUMAN_ROLES:
        answered = i + 1 < len(msgs) and msgs[i + 1][0] in ANSWER_ROLES
        try:
            text = _text(msgs[i][1], "value")
            answer = _text(msgs[i + 1][1], "value") if answered else None
        except RowError:
            break
        n_out = maker.count(answer) if answer else 0
        if not text.strip() or (need_answers and n_out <= 0):
            break
        n_prompt = maker.count(text)
        if outside_bounds(bounds, n_prompt, n_out, need_answers):
            break
        out.append((text, n_prompt, n_out))
        i += 2 if answered else 1
    return tuple(out)


def _messages(messages: object) -> tuple[str | None, str | None]:
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise RowError("messages: expected a list of {role, content} objects")
    msgs = list(messages)
    answer = None
    if msgs and str(msgs[-1].get("role", "")).lower() in ANSWER_ROLES:
        answer = _text(msgs[-1].get("content"), "messages[-1].content")
        msgs = msgs[:-1]
    if not any(str(m.get("role", "")).lower() in HUMAN_ROLES for m in msgs):
        return None, answer
    return "\n".join(_text(m.get("content"), "messages.content") for m in msgs), answer


def row_prompt(
    row: Mapping[str, Any], columns: Mapping[str, str]
) -> tuple[str | None, str | None, int | None]:
    """(prompt, answer text, output_tokens) of one row; None where it has none. Raises RowError."""
    if columns:
        prompt = row.get(columns["prompt"])
        answer = row.get(columns["answer"]) if "answer" in columns else None
        return (
            None if prompt is None else _text(prompt, columns["prompt"]),
            None if answer is None else _text(answer, columns["answer"]),
            None,
        )
    if "conversations" in row:
        p, a = _sharegpt(row["conversations"])
        return p, a, None
    out = row.get("output_tokens")
    if out is not None and (
        isinstance(out, bool) or not isinstance(out, int) or not 1 <= out <= MAX_TOKENS
    ):
        raise RowError(f"output_tokens: expected an integer >= 1, got {preview(out)}")
    if "messages" in row:
        p, a = _messages(row["messages"])
        return p, a, out
    if "prompt" in row:
        return _text(row["prompt"], "prompt"), None, out
    raise RowError(
        f"no prompt: expected a `prompt` or `messages` field (or ShareGPT `conversations`); "
        f"the row has {', '.join(sorted(map(str, row))) or 'no fields'}"
    )


# --- readers: (row label, row) ----------------------------------------------------------------------


def _read_sharegpt(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ConfigError(
            str(path), "", f"not valid JSON ({exc})", line=getattr(exc, "lineno", None)
        ) from None
    if not isinstance(doc, list):
        raise ConfigError(
            str(path),
            "",
            'a ShareGPT file is a JSON list of {"conversations": [...]} objects; '
            f"this one is a JSON {type(doc).__name__}",
        )
    for i, row in enumerate(doc):
        yield f"row {i}", row


def _read_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as f:
        for lineno, raw in bounded_lines(f, str(path)):
            if not raw.strip():
                continue
            try:
                yield f"line {lineno}", orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise ConfigError(str(path), "", f"not valid JSON ({exc})", line=lineno) from None


def _read_hf(path: Path, split: str | None, t: Table) -> Iterator[tuple[str, Any]]:
    # Offline before the import: the library must never reach for a hub.
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        t.fail(
            "format", "format = \"hf\" needs the datasets package: pip install 'harness[datasets]'"
        )
    try:
        if path.is_dir():
            ds: Any = datasets.load_from_disk(str(path))
        elif path.suffix == ".parquet":
            ds = datasets.Dataset.from_parquet(str(path))
        elif path.suffix == ".arrow":
            ds = datasets.Dataset.from_file(str(path))
        else:
            t.fail(
                "file",
                f"{str(path)!r}: expected a folder saved by datasets.save_to_disk, or a .parquet or "
                ".arrow file",
            )
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the library raises many types for a bad folder or file
        t.fail(
            "file",
            f"{str(path)!r} is not a dataset the datasets package can read: "
            f"{(str(exc).splitlines() or [type(exc).__name__])[0][:200]}",
        )
    if isinstance(ds, datasets.DatasetDict):
        names = list(ds)
        name = split or ("train" if "train" in names else names[0] if len(names) == 1 else None)
        if name is None or name not in names:
            t.fail(
                "split",
                f"expected one of the dataset's splits {', '.join(map(repr, names))}, got {split!r}",
            )
        ds = ds[name]
    elif split is not None:
        t.fail("split", "the file holds one split; remove `split`")
    for i, row in enumerate(ds):
        yield f"row {i}", row


# --- loading -----------------------------------------------------------------------------------------


def load_rows(
    rows: Iterable[tuple[str, Any]],
    where: str,
    columns: Mapping[str, str],
    maker: PromptMaker,
    need_answers: bool,
    bounds: Mapping[str, tuple[int, int]],
    want_turns: bool = False,
) -> tuple[PromptTable, dict[str, int], int]:
    """The usable rows, how many rows were skipped and why, and how many rows there were.
    `want_turns`: also read ShareGPT conversations' later turns (sessions are configured)."""
    texts: list[str] = []
    p_tok: list[int] = []
    o_tok: list[int] = []
    later: list[tuple[tuple[str, int, int], ...]] = []
    skipped: Counter[str] = Counter()
    total = 0
    for label, row in rows:
        total += 1
        if not isinstance(row, Mapping):
            raise ConfigError(where, "", f"{label}: expected an object, got {type(row).__name__}")
        try:
            prompt, answer, out = row_prompt(row, columns)
        except RowError as exc:
            raise ConfigError(where, "", f"{label}: {exc}") from None
        if prompt is None or not prompt.strip():
            skipped["no prompt text"] += 1
            continue
        n_out = out if out is not None else (maker.count(answer) if answer else 0)
        if need_answers and n_out <= 0:
            skipped["no answer to take an output length from"] += 1
            continue
        n_prompt = maker.count(prompt)
        if why := outside_bounds(bounds, n_prompt, n_out, need_answers):
            skipped[why] += 1
            continue
        texts.append(prompt)
        p_tok.append(n_prompt)
        o_tok.append(n_out)
        conv = row.get("conversations") if want_turns and not columns else None
        later.append(
            sharegpt_later_turns(conv, maker, need_answers, bounds)
            if isinstance(conv, list)
            else ()
        )
    table = PromptTable(
        tuple(texts),
        np.asarray(p_tok, dtype=np.int64),
        np.asarray(o_tok, dtype=np.int64),
        tuple(later) if any(later) else (),
    )
    return table, dict(skipped), total


def _bounds(t: Table, what: str) -> tuple[int, int]:
    lo = t.int(f"min_{what}_tokens", 1, min=1, max=MAX_TOKENS)
    hi = t.int(f"max_{what}_tokens", MAX_TOKENS, min=1, max=MAX_TOKENS)
    if lo > hi:
        t.fail(f"min_{what}_tokens", f"min ({lo}) must be <= max_{what}_tokens ({hi})")
    return lo, hi


def parse_dataset(
    t: Table,
    base_dir: Path,
    maker: PromptMaker,
    output_from_answers: bool,
    want_turns: bool = False,
) -> Dataset:
    """Load `[workload] dataset`; raises ConfigError (file, row or line, what is allowed).
    `want_turns`: keep ShareGPT conversations' later turns (for `[workload] conversation`)."""
    fmt = t.str("format", choices=DATASET_FORMATS)
    raw = t.str("file")
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    problem = file_problem(path)
    if problem is not None and not (fmt == "hf" and problem == "it is a folder"):
        t.fail("file", f"cannot read dataset {str(path)!r}: {problem}")
    order = t.str("order", "random", choices=("random", "file"))
    replacement = t.bool("replacement", False)
    bounds = {"prompt": _bounds(t, "prompt"), "output": _bounds(t, "output")}
    if not output_from_answers and (t.has("min_output_tokens") or t.has("max_output_tokens")):
        t.fail(
            "min_output_tokens" if t.has("min_output_tokens") else "max_output_tokens",
            "filters the answers' lengths, but [workload] output_tokens sets the output lengths; remove one",
        )
    columns: dict[str, str] = {}
    split = None
    if fmt == "hf":
        split = t.str("split", None)
        ct = t.table("columns", None)
        if ct is not None:
            columns = {"prompt": ct.str("prompt")}
            if ct.has("answer"):
                columns["answer"] = ct.str("answer")
            ct.finish()
    rows: Iterable[tuple[str, Any]]
    if fmt == "sharegpt":
        rows = _read_sharegpt(path)
    elif fmt == "jsonl":
        rows = _read_jsonl(path)
    else:
        rows = _read_hf(path, split, t)
    t.finish()
    if columns and output_from_answers and "answer" not in columns:
        t.fail(
            "columns",
            'names no `answer` column to take output lengths from; add answer = "..." or set '
            "[workload] output_tokens",
        )
    where = str(path)
    table, skipped, total = load_rows(
        rows, where, columns, maker, output_from_answers, bounds, want_turns
    )
    if not table.texts:
        why = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "the file holds no rows"
        hint = (
            " (set [workload] output_tokens to send prompts without answers)"
            if "no answer to take an output length from" in skipped
            else ""
        )
        raise ConfigError(where, "", f"no usable prompt among {total} rows ({why}){hint}")
    info = {
        "format": fmt,
        "file": where,
        "rows": total,
        "usable_rows": len(table.texts),
        "skipped_rows": skipped,
        "order": order,
        "replacement": replacement,
        "output_tokens_from": "answers" if output_from_answers else "[workload] output_tokens",
        "prompt_tokens_counted_by": "tokenizer" if maker.tokenizer_path else "words",
    }
    return Dataset(fmt, where, order, replacement, output_from_answers, table, info)
