"""The metric catalogue: every latency metric the harness measures, defined once.

Each entry says the metric's name (the result JSON key), its label in reports, its unit, which
direction is better, and whether a per-request limit makes sense for it (a request's TTFT can
miss 2 s; a single inter-chunk gap or send lag is not a property of a request). Scenario
validation (`[slo]`), the metrics, the text and HTML reports, compare, capacity and the planner
read these tuples; a new metric is one row here plus its computation in
`harness.record.metrics`.

`SloLimit` lives here too: it is plain data (a metric, a statistic, a limit) that both the
scenario (which declares it) and the metrics (which check it) read, so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Metric:
    """One latency metric. `unit` is what the result stores (`latency_ms` blocks: ms)."""

    name: str
    label: str
    unit: str
    lower_is_better: bool
    per_request_limit: bool   # a per-request limit ([slo] ttft = "2s") is meaningful


METRICS: tuple[Metric, ...] = (
    Metric("ttft", "TTFT", "ms", True, True),
    Metric("ttft_from_schedule", "TTFT from schedule", "ms", True, True),
    Metric("itl", "ITL (per token)", "ms", True, False),
    Metric("inter_chunk", "inter-chunk", "ms", True, False),
    Metric("tpot", "TPOT", "ms", True, True),
    Metric("e2e", "E2E", "ms", True, True),
    Metric("e2e_from_schedule", "E2E from schedule", "ms", True, True),
    Metric("send_lag", "send lag", "ms", True, False),
)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}

METRICS_WITH_PERCENTILES: tuple[str, ...] = tuple(m.name for m in METRICS)
STATS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99", "p999", "max")
PER_REQUEST_SLOS: tuple[str, ...] = ("ttft", "tpot", "e2e", "ttft_from_schedule", "e2e_from_schedule")


def label(name: str) -> str:
    """A metric's report label (the name itself for one not in the catalogue)."""
    m = BY_NAME.get(name)
    return m.label if m else name


@dataclass(frozen=True, slots=True)
class SloLimit:
    """`metric_stat <= limit_s`, e.g. ttft p99 <= 2 s; stat None: a per-request limit (goodput)."""

    name: str
    metric: str
    stat: str | None
    limit_s: float


__all__ = ["BY_NAME", "METRICS", "METRICS_WITH_PERCENTILES", "PER_REQUEST_SLOS", "STATS", "Metric",
           "SloLimit", "label"]
