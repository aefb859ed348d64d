"""The workload, shown: what was offered and sent over time, and the lengths asked for.

`build_workload_view(c, header, windows, end_ns)` is computed once, in the result builder, from
the records and the plan kept in the journal's header; the text report and the HTML report only
draw it (`result.workload_view`):

- `offered_per_s` / `sent_per_s`: requests per second by intended and by actual send time (a
  request's first attempt), in bins of `bin_s` chosen for the run's length (at most 120 points);
  `sessions_started_per_s` for multi-turn runs (first turns by intended time).
- `prompt_tokens` / `output_tokens`: histograms over shared integer `edges` of the planned
  lengths (every request) and of the server's usage (successful requests).
- `traces`: per trace phase, the trace's own curve (its rows per bin of trace time, from the
  plan, `trace_per_s`) beside what was sent in the same bins of replay time (`sent_per_s`); the
  two differ by `time_scale` in scale, and should not in shape (`shape_correlation`: Pearson's r
  of the trace's and the sent counts per bin).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.record.metrics import Columns, first_attempts
from harness.workload.curves import (
    bin_width_s,
    counts_per_bin,
    length_counts,
    length_edges,
    rate_curve,
)


def _stats(curve: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(curve)) if curve else 0.0, "peak": float(max(curve, default=0.0))}


def _correlation(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson's r of two curves (None when either is flat or has under 3 points)."""
    if len(a) < 3 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def _lengths(planned: np.ndarray, server: np.ndarray) -> dict[str, Any]:
    """Planned and server-counted lengths over shared edges. A server count of 0 means the server
    sent no usage (nothing was counted), so those are left out, and their number is said."""
    counted = server[server > 0]
    edges = length_edges(np.concatenate([planned, counted]))
    return {
        "edges": edges.tolist(),
        "planned": length_counts(planned, edges),
        "server": length_counts(counted, edges),
        "server_not_reported": int(len(server) - len(counted)),
    }


def build_workload_view(
    c: Columns, header: dict[str, Any], windows: list[tuple[int, int]], end_ns: int
) -> dict[str, Any]:
    first = first_attempts(c)
    span_s = max(end_ns / 1e9, 1e-3)
    bin_s = bin_width_s(span_s)
    offered = rate_curve(c.intended[first] / 1e9, bin_s, span_s)
    sent = rate_curve(c.sent[first & (c.sent >= 0)] / 1e9, bin_s, span_s)
    view: dict[str, Any] = {
        "bin_s": bin_s,
        "offered_per_s": offered,
        "sent_per_s": sent,
        "offered_mean_per_s": _stats(offered)["mean"],
        "offered_peak_per_s": _stats(offered)["peak"],
        "sent_peak_per_s": _stats(sent)["peak"],
        "prompt_tokens": _lengths(c.planned_prompt[first], c.prompt_tokens[c.ok & ~c.retried]),
        "output_tokens": _lengths(c.planned_output[first], c.output_tokens[c.ok & ~c.retried]),
    }
    if c.session is not None and c.turn is not None and (c.session >= 0).any():
        starts = first & (c.session >= 0) & (c.turn == 0)
        view["sessions_started_per_s"] = rate_curve(c.intended[starts] / 1e9, bin_s, span_s)
    traces = ((header.get("plan") or {}).get("workload") or {}).get("traces") or {}
    out: dict[str, Any] = {}
    for i, spec in enumerate(header.get("phases") or []):
        curve = (traces.get(spec["name"]) or {}).get("curve")
        if not curve or i >= len(windows):
            continue
        b, counts = float(curve["bin_s"]), curve["requests"]
        start = windows[i][0]
        rows = first & (c.phase == i) & (c.sent >= 0)
        sent_counts = counts_per_bin((c.sent[rows] - start) / 1e9, b, b * len(counts))
        out[spec["name"]] = {
            "bin_s": b,
            "time_scale": b / float(curve["trace_bin_s"]),
            "trace_per_s": [n / float(curve["trace_bin_s"]) for n in counts],
            "planned_per_s": [n / b for n in counts],
            "sent_per_s": (sent_counts / b).tolist(),
            "shape_correlation": _correlation(
                np.asarray(counts, dtype=np.float64), sent_counts.astype(np.float64)
            ),
        }
    if out:
        view["traces"] = out
    return view
