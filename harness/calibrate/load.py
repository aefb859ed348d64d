"""Calibration, step 1: load a measured run (a result with its journal beside it, or a
journal) into a `MeasuredRun`: per request its times, token counts and stamps, and the run's
max_num_seqs and headline figures."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run, reduced to what calibration needs. Times in seconds from run start."""

    name: str
    max_num_seqs: int
    setting_source: str  # where max_num_seqs came from
    intended_s: np.ndarray  # per request (all phases)
    sent_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    measured_phase: np.ndarray  # bool: request belongs to a measured (non-warm-up) phase
    token_s: list[np.ndarray]  # per request, its token stamps
    window_start_s: float  # start of the measured window
    output_tokens_per_s: float
    itl_mean_ms: float
    ttft_mean_ms: float
    ttft_p50_ms: float = math.nan


# ---- loading ----------------------------------------------------------------------------------


def _journal_for(result_path: Path, result: Mapping[str, Any]) -> Path:
    from harness.record.journal import find_journal, journal_path_for

    found = find_journal(dict(result), result_path)
    if found is None:
        raise ConfigError(
            str(result_path),
            "files.journal",
            f"its journal is needed and not found ({journal_path_for(result_path)})",
        )
    return found


def _sweep_setting(path: Path) -> int | None:
    summary = path.with_name("summary.json")
    if not summary.is_file():
        return None
    try:
        doc = json.loads(summary.read_text())
    except (OSError, ValueError):
        return None
    for point in doc.get("points", []):
        for run in point.get("runs", []):
            if run.get("result") in (path.name, path.name.replace(".journal.jsonl", ".json")):
                value = (point.get("setting") or {}).get("max_num_seqs")
                if isinstance(value, int) and value > 0:
                    return value
    return None


_RUNNING_GAUGES = ("llamacpp:requests_processing", "vllm:num_requests_running")


def _max_num_seqs(
    path: Path, header: Mapping[str, Any], events: Mapping[str, Any]
) -> tuple[int, str]:
    from_sweep = _sweep_setting(path)
    if from_sweep is not None:
        return from_sweep, "sweep summary.json"
    sim = (header.get("scenario") or {}).get("sim") or {}
    if isinstance(sim.get("max_num_seqs"), int):
        return int(sim["max_num_seqs"]), "scenario [sim]"
    peak = 0.0
    for sample in events.get("server_metrics", []):
        values = sample.get("values") or {}
        for g in _RUNNING_GAUGES:
            v = values.get(g)
            if isinstance(v, int | float):
                peak = max(peak, float(v))
    if peak >= 1:
        return int(peak), "peak running (server /metrics)"
    raise ConfigError(
        str(path),
        "max_num_seqs",
        "cannot tell the run's max_num_seqs / --parallel: no sweep summary.json beside it, no "
        "[sim] max_num_seqs in its scenario and no running gauge scraped",
    )


def load_run(path: str | Path) -> MeasuredRun:
    """Read a result JSON (with its journal) or a journal. Raises ConfigError."""
    from harness.analysis.result import build_result, load_result
    from harness.record.journal import read_journal

    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "", "file not found")
    if p.name.endswith(".jsonl"):
        journal_path, result = p, None
    else:
        result = load_result(p)
        journal_path = _journal_for(p, result)
    try:
        j = read_journal(journal_path)
    except (OSError, ValueError) as e:
        raise ConfigError(str(journal_path), "", f"not a readable harness journal: {e}") from None
    if result is None:
        result = build_result(j, str(journal_path))
    header = j.header
    measured_ix = {i for i, ph in enumerate(header.get("phases", [])) if not ph.get("warmup")}
    recs = [r for r in j.records if r.ok and r.chunk_ns]
    if not recs:
        raise ConfigError(str(p), "records", "no completed request to calibrate from")
    recs.sort(key=lambda r: r.intended_ns)
    end = j.end or {}
    starts = end.get("phase_starts_ns") or []
    measured_starts = [starts[i] for i in sorted(measured_ix) if i < len(starts)]
    measured = np.array([r.phase in measured_ix for r in recs])
    window_ns = (
        measured_starts[0]
        if measured_starts
        else min((r.intended_ns for r in recs if r.phase in measured_ix), default=0)
    )
    summary = result.get("summary") or {}
    lat = summary.get("latency_ms") or {}
    try:
        tput = float(summary["throughput"]["output_tokens_per_s"])
        itl = float(lat["itl"]["mean"])
        ttft = float(lat["ttft"]["mean"])
        ttft_p50 = float(lat["ttft"].get("p50") if lat["ttft"].get("p50") is not None else math.nan)
    except (KeyError, TypeError, ValueError):
        raise ConfigError(str(p), "summary", "no throughput / ITL / TTFT in the result") from None
    if not itl > 0:
        # every token of every request came in one read: the stamps hold no engine step
        raise ConfigError(
            str(p),
            "summary.latency_ms.itl",
            f"mean {itl:g} ms: the tokens did not arrive one by one (the server's HTTP side "
            "sent each answer at once), so the run shows no engine steps to fit; measure with "
            "a warm server, longer answers or a slower model",
        )
    mns, source = _max_num_seqs(p, header, j.events)
    return MeasuredRun(
        name=p.name,
        max_num_seqs=mns,
        setting_source=source,
        intended_s=np.array([r.intended_ns for r in recs]) / 1e9,
        sent_s=np.array([r.sent_ns for r in recs], dtype=float) / 1e9,
        prompt_tokens=np.array([r.prompt_tokens or r.planned_prompt_tokens for r in recs]),
        output_tokens=np.array([r.output_tokens or r.planned_output_tokens for r in recs]),
        measured_phase=measured,
        token_s=[np.array(r.chunk_ns) / 1e9 for r in recs],
        window_start_s=window_ns / 1e9,
        output_tokens_per_s=tput,
        itl_mean_ms=itl,
        ttft_mean_ms=ttft,
        ttft_p50_ms=ttft_p50,
    )
