"""`run --brief`: a result as one compact block (about 25 lines) with the figures
`vllm bench serve` prints, so the two can be read side by side.

Pure: result in, text out. The figures are the result's own (`summary`: the measured phases,
warm-ups left out): completed and failed requests, the request rate and concurrency cap of a
one-phase scenario, the measured window, token totals, request / goodput / token throughput,
then mean, median and the chosen percentiles of each chosen metric (vLLM's
`--percentile-metrics` names: ttft, tpot, itl, e2el; default ttft,tpot,itl and 99, as vLLM's).
A percentile is read from the result's exact per-metric statistics, so only those the result
keeps can be asked for (`BRIEF_PERCENTILES`); the full report (`run` without --brief,
`report R.json`) has the rest. Where the run streamed reasoning, TTFO (first answer token)
follows TTFT. The block always ends with every SLO verdict and every health warning that
fired, one line each (or a line saying there is none), so `--brief` hides no verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.analysis.scale_out import scale_out_line
from harness.analysis.slo_verdict import slo_lines
from harness.config.vllm_flags import (
    VLLM_DEFAULT_METRICS,
    VLLM_DEFAULT_PERCENTILES,
    percentile_key,
)
from harness.errors import UsageError

# percentile -> the result's statistic (summary.latency_ms.<metric>.<stat>)
BRIEF_PERCENTILES: dict[float, str] = {
    50.0: "p50",
    90.0: "p90",
    95.0: "p95",
    99.0: "p99",
    99.9: "p999",
    100.0: "max",
}
# vLLM's metric name -> (the result's metric, the heading)
BRIEF_METRICS: dict[str, tuple[str, str]] = {
    "ttft": ("ttft", "time to first token (ms)"),
    "tpot": ("tpot", "time per output token, first excluded (ms)"),
    "itl": ("itl", "inter-token latency (ms)"),
    "e2el": ("e2e", "end-to-end latency (ms)"),
}
TTFO_SECTION = ("ttfo", "time to first output token, TTFO (ms)")  # where the run reasoned
LABEL_WIDTH = 34  # the widest label, "output token throughput (tok/s)", and room


def check_brief_percentiles(percentiles: Sequence[float]) -> None:
    """Raise UsageError for a percentile the result does not keep."""
    missing = [p for p in percentiles if p not in BRIEF_PERCENTILES]
    if missing:
        kept = ", ".join(percentile_key(p) for p in BRIEF_PERCENTILES)
        raise UsageError(
            f"--metric-percentiles: {', '.join(percentile_key(p) for p in missing)} is not kept "
            f"in a result (kept: {kept}); for any other, --save-result computes it from the "
            "journal"
        )


def _number(value: float | int | None, decimals: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer() and decimals == 0:
        return f"{int(value):,}"
    return f"{value:,.{decimals}f}"


def _line(label: str, value: str) -> str:
    return f"{label:<{LABEL_WIDTH}}{value:>12}"


def _arrival(result: Mapping[str, Any]) -> tuple[Any, Any]:
    """(request rate, concurrency cap) of a one-measured-phase scenario, else (None, None)."""
    from harness.analysis.export import scenario_arrival

    rate, _burst, conc = scenario_arrival(result.get("scenario") or {})
    return rate, conc


def render_brief(
    result: Mapping[str, Any],
    metrics: Sequence[str] | None = None,
    percentiles: Sequence[float] | None = None,
) -> str:
    """The compact block. `metrics`: vLLM's names (default ttft, tpot, itl); `percentiles`:
    among BRIEF_PERCENTILES (default 99)."""
    metrics = tuple(metrics or VLLM_DEFAULT_METRICS)
    percentiles = tuple(percentiles or VLLM_DEFAULT_PERCENTILES)
    check_brief_percentiles(percentiles)
    s = result.get("summary") or {}
    req = s.get("requests") or {}
    thr = s.get("throughput") or {}
    tok = s.get("tokens") or {}
    lat = s.get("latency_ms") or {}
    target = result.get("target") or {}
    rate, conc = _arrival(result)
    title = f" {result.get('scenario_name') or 'run'}: the figures vllm bench serve prints "
    lines = [f"{title:=^{LABEL_WIDTH + 12}}"]
    kind = "simulated server" if target.get("kind") == "simulator" else "target"
    lines.append(f"{kind}: {target.get('base_url')} (model {target.get('model')})")
    scaled = scale_out_line(result)  # what ran it: workers, how chosen, each one's share
    if scaled:
        lines.append(scaled)
    lines.append(_line("successful requests", _number(req.get("completed"), 0)))
    lines.append(_line("failed requests", _number(req.get("failed"), 0)))
    if conc is not None:
        lines.append(_line("maximum request concurrency", _number(conc, 0)))
    if rate is not None:
        lines.append(
            _line("request rate (req/s)", "inf" if rate == "inf" else _number(float(rate)))
        )
    lines.append(_line("duration, measured window (s)", _number(thr.get("window_s"))))
    lines.append(_line("total input tokens", _number(tok.get("prompt_total"), 0)))
    lines.append(_line("total generated tokens", _number(tok.get("output_total"), 0)))
    lines.append(_line("request throughput (req/s)", _number(thr.get("requests_per_s"))))
    per_request_slos = [x for x in s.get("slo") or [] if x.get("kind") == "per_request"]
    if per_request_slos:  # goodput means something only against per-request limits
        lines.append(_line("request goodput (req/s)", _number(thr.get("goodput_requests_per_s"))))
    lines.append(_line("output token throughput (tok/s)", _number(thr.get("output_tokens_per_s"))))
    lines.append(_line("total token throughput (tok/s)", _number(thr.get("total_tokens_per_s"))))
    sections = [BRIEF_METRICS[name] for name in metrics]
    if has_reasoning(s):  # TTFO, the wait a user sees, after TTFT's section (or first)
        at = next((i + 1 for i, (key, _) in enumerate(sections) if key == "ttft"), 0)
        sections.insert(at, TTFO_SECTION)
    for key, heading in sections:
        lines += _metric_lines(heading, lat.get(key) or {}, percentiles)
    lines.append(f"{' SLOs and health ':-^{LABEL_WIDTH + 12}}")
    lines += health_lines(result)
    lines.append("=" * (LABEL_WIDTH + 12))
    return "\n".join(lines)


def _metric_lines(
    heading: str, stats: Mapping[str, Any], percentiles: Sequence[float]
) -> list[str]:
    lines = [f"{' ' + heading + ' ':-^{LABEL_WIDTH + 12}}"]
    lines.append(_line("mean", _number(stats.get("mean"))))
    lines.append(_line("median", _number(stats.get("p50"))))
    for p in percentiles:
        if p == 50.0:
            continue  # the median, above
        lines.append(_line(f"p{percentile_key(p)}", _number(stats.get(BRIEF_PERCENTILES[p]))))
    return lines


def has_reasoning(block: Mapping[str, Any]) -> bool:
    """A block (the summary) whose requests streamed reasoning tokens and has a TTFO figure."""
    channels = (block.get("tokens") or {}).get("channels") or {}
    ttfo = (block.get("latency_ms") or {}).get("ttfo") or {}
    return bool(channels.get("reasoning_requests")) and bool(ttfo.get("count"))


def health_lines(result: Mapping[str, Any]) -> list[str]:
    """The block's last lines: every SLO verdict and every health warning that fired, one line
    each, and a line that says so when there is none of either."""
    summary = result.get("summary") or {}
    lines = slo_lines(summary.get("slo") or []) or ["SLO: none set"]
    warnings = list((result.get("client") or {}).get("warnings") or [])
    if not result.get("complete", True):
        warnings.insert(0, f"the run is INCOMPLETE ({result.get('stop_reason')})")
    if (result.get("target") or {}).get("tls_verify") is False:
        warnings.append("TLS certificate verification was OFF (--insecure)")
    lines += [f"WARNING: {w}" for w in warnings] or ["health: no warning fired"]
    return lines


__all__ = [
    "BRIEF_METRICS",
    "BRIEF_PERCENTILES",
    "check_brief_percentiles",
    "has_reasoning",
    "health_lines",
    "render_brief",
]
