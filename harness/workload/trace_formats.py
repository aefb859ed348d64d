"""Trace files: recognise the format, then read rows in bounded chunks of numpy columns.

Theory of operation
-------------------
A trace is read once, front to back, `CHUNK_ROWS` rows at a time: each chunk becomes a
`TraceChunk` of numpy columns (times in trace seconds, lengths, prefix block ids, metadata),
and the caller (`harness.workload.trace`) keeps only the rows of its window, stopping as soon as
the window has passed (rows are sorted). So a 1 M-row file costs numpy columns, never a Python
object per row, and a window at the front of a huge file reads only that front.

Formats (`arrival.format`):

- harness   JSONL `{"t": s, "prompt_tokens": n, "output_tokens": m}`, optional `"hash_ids"`
- azure     CSV `TIMESTAMP` (absolute, "YYYY-MM-DD HH:MM:SS.fffffff"), `ContextTokens`,
            `GeneratedTokens` (Azure LLM inference traces 2023/2024)
- mooncake  JSONL `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`
- burstgpt  CSV `Timestamp` (s), `Request tokens`, `Response tokens`, `Log Type`; a row with 0
            response tokens is a failed request (BurstGPT's own convention)
- csv       any CSV, with `columns = { t = ..., prompt_tokens = ..., output_tokens = ... }` and
            `time_unit` ("s", "ms", "us", "ns" or "datetime")
- auto      the first line decides (`detect_format`)

Trace time: a relative time is the file's value in seconds (the harness, Mooncake and BurstGPT
times start near 0); an absolute time ("datetime") is seconds since the file's first row.
Every bad row is a ConfigError naming the file and its line; no message quotes a line of the
file, and a value in one is shown as `harness.errors.preview` shows it (a file given as a trace by
mistake, such as a `.env`, may hold a key).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

import numpy as np
import orjson

from harness.config.bounded import bounded_lines
from harness.errors import ConfigError, preview

FORMATS = ("auto", "harness", "azure", "mooncake", "burstgpt", "csv")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "datetime": 1.0}
CHUNK_ROWS = 65_536  # rows per chunk: ~2 MB of columns, small next to any real trace
MAX_TOKENS = 10_000_000  # a length beyond any context window is a broken row, not a request

HARNESS_KEYS = ("t", "prompt_tokens", "output_tokens", "hash_ids")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
BURSTGPT_LOG_TYPE = "Log Type"
CSV_ROLES = ("t", "prompt_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """How to read one trace file: its resolved format and, for `csv`, the column mapping."""

    path: Path
    format: str  # never "auto": the detected one
    detected: bool  # chosen by `auto`
    columns: tuple[tuple[str, str], ...] = ()  # csv: (role, column name)
    time_unit: str = "s"


@dataclass(frozen=True, slots=True, eq=False)
class TraceChunk:
    """Up to CHUNK_ROWS consecutive rows. `line` is each row's line in the file (1-based)."""

    t_s: np.ndarray  # float64 trace time, seconds
    prompt_tokens: np.ndarray | None  # int64; None: the file has no such column
    output_tokens: np.ndarray | None  # int64 (BurstGPT failures carry 0)
    line: np.ndarray  # int64
    hash_counts: np.ndarray | None  # int64 block ids per row (None: no hash_ids at all)
    hash_ids: np.ndarray | None  # int64, the rows' ids end to end
    log_type: np.ndarray | None  # int64 code into the reader's `log_types`

    def __len__(self) -> int:
        return len(self.t_s)


def _fail(path: Path, line: int | None, key: str, message: str) -> ConfigError:
    return ConfigError(str(path), key, message, line=line)


def _first_line(path: Path) -> tuple[int, str]:
    """The first non-blank line and its number; a ConfigError when there is none (or when a
    line is longer than MAX_LINE_BYTES: read with a bound, never whole)."""
    with path.open("rb") as f:
        for n, raw in bounded_lines(f, str(path)):
            line = raw.removeprefix(_BOM if n == 1 else b"").decode("utf-8", errors="replace")
            if line.strip():
                return n, line.strip()
    raise _fail(path, None, "", "the trace holds no requests")


_BOM = b"\xef\xbb\xbf"
_CR_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def _text_lines(f: IO[bytes], path: Path) -> Iterator[str]:
    """A CSV file's lines as text for csv.reader, each read with the MAX_LINE_BYTES bound; a
    lone CR ends a line as in universal-newline text mode."""
    for n, raw in bounded_lines(f, str(path)):
        try:
            text = raw.removeprefix(_BOM if n == 1 else b"").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(
                path,
                n,
                "",
                f"not UTF-8 text (byte {exc.object[exc.start]:#04x}); the file must be UTF-8",
            ) from None
        if "\r" in text.rstrip("\r\n"):
            yield from _CR_LINES.findall(text)
        else:
            yield text


def _missing(wanted: tuple[str, ...], have: set[str]) -> str:
    return ", ".join(k for k in wanted if k not in have)


def _csv_header(line: str) -> list[str]:
    return [c.strip() for c in next(csv.reader(io.StringIO(line)))]


def detect_format(path: Path) -> str:
    """The format of a trace from its first line; ConfigError naming what it saw otherwise."""
    n, line = _first_line(path)
    if line.startswith("{"):
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise _fail(path, n, "", f"not valid JSON ({exc})") from None
        keys = set(row) if isinstance(row, dict) else set()
        harness_keys = ("t", "prompt_tokens", "output_tokens")
        if set(harness_keys) <= keys:
            return "harness"
        if set(MOONCAKE_KEYS) <= keys:
            return "mooncake"
        raise _fail(
            path,
            n,
            "",
            "the first JSON line matches no trace format: it lacks "
            f"{_missing(harness_keys, keys)} for harness (t, prompt_tokens, output_tokens) and "
            f"{_missing(MOONCAKE_KEYS, keys)} for mooncake (timestamp, input_length, "
            "output_length, hash_ids)",
        )
    if line.startswith("["):
        raise _fail(
            path, n, "", "a JSON array is not a trace; use JSON lines (one object per line) or CSV"
        )
    header = set(_csv_header(line))
    if set(AZURE_COLUMNS) <= header:
        return "azure"
    if set(BURSTGPT_COLUMNS) <= header:
        return "burstgpt"
    raise _fail(
        path,
        n,
        "",
        f"the first line (read as a CSV header of {len(header)} column"
        f"{'' if len(header) == 1 else 's'}) matches no trace format; allowed: azure "
        f"({', '.join(AZURE_COLUMNS)}), burstgpt ({', '.join(BURSTGPT_COLUMNS)}), JSON lines "
        '(harness, mooncake), or format = "csv" with columns = { t = ..., prompt_tokens = ..., '
        "output_tokens = ... }",
    )


def read_chunks(spec: TraceSpec, log_types: dict[str, int]) -> Iterator[TraceChunk]:
    """The file's rows in order, CHUNK_ROWS at a time. `log_types` collects BurstGPT's Log Type
    names (name -> code). Raises ConfigError at the first bad row, naming its line."""
    if spec.format in ("harness", "mooncake"):
        yield from _json_chunks(spec)
    else:
        yield from _csv_chunks(spec, log_types)


# --- JSON lines ----------------------------------------------------------------------------------


def _json_chunks(spec: TraceSpec) -> Iterator[TraceChunk]:
    path, mooncake = spec.path, spec.format == "mooncake"
    t_key, p_key, o_key = MOONCAKE_KEYS if mooncake else ("t", "prompt_tokens", "output_tokens")
    unit = 1e-3 if mooncake else 1.0
    checker = _TimeChecker(path, t_key)
    cols = _Columns()
    with path.open("rb") as f:
        for lineno, raw in bounded_lines(f, str(path)):
            if not raw.strip():
                continue
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise _fail(path, lineno, "", f"not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise _fail(path, lineno, "", "expected a JSON object per line")
            if not mooncake:
                for k in row:
                    if k not in HARNESS_KEYS:
                        raise _fail(
                            path, lineno, k, f"unknown key; allowed: {', '.join(HARNESS_KEYS)}"
                        )
            for k in (t_key, p_key, o_key):
                if k not in row:
                    raise _fail(
                        path,
                        lineno,
                        k,
                        f"is missing; a {spec.format} line needs {t_key}, {p_key}, {o_key}",
                    )
            tv = row[t_key]
            if isinstance(tv, bool) or not isinstance(tv, int | float):
                raise _fail(path, lineno, t_key, f"expected a number, got {preview(tv)}")
            cols.t.append(checker.relative(float(tv) * unit, lineno, tv))
            cols.p.append(_length(path, lineno, p_key, row[p_key], 1))
            cols.o.append(_length(path, lineno, o_key, row[o_key], 1))
            cols.line.append(lineno)
            ids = row.get("hash_ids")
            if ids is not None:
                if not isinstance(ids, list):
                    raise _fail(path, lineno, "hash_ids", _HASH_IDS)
                cols.ids.extend(ids)  # the values are checked a chunk at a time (_check_ids)
                cols.counts.append(len(ids))
            else:
                cols.counts.append(0)
            if len(cols.t) >= CHUNK_ROWS:
                yield _check_ids(path, cols.take(hashes=True))
    if cols.t:
        yield _check_ids(path, cols.take(hashes=True))


_HASH_IDS = "expected a list of block ids (integers >= 0)"


def _check_ids(path: Path, chunk: TraceChunk) -> TraceChunk:
    """A chunk whose hash_ids are all integers >= 0, or a ConfigError naming the first bad row."""
    ids, counts = chunk.hash_ids, chunk.hash_counts
    if ids is None or counts is None:
        return chunk
    if ids.dtype.kind in "iu":
        bad = ids < 0
        if not bad.any():
            return chunk
    else:  # not all integers: find the first value that is not one
        bad = np.array([not (type(h) is int and h >= 0) for h in ids.tolist()])  # noqa: E721
    row = int(np.searchsorted(np.cumsum(counts), int(np.argmax(bad)), side="right"))
    raise _fail(path, int(chunk.line[row]), "hash_ids", _HASH_IDS)


# --- CSV ------------------------------------------------------------------------------------------


def _csv_roles(spec: TraceSpec, header: list[str], lineno: int) -> dict[str, int]:
    """Column index per role (t, prompt_tokens, output_tokens, log_type) for this header."""
    if spec.format == "azure":
        wanted = dict(zip(CSV_ROLES, AZURE_COLUMNS, strict=True))
    elif spec.format == "burstgpt":
        wanted = dict(zip(CSV_ROLES, BURSTGPT_COLUMNS, strict=True))
    else:
        wanted = dict(spec.columns)
    missing = [c for c in wanted.values() if c not in header]
    if missing:
        raise _fail(
            spec.path,
            lineno,
            "",
            f"format = {spec.format!r} needs the column(s) "
            f"{', '.join(map(repr, missing))}; the header has {len(header)} column"
            f"{'' if len(header) == 1 else 's'}, none named so (names are case-sensitive)",
        )
    roles = {role: header.index(name) for role, name in wanted.items()}
    if spec.format == "burstgpt" and BURSTGPT_LOG_TYPE in header:
        roles["log_type"] = header.index(BURSTGPT_LOG_TYPE)
    return roles


def _csv_names(spec: TraceSpec, t_name: str) -> dict[str, str]:
    """Each role's column name, as errors name it (azure's and burstgpt's fixed columns)."""
    names = dict(spec.columns) | {"t": t_name}
    if spec.format == "azure":
        names |= dict(zip(CSV_ROLES, AZURE_COLUMNS, strict=True))
    elif spec.format == "burstgpt":
        names |= dict(zip(CSV_ROLES, BURSTGPT_COLUMNS, strict=True))
    return names


def _since(
    path: Path, lineno: int, t_name: str, raw_t: str, t0: datetime | None
) -> tuple[float, datetime]:
    """An absolute (date and time) row's seconds since the first row's, and that first time."""
    try:
        dt = datetime.fromisoformat(raw_t)
    except ValueError:
        raise _fail(
            path,
            lineno,
            t_name,
            f"expected a date and time such as 2023-11-16 18:17:03.9799600, got {preview(raw_t)}",
        ) from None
    if t0 is None:
        t0 = dt
    try:
        return (dt - t0).total_seconds(), t0
    except TypeError:
        raise _fail(
            path, lineno, t_name, f"{preview(raw_t)} mixes times with and without a time zone"
        ) from None


def _csv_chunks(spec: TraceSpec, log_types: dict[str, int]) -> Iterator[TraceChunk]:
    path = spec.path
    absolute = spec.format == "azure" or spec.time_unit == "datetime"
    unit = TIME_UNITS[spec.time_unit] if spec.format == "csv" else 1.0
    t_name = {"azure": AZURE_COLUMNS[0], "burstgpt": BURSTGPT_COLUMNS[0]}.get(
        spec.format, dict(spec.columns).get("t", "t")
    )
    checker = _TimeChecker(path, t_name)
    min_output = 0 if spec.format == "burstgpt" else 1  # BurstGPT: 0 response tokens = failed
    cols = _Columns()
    with path.open("rb") as f:
        reader = csv.reader(_text_lines(f, path))
        header: list[str] | None = None
        roles: dict[str, int] = {}
        t0: datetime | None = None
        names = _csv_names(spec, t_name)
        try:
            for row in reader:
                lineno = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if header is None:
                    header = [c.strip() for c in row]
                    roles = _csv_roles(spec, header, lineno)
                    continue
                if len(row) < len(header):
                    raise _fail(
                        path, lineno, "", f"{len(row)} fields where the header has {len(header)}"
                    )
                raw_t = row[roles["t"]].strip()
                if absolute:
                    t_s, t0 = _since(path, lineno, t_name, raw_t, t0)
                    cols.t.append(checker.absolute(t_s, lineno, raw_t))
                else:
                    cols.t.append(
                        checker.relative(_number(path, lineno, t_name, raw_t) * unit, lineno, raw_t)
                    )
                if "prompt_tokens" in roles:
                    cols.p.append(
                        _length(
                            path, lineno, names["prompt_tokens"], row[roles["prompt_tokens"]], 1
                        )
                    )
                if "output_tokens" in roles:
                    cols.o.append(
                        _length(
                            path,
                            lineno,
                            names["output_tokens"],
                            row[roles["output_tokens"]],
                            min_output,
                        )
                    )
                if "log_type" in roles:
                    cols.log.append(
                        log_types.setdefault(row[roles["log_type"]].strip(), len(log_types))
                    )
                cols.line.append(lineno)
                if len(cols.t) >= CHUNK_ROWS:
                    yield cols.take(
                        hashes=False, has_p="prompt_tokens" in roles, has_o="output_tokens" in roles
                    )
        except csv.Error as exc:
            raise _fail(path, reader.line_num, "", f"not valid CSV ({exc})") from None
        except UnicodeDecodeError as exc:
            raise _fail(
                path,
                None,
                "",
                f"not UTF-8 text (byte {exc.object[exc.start]:#04x}); the file must be UTF-8",
            ) from None
    if header is None:
        raise _fail(path, None, "", "the trace holds no requests")
    if cols.t:
        yield cols.take(
            hashes=False, has_p="prompt_tokens" in roles, has_o="output_tokens" in roles
        )


# --- shared ----------------------------------------------------------------------------------------


class _Columns:
    """Python lists of one chunk's values, turned into numpy columns by `take`."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.t: list[float] = []
        self.p: list[int] = []
        self.o: list[int] = []
        self.line: list[int] = []
        self.counts: list[int] = []
        self.ids: list[object] = []  # as read (checked a chunk at a time by _check_ids)
        self.log: list[int] = []

    def take(self, *, hashes: bool, has_p: bool = True, has_o: bool = True) -> TraceChunk:
        has_ids = bool(self.ids)
        chunk = TraceChunk(
            t_s=np.asarray(self.t, dtype=np.float64),
            prompt_tokens=np.asarray(self.p, dtype=np.int64) if has_p else None,
            output_tokens=np.asarray(self.o, dtype=np.int64) if has_o else None,
            line=np.asarray(self.line, dtype=np.int64),
            hash_counts=np.asarray(self.counts, dtype=np.int64) if hashes else None,
            hash_ids=_id_array(self.ids) if has_ids else None,
            log_type=np.asarray(self.log, dtype=np.int64) if self.log else None,
        )
        self._reset()
        return chunk


def _id_array(ids: list[object]) -> np.ndarray:
    """int64 ids; anything else (floats, strings, bools) as an object array for _check_ids."""
    if all(type(h) is int for h in ids):  # noqa: E721 - bool is an int subclass, and not an id
        try:
            return np.asarray(ids, dtype=np.int64)
        except OverflowError:
            pass
    return np.asarray(ids, dtype=object)


class _TimeChecker:
    """Rejects negative and decreasing times, naming the line."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self.last = -math.inf
        self.last_raw: object = None

    def relative(self, t_s: float, lineno: int, raw: object) -> float:
        if not math.isfinite(t_s) or t_s < 0:
            raise _fail(self.path, lineno, self.key, f"expected a time >= 0, got {preview(raw)}")
        return self.absolute(t_s, lineno, raw)

    def absolute(self, t_s: float, lineno: int, raw: object) -> float:
        if t_s < self.last:
            raise _fail(
                self.path,
                lineno,
                self.key,
                f"times must be sorted; {preview(raw)} comes after {preview(self.last_raw)}",
            )
        self.last, self.last_raw = t_s, raw
        return t_s


def _number(path: Path, lineno: int, key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _fail(path, lineno, key, f"expected a number, got {preview(raw)}") from None
    return value


def _length(path: Path, lineno: int, key: str, raw: object, minimum: int) -> int:
    """A token count: an integer (or an integral number / numeric string) in [minimum, MAX_TOKENS]."""
    if type(raw) is int and minimum <= raw <= MAX_TOKENS:  # noqa: E721 - the common case, fast
        return raw
    value: object = raw
    if isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            try:
                value = float(raw.strip())
            except ValueError:
                value = raw
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_TOKENS:
        raise _fail(path, lineno, key, f"expected an integer >= {minimum}, got {preview(raw)}")
    return value
