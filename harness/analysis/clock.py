"""Model time: a simulated run at `speedup = K` reported as the model's time, not the wall's.

The built-in simulator's `speedup` runs its model clock K times faster than the wall: a step the
model says takes 130 ms ends 13 ms later, and a client that sends 8 requests a (wall) second
offers the model 0.8 a (model) second. The journal keeps what the client saw (wall-clock
stamps); the result is built in model time by default, by scaling every stamp by K before any
figure is computed (`to_model_time`), so each latency is the model's (x K), each rate per model
second (/ K), and every view reads model time without knowing. The scaling happens once, on the
way from the journal to the result; nothing downstream scales again. The per-request views
(exports, `Result.requests()` / `to_pandas()`, the live Prometheus histograms) read Records,
not the result: they go through `record_to_model_time`, the same `scale_stamps` per stamp, so
every figure they give equals the result's to the nanosecond (issue 45).

What stays wall-clock, because it is the client's health, not the model's: the CPU share and
the client-warning thresholds (send lag and event-loop lag are compared with their limits in
wall time). The result says what was done in its `clock` block:

    clock   {time: "model", speedup: K, wall_duration_s, note}    (absent when K = 1)

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.record.metrics import Columns
from harness.record.records import Record

if TYPE_CHECKING:
    from harness.record.journal import Journal


def sim_speedup(header: dict[str, Any]) -> float:
    """The speedup of the simulator a journal's run measured, or a prediction's virtual clock
    ran (1.0 when none, or a real server): from the server the harness started
    (`target.server.settings.speedup`)."""
    target = header.get("target") or {}
    if target.get("kind") not in ("simulator", "prediction"):
        return 1.0
    settings = (target.get("server") or {}).get("settings") or {}
    k = settings.get("speedup", 1.0)
    return float(k) if isinstance(k, int | float) and not isinstance(k, bool) and k > 0 else 1.0


def scale_stamps(a: np.ndarray, k: float) -> np.ndarray:
    """Stamps (ns) times k, rounded to the ns; the marker of a stamp never taken (-1) kept. The
    one conversion from the wall's stamps to the model's: columns and records both go through
    it, so a figure computed from either agrees to the nanosecond."""
    return np.where(a >= 0, np.round(a.astype(np.float64) * k), a).astype(a.dtype)


def to_model_time(c: Columns, k: float) -> Columns:
    """Columns with every time stamp (intended, sent, end, token stamps) times k; the markers
    of a stamp never taken (-1) kept."""
    if k == 1.0:
        return c
    return dataclasses.replace(
        c,
        intended=scale_stamps(c.intended, k),
        sent=scale_stamps(c.sent, k),
        end=scale_stamps(c.end, k),
        stamps=scale_stamps(c.stamps, k),
    )


def record_to_model_time(r: Record, k: float) -> Record:
    """A Record with every stamp (intended, sent, headers, token events, end) times k, by
    `scale_stamps`: `Columns.of` of the converted records equals `to_model_time` of theirs."""
    if k == 1.0:
        return r
    one = scale_stamps(
        np.array(
            [r.intended_ns, *(-1 if t is None else t for t in (r.sent_ns, r.headers_ns, r.end_ns))],
            dtype=np.int64,
        ),
        k,
    ).tolist()
    return dataclasses.replace(
        r,
        intended_ns=one[0],
        sent_ns=None if r.sent_ns is None else one[1],
        headers_ns=None if r.headers_ns is None else one[2],
        end_ns=None if r.end_ns is None else one[3],
        chunk_ns=tuple(scale_stamps(np.asarray(r.chunk_ns, dtype=np.int64), k).tolist()),
    )


def model_records(j: Journal) -> list[Record]:
    """A journal's Records as every per-request view reads them (exports, the Python API's
    rows, the live metrics): in model time at its run's speedup, by the conversion the
    result's columns get (`model_columns`)."""
    k = sim_speedup(j.header)
    return [record_to_model_time(r, k) for r in j.records] if k != 1.0 else j.records


def model_columns(j: Journal) -> Columns:
    """A journal's columns as every view reads them: in model time at its run's speedup. The
    one way from a journal to figures (the result, compare's recomputation, the page's
    timeline), so that none of them mixes the wall's stamps with the result's model time."""
    return to_model_time(j.columns(), sim_speedup(j.header))


def clock_block(k: float, wall_s: float) -> dict[str, Any] | None:
    """The result's `clock` block (None at real speed)."""
    if k == 1.0:
        return None
    return {
        "time": "model",
        "speedup": k,
        "wall_duration_s": wall_s,
        "note": clock_note(k),
    }


def clock_note(k: float) -> str:
    """The label every table and page of a speeded-up simulated run carries."""
    return (
        f"simulator speedup x{k:g}: times and rates are the model's (measured wall "
        f"time x{k:g}, rates / {k:g})"
    )


def result_clock_note(r: dict[str, Any]) -> str | None:
    """A result's clock label, or None when it was measured at real speed."""
    c = r.get("clock")
    return c.get("note") or clock_note(float(c["speedup"])) if isinstance(c, dict) else None


def model_time_tag(k: float) -> str:
    """The short tag a table's or a chart's title carries: `model time, speedup x10`."""
    return f"model time, speedup x{k:g}"


def tag_titles(sections: list[dict[str, Any]], k: float | None) -> list[dict[str, Any]]:
    """Every page section's title with the model-time tag (k None or 1: unchanged)."""
    if not k or k == 1.0:
        return sections
    return [
        {**sec, "title": f"{sec['title']} ({model_time_tag(k)})"} if sec.get("title") else sec
        for sec in sections
    ]


__all__ = [
    "model_time_tag",
    "tag_titles",
    "clock_block",
    "clock_note",
    "result_clock_note",
    "model_columns",
    "model_records",
    "record_to_model_time",
    "scale_stamps",
    "sim_speedup",
    "to_model_time",
]
