"""A sweep a signal stopped between its runs (a server starting or stopping, a summary being
written): its summary.json says so, `stop_reason` and not `finished`, so the report shows what
finished and `sweep --resume` redoes only the rest. A signal during a run is recorded by the
sweep itself (harness.orchestrate.sweep.run_sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harness.orchestrate.sweep import _write_summary


def mark_interrupted(out_dir: Path, reason: str) -> dict[str, Any] | None:
    """The sweep's summary with `reason` as its stop reason, written back; None when the
    sweep stopped before it wrote one."""
    path = out_dir / "summary.json"
    if not path.is_file():
        return None
    summary: dict[str, Any] = orjson.loads(path.read_bytes())
    summary["sweep"]["finished"] = False
    summary["sweep"]["stop_reason"] = summary["sweep"].get("stop_reason") or reason
    _write_summary(out_dir, summary)
    return summary


__all__ = ["mark_interrupted"]
