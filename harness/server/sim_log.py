"""The simulator's own account of a run, read back from its log when it stops: steps run, model
time, how far it fell behind its model and its steps' wake-up lateness
(`harness-sim: ...` lines, written by harness.sim.cli)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_SIM_SUMMARY_RE = re.compile(
    r"harness-sim: (\d+) steps, ([\d.]+) s modelled; fell behind the model by ([\d.]+) s"
    r"(?:.*?steps woke late by p50 ([\d.]+) ms, p99 ([\d.]+) ms)?"
)


def sim_summary(log_path: Path) -> dict[str, Any] | None:
    """The simulator's own account, printed when it stops: steps run, model time, how far it
    fell behind its model (CPU starvation inflates simulated latencies) and its steps' p50 and p99
    wake-up lateness in real ms. None if not found."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _SIM_SUMMARY_RE.findall(text)
    if not found:
        return None
    steps, model_s, lost_s, late_p50, late_p99 = found[-1]
    lag = re.findall(r"harness-sim: lag ns:([ \d:]*)", text)
    return {
        "steps": int(steps),
        "model_s": float(model_s),
        "behind_model_s": float(lost_s),
        "wake_late_p50_ms": float(late_p50 or 0.0),
        "wake_late_p99_ms": float(late_p99 or 0.0),
        # how far its model lagged the wall clock: [perf_counter_ns, lag ns] points, the lag
        # linear between them (harness.sim.engine.lag_points_ns)
        **({"lag_ns": _points(lag[-1])} if lag else {}),
    }


def _points(text: str) -> list[list[int]]:
    out = []
    for item in text.split():
        at, _, lag = item.partition(":")
        out.append([int(at), int(lag or 0)])
    return out
