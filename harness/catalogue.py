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
    label: str  # short, as table rows and chart legends show it
    unit: str
    lower_is_better: bool
    per_request_limit: bool  # a per-request limit ([slo] ttft = "2s") is meaningful
    note: str = ""  # what the text report adds in brackets: "ITL (per token)"
    # Not every successful request has it (TPOT needs two tokens; TTFT tool a tool call): one
    # without it has no sample, and meets a per-request limit (TTFO: only where it called a
    # tool; harness.record.metrics.exempt_from_limit)
    optional: bool = False
    # Only streams with reasoning or tool calls make it differ from another metric (TTFO is
    # TTFT, itl_answer is ITL otherwise): a view may leave it out where the run had no channels
    channel: bool = False

    @property
    def long_label(self) -> str:
        return f"{self.label} ({self.note})" if self.note else self.label


METRICS: tuple[Metric, ...] = (
    Metric("ttft", "TTFT", "ms", True, True),
    Metric("ttft_from_schedule", "TTFT from schedule", "ms", True, True),
    Metric(
        "ttfo", "TTFO", "ms", True, True, note="first answer token", optional=True, channel=True
    ),
    Metric(
        "ttft_tool",
        "TTFT tool",
        "ms",
        True,
        True,
        note="first tool-call token",
        optional=True,
        channel=True,
    ),
    Metric("itl", "ITL", "ms", True, False, note="per token"),
    Metric("itl_answer", "ITL answer", "ms", True, False, note="per token", channel=True),
    Metric("itl_reasoning", "ITL reasoning", "ms", True, False, note="per token", channel=True),
    Metric("itl_tool", "ITL tool", "ms", True, False, note="per token", channel=True),
    Metric("inter_chunk", "inter-chunk", "ms", True, False),
    Metric("tpot", "TPOT", "ms", True, True, optional=True),
    Metric("e2e", "E2E", "ms", True, True),
    Metric("e2e_from_schedule", "E2E from schedule", "ms", True, True),
    Metric("send_lag", "send lag", "ms", True, False),
)
# Throughput over the measured window (the result's `throughput` block): higher is better.
THROUGHPUT: tuple[Metric, ...] = (
    Metric("output_tokens_per_s", "output tokens/s", "tokens/s", False, False),
    Metric("total_tokens_per_s", "total tokens/s", "tokens/s", False, False),
    Metric("requests_per_s", "requests/s", "requests/s", False, False),
    Metric("goodput_requests_per_s", "goodput requests/s", "requests/s", False, False),
)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS + THROUGHPUT}

METRICS_WITH_PERCENTILES: tuple[str, ...] = tuple(m.name for m in METRICS)
STATS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99", "p999", "max")
PER_REQUEST_SLOS: tuple[str, ...] = tuple(
    m.name for m in METRICS if m.per_request_limit
)  # [slo] ttft = "2s"


def label(name: str) -> str:
    """A metric's short label (the name itself for one not in the catalogue)."""
    m = BY_NAME.get(name)
    return m.label if m else name


def stat_label(name: str, stat: str) -> str:
    """'TTFT p99 (ms)': a latency metric's statistic with its unit."""
    m = BY_NAME[name]
    return f"{m.label} {stat} ({m.unit})"


@dataclass(frozen=True, slots=True)
class SloLimit:
    """`metric_stat <= limit_s`, e.g. ttft p99 <= 2 s; stat None: a per-request limit (goodput)."""

    name: str
    metric: str
    stat: str | None
    limit_s: float


__all__ = [
    "BY_NAME",
    "METRICS",
    "METRICS_WITH_PERCENTILES",
    "PER_REQUEST_SLOS",
    "STATS",
    "THROUGHPUT",
    "Metric",
    "SloLimit",
    "label",
    "stat_label",
]
