"""Model time: a simulated run at `speedup = K` reported as the model's time, not the wall's.

The built-in simulator's `speedup` runs its model clock K times faster than the wall: a step the
model says takes 130 ms ends 13 ms later, and a client that sends 8 requests a (wall) second
offers the model 0.8 a (model) second. The journal keeps what the client saw (wall-clock
stamps); the result is built in model time by default, by scaling every stamp by K before any
figure is computed (`to_model_time`), so each latency is the model's (x K), each rate per model
second (/ K), and every view reads model time without knowing. The scaling happens once, on the
way from the journal to the result; nothing downstream scales again.

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


def to_model_time(c: Columns, k: float) -> Columns:
    """Columns with every time stamp (intended, sent, end, token stamps) times k; the markers
    of a stamp never taken (-1) kept."""
    if k == 1.0:
        return c

    def scale(a: np.ndarray) -> np.ndarray:
        return np.where(a >= 0, np.round(a.astype(np.float64) * k), a).astype(a.dtype)

    return dataclasses.replace(
        c,
        intended=scale(c.intended),
        sent=scale(c.sent),
        end=scale(c.end),
        stamps=scale(c.stamps),
    )


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
    "sim_speedup",
    "to_model_time",
]
