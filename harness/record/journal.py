"""The journal: every finished request appended to disk while the run goes.

Format: JSON Lines. The first line is a header (`"t": "header"`) holding everything needed to
rebuild the result offline (scenario, target without key, plan summary, clock anchor). Then one
line per finished request (`"t": "rec"`), interleaved with probe and server-metrics samples
(`"t": "loop_lag"`, `"t": "server_metrics"`), and, when the run ended in order, a last line
`"t": "end"`. A run killed with SIGKILL leaves at most a torn last line, which `read_journal`
drops: the flush interval bounds what can be lost.

Token stamps are delta-encoded (first stamp relative to `intended_ns`, then gaps). Version 2
stores the deltas as base64 of a little-endian int32 array (`"c4"`; `"c8"`: int64 when a delta
exceeds int32, about 2.1 s) and the tokens-per-chunk the same way (`"k4"`/`"k8"`, omitted when
every chunk carried one token), so a reader turns them into numpy arrays with `np.frombuffer`
instead of parsing millions of JSON integers (benchmarks/analysis_bench.py). Version-1 journals
(`"c"`/`"k"` JSON lists) are still read.

A record line also carries the request and response body sizes (`"sb"`, `"rb"`), the token
channels where any event was not an answer (`"ch"`: flat [first event, channel, ...] runs,
harness.record.records.Channel), the usage's reasoning count (`"urt"`), its cached prompt tokens
(`"cpt"`, usage.prompt_tokens_details.cached_tokens), and the usage
counts that were not believed (`"uf"`, harness.record.usage); the reader vets every record's
counts again (`Columns.vetted`), so a journal written before that rule rebuilds safely. The end
line carries each shard's account of its requests (`"accounts"`, harness.analysis.accounting).

Every reader gets vetted records: `read_journal` holds each record against the plan its header
claims and the run's window (harness.record.journal_vet) and sets the impossible ones aside
before returning, so the result, `report`, exports, `Result.to_pandas` and `compare` all see
exactly the same records; `Journal.vetting` says how many were set aside and why.

`read_journal` is columnar: it builds the arrays of `Columns` while reading, without one Python
int per stamp; `Journal.records` materialises Records only when a caller asks for them. The parts live beside
this module: the line codec (journal_codec), the header's checks (journal_header), the writer
(journal_writer), the columnar builder (journal_columns), the Journal object (journal_data) and
the vetting (journal_vet); this module reads a file and re-exports them.

A journal is also a file users hand back (`report X.journal.jsonl`), so `read_journal` trusts
nothing in it: a header missing what the result is built from, or a second, different header
(two journals joined), is a JournalError naming the line and the key; a damaged record or end
line is skipped and counted (`torn_lines`); a line repeated -- the same record (seq, attempt)
again, or an identical event line -- is read once and counted (`duplicate_lines`), so a journal
copied into itself cannot double a run's requests.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from harness.record.journal_codec import (
    JOURNAL_VERSION,
    SMALL_ARRAY,
    _pack,
    _pack_deltas,
    _pack_ints,
    _unpack,
    decode_record,
    encode_record,
)
from harness.record.journal_data import FailedAttempt, Journal
from harness.record.journal_header import JournalError, _end_ok, header_problem
from harness.record.journal_vet import vet_journal
from harness.record.journal_writer import FLUSH_INTERVAL_S, JournalWriter


def _lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from f


def read_journal(path: Path) -> Journal:
    """Read a journal back with its records vetted: the one reader of every result, report,
    export, `Result.to_pandas` and `compare`. `Journal.vetting` counts and names the records
    set aside as impossible (harness.record.journal_vet); they are not among `records` or
    `columns()`. Raises as `read_journal_as_written`."""
    j = read_journal_as_written(path)
    vet_journal(j)  # impossible records set aside here, once, for every reader
    return j


def read_journal_as_written(path: Path) -> Journal:
    """Read a journal back. A torn or damaged record or end line (the tail of a killed run, a
    hand edit) is skipped and counted; a repeated record (seq, attempt) or event line is read
    once and counted. Raises JournalError (a ValueError) when there is no header or a header key
    has the wrong kind (`check_header` asks for all of them), OSError when the file cannot be read.
    The records are as written, unvetted: for tests of the file format, never for a figure."""
    header: dict[str, Any] | None = None
    header_line = 0
    j = Journal(header={})
    add = j._builder.add
    seen: set[tuple[Any, Any]] = set()  # (seq, attempt) of the records read
    seen_events: set[bytes] = set()
    for lineno, line in enumerate(_lines(path), 1):
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError:
            j.torn_lines += 1
            continue
        kind = d.get("t") if isinstance(d, dict) else None
        if kind == "rec":
            key = (d.get("seq"), d.get("a", 0))
            if key in seen and isinstance(key[0], int):
                j.duplicate_lines += 1
                continue
            try:
                add(d)
            except (KeyError, TypeError, ValueError, binascii.Error):  # damaged: skipped, counted
                j.torn_lines += 1
                continue
            seen.add(key)
        elif kind == "header":
            if header is None:
                header, header_line = d, lineno
            elif d != header:
                raise JournalError(
                    f"{path}:{lineno}: a second, different header (the first is line "
                    f"{header_line}): two journals joined? Give each its own file"
                )
            else:
                j.duplicate_lines += 1
        elif kind == "end":
            if _end_ok(d):
                j.end = d
            else:
                j.torn_lines += 1
        elif isinstance(kind, str):
            raw = line.rstrip(b"\r\n")
            if raw in seen_events:
                j.duplicate_lines += 1
                continue
            seen_events.add(raw)
            j.events.setdefault(kind, []).append(d)
    if header is None:
        raise JournalError(f"{path}: not a harness journal (no header line)")
    problem = header_problem(header, complete=False)
    if problem is not None:
        raise JournalError(f"{path}:{header_line}: header: {problem[0]}: {problem[1]}")
    j.header, j.header_line = header, header_line
    return j


def check_header(j: Journal, path: Path) -> None:
    """Raise JournalError unless the journal's header holds everything a result is built from
    (`report JOURNAL` rebuilds one: harness.analysis.result.rebuild_result)."""
    problem = header_problem(j.header)
    if problem is not None:
        raise JournalError(f"{path}:{j.header_line}: header: {problem[0]}: {problem[1]}")


JOURNAL_SUFFIX = ".journal.jsonl"


def journal_path_for(out: Path) -> Path:
    """The journal sits next to the result, sharing its stem: r.json -> r.journal.jsonl."""
    name = out.name
    stem = name[: -len(".json")] if name.endswith(".json") else out.stem
    return out.with_name(stem + JOURNAL_SUFFIX)


def find_journal(result: dict[str, Any], result_path: Path | None) -> Path | None:
    """The journal of a result: the one next to the result file first (a results folder is
    often moved or copied whole, leaving the recorded path stale), else the path the result
    recorded (`files.journal`). None when neither is a file."""
    candidates = [journal_path_for(result_path)] if result_path is not None else []
    recorded = (result.get("files") or {}).get("journal")
    if recorded:
        candidates.append(Path(recorded))
    return next((c for c in candidates if c.is_file()), None)


__all__ = [
    "FLUSH_INTERVAL_S",
    "JOURNAL_SUFFIX",
    "JOURNAL_VERSION",
    "SMALL_ARRAY",
    "FailedAttempt",
    "Journal",
    "JournalError",
    "JournalWriter",
    "_pack",
    "_pack_deltas",
    "_pack_ints",
    "_unpack",
    "check_header",
    "decode_record",
    "encode_record",
    "find_journal",
    "header_problem",
    "journal_path_for",
    "read_journal",
    "read_journal_as_written",
]
