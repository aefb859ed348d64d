"""A prediction's figures with their 80 % prediction intervals: the regime of the predicted load
(`harness.sim.validation.intervals.regime_of`, the rule the validation classifies published runs
by), and for each figure the range its published counterpart fell in for 80 % of held-out cases
of that regime (docs/validation.md, "Regimes"). Pure: a result in, lines out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.orchestrate.validation_points import FIGURES, gpu_class
from harness.sim.validation import intervals as iv
from harness.workload.scenario import Scenario

# The figures printed with an interval, in order, with their label and unit
SHOWN = (
    ("output_tokens_per_s", "output tokens/s", ""),
    ("request_throughput_per_s", "requests/s", ""),
    ("ttft_p50_ms", "TTFT p50", " ms"),
    ("tpot_p50_ms", "TPOT p50", " ms"),
    ("itl_p50_ms", "ITL p50", " ms"),
    ("e2e_p50_ms", "E2E p50", " ms"),
)


def _value(result: Mapping[str, Any], figure: str) -> float | None:
    block, metric, stat = FIGURES[figure]
    value = (result.get("summary") or {}).get(block, {}).get(metric)
    if stat:
        value = value.get(stat) if isinstance(value, Mapping) else None
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def result_regime(scn: Scenario, result: Mapping[str, Any]) -> str:
    """The regime of the scenario's first measured phase as the prediction served it."""
    phase = next((p for p in scn.phases if not p.warmup), scn.phases[0])
    arrival = phase.arrival
    users = getattr(arrival, "users", None)
    rate = getattr(arrival, "rate", None)
    # a short run's served rate is noisy (its Poisson draw, its drain): saturation is read
    # from what stays in flight instead, rate x E2E against max_num_seqs
    served = _value(result, "request_throughput_per_s")
    e2e = (result.get("summary") or {}).get("latency_ms", {}).get("e2e", {})
    e2e_ms = e2e.get("mean") if isinstance(e2e, Mapping) else None
    seats = (result.get("prediction") or {}).get("max_num_seqs")
    return iv.regime_of(
        users=None if users is None else int(users),
        rate_per_s=float(rate) if rate is not None else served,
        served_per_s=None,
        e2e_s=None if e2e_ms is None else float(e2e_ms) / 1e3,
        max_num_seqs=None if seats is None else int(seats),
    )


def interval_lines(
    scn: Scenario, result: Mapping[str, Any], table: Mapping[str, Any] | None = None
) -> list[str]:
    """'80% intervals (regime ...)' and one line per figure: the predicted value and where the
    published one lay in 80 % of held-out cases, or why there is no interval."""
    regime = result_regime(scn, result)
    cls = gpu_class(str((result.get("prediction") or {}).get("gpu", "")))
    table = iv.load_intervals() if table is None else table
    lines = [
        f"80% prediction intervals ({regime}; from held-out published runs, docs/validation.md):"
    ]
    for figure, label, unit in SHOWN:
        value = _value(result, figure)
        if value is None:
            continue
        band = iv.interval(regime, figure, cls, table)
        text = (
            band.describe(value)
            if band
            else f"no interval: fewer than {iv.MIN_POINTS} held-out comparisons from two "
            "publishers or more in this regime"
        )
        lines.append(f"  {label} {value:.4g}{unit}: {text}")
    return lines
