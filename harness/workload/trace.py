"""Trace replay: a phase's arrival times (and lengths, and prefix blocks) read from a trace file.

`arrival = { process = "trace", file = "...", format = "auto", ... }` in a phase. The file is read
once at load (`harness.workload.trace_formats`, in bounded chunks), only the window is kept, and
the kept rows become a frozen `Trace` whose `times()` the plan calls like any arrival process.

Keys:
- `format`      auto | harness | azure | mooncake | burstgpt | csv (`auto`: the first line decides)
- `columns`     csv only: `{ t = "col", prompt_tokens = "col", output_tokens = "col" }`; the
                length columns may be left out, and those lengths are then drawn from [workload]
- `time_unit`   csv only: s | ms | us | ns | datetime (absolute: offsets from the first row)
- `origin`      "file" (default): trace time is the file's own time, so a first row at 2.5 s
                is sent 2.5 s into the phase; "first_row": trace time counts from the first row
                (an excerpt cut from the middle of a trace, epoch stamps). Absolute date-times
                always count from the first row.
- `start`, `duration`   the window of the trace to replay, in trace time ("10m", "1h")
- `time_scale`  replay offset = (trace time - start) * time_scale: 0.5 replays twice as fast
- `rate_scale`  a *target* mean rate ("20/s"): the window is compressed or stretched by one
                factor so that its mean rate becomes this (gaps keep their proportions, so
                bursts keep their shape). It names the rate to reach because a factor is what
                `time_scale` already is; give one of the two.
- `failed`      burstgpt only: "send" (default: the arrival happened; sent with 1 output
                token) or "skip" for rows with 0 response tokens

The phase's own `duration` ends the replay (arrivals at or after it are dropped) and its
`requests = N` keeps the first N.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.bounded import file_problem
from harness.config.validate import Table
from harness.errors import ConfigError
from harness.workload.limits import limit_text
from harness.workload.trace_formats import (
    CSV_ROLES,
    FORMATS,
    TIME_UNITS,
    TraceChunk,
    TraceSpec,
    detect_format,
    read_chunks,
)

MAX_RELATIVE_START_S = 86_400.0 * 365  # a relative first time beyond a year is an epoch stamp
# time_scale (given, or implied by rate_scale) within a millionfold either way: a day replayed in
# 86 ms or a second stretched over 11 days; beyond, times underflow to one instant or overflow.
MIN_TIME_SCALE, MAX_TIME_SCALE = 1e-6, 1e6


@dataclass(frozen=True, slots=True, eq=False)
class TraceRows:
    """The replayed rows of a trace window, as columns. Offsets are before the phase's cut."""

    offsets_s: np.ndarray  # float64, replay offsets from the phase start
    prompt_tokens: np.ndarray | None  # int64
    output_tokens: np.ndarray | None  # int64
    hash_starts: np.ndarray | None  # int64, n + 1 offsets into hash_ids
    hash_ids: np.ndarray | None  # int64
    log_type: np.ndarray | None  # int64 codes into log_types
    log_types: tuple[str, ...] = ()
    failed: np.ndarray | None = None  # bool: BurstGPT rows with 0 response tokens

    def __len__(self) -> int:
        return len(self.offsets_s)


@dataclass(frozen=True, slots=True)
class Trace:
    """Replay of a trace window. `info` is what the run prints and the result keeps."""

    path: str
    format: str
    time_scale: float  # the factor applied (from time_scale or rate_scale)
    rows: TraceRows = field(compare=False, repr=False)
    info: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)
    detected: bool = False

    def times(
        self, rng: np.random.Generator, duration_s: float | None, count: int | None
    ) -> np.ndarray:
        """The window's offsets, cut by the phase's duration and request count."""
        t = self.rows.offsets_s
        if duration_s is not None:
            t = t[: int(np.searchsorted(t, duration_s, side="left"))]
        return t[:count] if count is not None else t

    def __str__(self) -> str:
        how = " (auto)" if self.detected else ""
        return f"Trace({Path(self.path).name}, {self.format}{how}, {len(self.rows)} requests, x{self.time_scale:g})"


def _spec(t: Table, base_dir: Path) -> TraceSpec:
    raw = t.str("file")
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    problem = file_problem(path)
    if problem is not None:
        t.fail("file", f"cannot read trace {str(path)!r}: {problem}")
    fmt = t.str("format", "auto", choices=FORMATS)
    detected = fmt == "auto"
    if detected:
        fmt = detect_format(path)
    columns: tuple[tuple[str, str], ...] = ()
    unit = "s"
    if fmt == "csv":
        ct = t.table("columns", None)
        if ct is None:
            t.fail(
                "columns",
                'format = "csv" needs columns = { t = "...", prompt_tokens = "...", '
                'output_tokens = "..." } naming the CSV header\'s columns (the lengths are optional)',
            )
        columns = tuple((role, ct.str(role)) for role in CSV_ROLES if role == "t" or ct.has(role))
        ct.finish()
        unit = t.str("time_unit", "s", choices=tuple(TIME_UNITS))
    else:
        for key in ("columns", "time_unit"):
            if t.has(key):
                t.fail(
                    key,
                    f'applies to format = "csv" only; format {fmt!r} has fixed columns and units',
                )
    return TraceSpec(path, fmt, detected, columns, unit)


def _window(t: Table) -> tuple[float, float | None]:
    start = t.duration_s("start", 0.0)
    duration = t.duration_s("duration", None, allow_zero=False)
    return start, duration


def load_trace_rows(
    spec: TraceSpec,
    start_s: float,
    duration_s: float | None,
    skip_failed: bool,
    from_first_row: bool = False,
    max_rows: int | None = None,
) -> tuple[list[TraceChunk], dict[str, int], dict[str, Any]]:
    """The chunks of rows in [start, start + duration), read until the window has passed, with
    facts for `info`: rows read, first and last trace time, whether the file went on past the
    window end. `from_first_row`: trace time counts from the first row, not from the file's zero.
    `max_rows`: stop once the window has kept more rows than this (`facts["over_limit"]`)."""
    end = start_s + duration_s if duration_s is not None else np.inf
    log_types: dict[str, int] = {}
    kept: list[TraceChunk] = []
    facts: dict[str, Any] = {
        "rows_read": 0,
        "first_s": None,
        "last_s": None,
        "past_window": False,
        "failed_skipped": 0,
        "file_first_s": None,
        "over_limit": False,
    }
    kept_rows = 0
    shift = 0.0
    for chunk in read_chunks(spec, log_types):
        facts["rows_read"] += len(chunk)
        if facts["file_first_s"] is None:
            file_first_s = float(chunk.t_s[0])
            facts["file_first_s"] = file_first_s
            shift = file_first_s if from_first_row else 0.0
            facts["first_s"] = float(chunk.t_s[0]) - shift
        if shift:
            chunk = TraceChunk(
                chunk.t_s - shift,
                chunk.prompt_tokens,
                chunk.output_tokens,
                chunk.line,
                chunk.hash_counts,
                chunk.hash_ids,
                chunk.log_type,
            )
        facts["last_s"] = float(chunk.t_s[-1])
        lo = int(np.searchsorted(chunk.t_s, start_s, side="left"))
        hi = int(np.searchsorted(chunk.t_s, end, side="left"))
        if hi > lo:
            part = _slice(chunk, lo, hi)
            if skip_failed and part.output_tokens is not None:
                ok = part.output_tokens > 0
                facts["failed_skipped"] += int((~ok).sum())
                part = _mask(part, ok)
            kept.append(part)
            kept_rows += len(part)
            if max_rows is not None and kept_rows > max_rows:
                facts["over_limit"] = True
                break
        if hi < len(chunk):
            facts["past_window"] = True
            break
    return kept, log_types, facts


def _slice(c: TraceChunk, lo: int, hi: int) -> TraceChunk:
    ids = c.hash_ids
    counts = c.hash_counts
    if counts is not None and ids is not None:
        starts = np.concatenate(([0], np.cumsum(counts)))
        ids = ids[starts[lo] : starts[hi]]
    return TraceChunk(
        c.t_s[lo:hi],
        None if c.prompt_tokens is None else c.prompt_tokens[lo:hi],
        None if c.output_tokens is None else c.output_tokens[lo:hi],
        c.line[lo:hi],
        None if counts is None else counts[lo:hi],
        ids,
        None if c.log_type is None else c.log_type[lo:hi],
    )


def _mask(c: TraceChunk, keep: np.ndarray) -> TraceChunk:
    ids = c.hash_ids
    if c.hash_counts is not None and ids is not None:
        ids = ids[np.repeat(keep, c.hash_counts)]

    def pick(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[keep]

    return TraceChunk(
        c.t_s[keep],
        pick(c.prompt_tokens),
        pick(c.output_tokens),
        c.line[keep],
        pick(c.hash_counts),
        ids,
        pick(c.log_type),
    )


def _join(chunks: list[TraceChunk], name: str) -> np.ndarray | None:
    parts = [getattr(c, name) for c in chunks]
    if not parts or any(p is None for p in parts):
        return None
    return np.concatenate(parts)


def parse_trace(t: Table, base_dir: Path, max_rows: int | None = None) -> Trace:
    """Build a Trace from a phase's `arrival` table (process = "trace"); raises ConfigError.
    `max_rows`: the plan's size limit (harness.workload.size); a window holding more is refused
    as soon as the reader has passed it."""
    spec = _spec(t, base_dir)
    start_s, window_s = _window(t)
    time_scale, target_rate, from_first_row, skip_failed = _replay_options(t, spec)
    where = str(spec.path)
    chunks, log_types, facts = load_trace_rows(
        spec, start_s, window_s, skip_failed, from_first_row, max_rows
    )
    _check_read(t, where, facts, max_rows)
    t_s = _join(chunks, "t_s")
    if t_s is None or len(t_s) == 0:
        _no_rows(t, where, start_s, window_s, facts)
    assert t_s is not None
    n = len(t_s)
    # The window's length: its stated duration if the trace runs past it, else up to its last row.
    span_s = (
        window_s if (window_s is not None and facts["past_window"]) else float(t_s[-1]) - start_s
    )
    mean_rate = n / span_s if span_s > 0 else None
    if target_rate is not None:
        time_scale = _rate_scale(t, where, n, mean_rate, target_rate)
    rows = _rows(chunks, spec.format, (t_s - start_s) * time_scale, log_types)
    del chunks, t_s  # the chunks' columns are copied into rows: free them before planning
    info: dict[str, Any] = {
        "file": where,
        "format": spec.format,
        "format_detected": spec.detected,
        "rows_read": facts["rows_read"],
        "rows_replayed": n,
        "window_start_s": start_s,
        "window_duration_s": window_s,
        "window_mean_rate_per_s": mean_rate,
        "time_scale": time_scale,
        "replay_mean_rate_per_s": None if mean_rate is None else mean_rate / time_scale,
        "lengths_from_trace": [
            k for k in ("prompt_tokens", "output_tokens") if getattr(rows, k) is not None
        ],
        "hash_ids": rows.hash_ids is not None,
    }
    if rows.log_type is not None:
        codes, counts_lt = np.unique(rows.log_type, return_counts=True)
        info["log_types"] = {
            rows.log_types[c]: int(k)
            for c, k in zip(codes.tolist(), counts_lt.tolist(), strict=True)
        }
    if rows.failed is not None or facts["failed_skipped"]:
        info["failed_rows"] = int(rows.failed.sum()) if rows.failed is not None else 0
        info["failed_rows_skipped"] = facts["failed_skipped"]
    return Trace(where, spec.format, time_scale, rows, info, spec.detected)


def _replay_options(t: Table, spec: TraceSpec) -> tuple[float, float | None, bool, bool]:
    """time_scale (or rate_scale's target rate: one of the two), whether times count from the
    first row, and whether burstgpt's failed rows are skipped."""
    has_scale, has_rate = t.has("time_scale"), t.has("rate_scale")
    if has_scale and has_rate:
        t.fail(
            "rate_scale",
            "give time_scale (a factor on the trace's times) or rate_scale (a target mean "
            'rate, e.g. "20/s"), not both',
        )
    time_scale = t.float("time_scale", 1.0, min=MIN_TIME_SCALE, max=MAX_TIME_SCALE)
    target_rate = t.rate_per_s("rate_scale", None)
    origin = t.str("origin", "file", choices=("file", "first_row"))
    failed_mode = t.str("failed", "send", choices=("send", "skip"))
    if t.has("failed") and spec.format != "burstgpt":
        t.fail(
            "failed", 'applies to format = "burstgpt" only (its 0-response-token rows are failures)'
        )
    return time_scale, target_rate, origin == "first_row", failed_mode == "skip"


def _check_read(t: Table, where: str, facts: dict[str, Any], max_rows: int | None) -> None:
    """The reader's facts refused: no requests, a window past the plan's limit, epoch times."""
    if facts["rows_read"] == 0:
        raise ConfigError(where, "", "the trace holds no requests")
    if facts["over_limit"]:
        assert max_rows is not None
        t.fail(
            "file",
            f"the window of {where} holds more than {max_rows:,} rows, each a planned request: "
            f"narrow it with start and duration, or raise the plan's limit ({limit_text(max_rows)})",
        )
    if facts["first_s"] > MAX_RELATIVE_START_S:
        t.fail(
            "origin",
            f"{where}: the first time is {facts['first_s']:.6g} s from zero, which looks like an "
            'absolute (epoch) time; add origin = "first_row" to replay from the first row',
        )


def _no_rows(
    t: Table, where: str, start_s: float, window_s: float | None, facts: dict[str, Any]
) -> None:
    """The window holds no rows: say where the trace's times run."""
    span = f"start = {start_s:g} s" + (
        f", duration = {window_s:g} s" if window_s is not None else ""
    )
    t.fail(
        "start",
        f"the window {span} holds no rows of {where} (its times run from "
        f"{facts['first_s']:g} s to {facts['last_s']:g} s"
        + (f"; {facts['failed_skipped']} failed rows skipped" if facts["failed_skipped"] else "")
        + ")",
    )


def _rate_scale(t: Table, where: str, n: int, mean_rate: float | None, target_rate: float) -> float:
    """rate_scale's time_scale: the window's mean rate over the target rate."""
    if mean_rate is None:
        t.fail(
            "rate_scale",
            f"the window of {where} has no length (all {n} rows at one time), so it has "
            "no mean rate to scale; use time_scale",
        )
    assert mean_rate is not None
    time_scale = mean_rate / target_rate
    if not MIN_TIME_SCALE <= time_scale <= MAX_TIME_SCALE:
        t.fail(
            "rate_scale",
            f"{target_rate:g}/s against the window's mean rate of {mean_rate:.6g}/s is a "
            f"time_scale of {time_scale:.3g}, outside {MIN_TIME_SCALE:g}..{MAX_TIME_SCALE:g}",
        )
    return time_scale


def _rows(
    chunks: list[TraceChunk], fmt: str, offsets: np.ndarray, log_types: dict[str, int]
) -> TraceRows:
    """The window's rows as one table (burstgpt's failed rows replayed asking for one token)."""
    output = _join(chunks, "output_tokens")
    failed = None
    if fmt == "burstgpt" and output is not None:
        failed = output == 0
        output = np.maximum(output, 1)  # a failed request is replayed asking for one token
    counts = _join(chunks, "hash_counts")
    ids = _join(chunks, "hash_ids") if counts is not None and counts.sum() > 0 else None
    return TraceRows(
        offsets,
        _join(chunks, "prompt_tokens"),
        output,
        np.concatenate((np.array([0]), np.cumsum(counts)))
        if counts is not None and ids is not None
        else None,
        ids,
        _join(chunks, "log_type"),
        tuple(sorted(log_types, key=log_types.__getitem__)),
        failed,
    )
