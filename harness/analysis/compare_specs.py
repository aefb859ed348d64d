"""compare's metrics and thresholds: which figures a comparison has (each with its direction),
the default thresholds, `--max-regression` and threshold files, and the confidence each interval
is held to (harness.analysis.compare)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.catalogue import BY_NAME, PER_REQUEST_SLOS, stat_label
from harness.config.validate import load_toml_file
from harness.errors import ConfigError, UsageError
from harness.units import parse_percent

DEFAULT_REPLICATES = 1000  # percentile intervals settle to ~1 % with 1000 draws
DEFAULT_CONFIDENCE = 0.95
MIN_TAIL_SAMPLES = 5  # a bootstrapped percentile needs this many samples above it
_CHUNK_CELLS = 4_000_000  # replicate x sample cells per block: bounds memory (~32 MB)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    key: str
    label: str
    better: str  # "lower" or "higher"
    metric: str  # per-request / token metric, or "throughput"
    stat: str  # "p50", "p99", "mean", or a throughput key


def _better(name: str) -> str:
    return "lower" if BY_NAME[name].lower_is_better else "higher"


def _latency(metric: str, stat: str) -> MetricSpec:
    return MetricSpec(f"{metric}_{stat}", stat_label(metric, stat), _better(metric), metric, stat)


def _throughput(name: str) -> MetricSpec:
    return MetricSpec(name, BY_NAME[name].label, _better(name), "throughput", name)


# Names, labels and directions come from the metric catalogue (harness.catalogue).
METRICS: tuple[MetricSpec, ...] = (
    _latency("ttft", "p50"),
    _latency("ttft", "p99"),
    _latency("ttft_from_schedule", "p99"),
    _latency("itl", "p50"),
    _latency("itl", "p99"),
    _latency("tpot", "mean"),
    _latency("tpot", "p99"),
    _latency("e2e", "p99"),
    _latency("e2e_from_schedule", "p99"),
    _throughput("output_tokens_per_s"),
    _throughput("requests_per_s"),
    _throughput("goodput_requests_per_s"),
)
# The channel rows (issue 25): shown where either side streamed reasoning or tool tokens, or
# where a threshold names one (`--max-regression ttfo_p99=10%`); without channels TTFO is TTFT
# and ITL answer is ITL, so a run that has none gets none of them unless asked. Not gated by
# default: the default gates are the same for every pair of runs.
CHANNEL_METRICS: tuple[MetricSpec, ...] = (
    _latency("ttfo", "p50"),
    _latency("ttfo", "p99"),
    _latency("ttft_tool", "p99"),
    _latency("itl_answer", "p99"),
    _latency("itl_reasoning", "p99"),
    _latency("itl_tool", "p99"),
)
# Every row in report order: a channel row after the row it refines.
ALL_METRICS: tuple[MetricSpec, ...] = (
    *METRICS[:3],
    *CHANNEL_METRICS[:3],
    *METRICS[3:5],
    *CHANNEL_METRICS[3:],
    *METRICS[5:],
)
SPECS = {m.key: m for m in ALL_METRICS}
CHANNEL_KEYS = frozenset(m.key for m in CHANNEL_METRICS)
TOKEN_METRICS = ("itl", "itl_answer", "itl_reasoning", "itl_tool")  # samples per token
# Defaults: 10 % on every latency figure (p50, p99, mean), 5 % on throughput; each counts only
# when the change is also significant. A p99 of a short run is judged only when it changed a
# lot; otherwise it is INCONCLUSIVE, with the requests it needs.
DEFAULT_THRESHOLDS: dict[str, float] = {
    **{m.key: 0.10 for m in METRICS if m.metric != "throughput"},
    "output_tokens_per_s": 0.05,
    "goodput_requests_per_s": 0.05,
}
PER_REQUEST = PER_REQUEST_SLOS  # the metrics a request has one value of


# ---------------------------------------------------------------- thresholds


def parse_threshold(text: str, where: str, key: str) -> float:
    """A regression threshold: '10%' or '0.1' -> 0.1 (0 to 1000 %); raises ConfigError naming
    where and key."""
    try:
        v = parse_percent(str(text))
    except ValueError:
        raise ConfigError(
            where, key, f"expected a percentage such as 10% or a fraction such as 0.1, got {text!r}"
        ) from None
    if not 0 <= v < 10:
        raise ConfigError(where, key, f"expected a percentage between 0% and 1000%, got {text!r}")
    return v


def _check_metric(key: str, where: str) -> None:
    if key not in SPECS:
        raise ConfigError(where, key, f"unknown metric; allowed: {', '.join(SPECS)}")


def parse_threshold_flags(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(
                f"--max-regression {item!r}: expected METRIC=PERCENT, e.g. ttft_p99=10%"
            )
        key = key.strip()
        _check_metric(key, "--max-regression")
        out[key] = parse_threshold(value, "--max-regression", key)
    return out


def load_threshold_file(path: str) -> dict[str, float]:
    """A TOML file with a `[max_regression]` table of METRIC = "PERCENT"."""
    doc = load_toml_file(Path(path))  # the one TOML loader: bounded size and nesting
    extra = set(doc) - {"max_regression"}
    if extra:
        raise ConfigError(path, sorted(extra)[0], "unknown key; allowed: max_regression")
    table = doc.get("max_regression", {})
    if not isinstance(table, dict):
        raise ConfigError(path, "max_regression", 'expected a table of METRIC = "PERCENT"')
    out = {}
    for key, value in table.items():
        _check_metric(key, path)
        out[key] = parse_threshold(value, path, f"max_regression.{key}")
    return out


def check_confidence(value: float, where: str) -> None:
    """A family confidence: 0.5 to 0.999 (UsageError naming `where` otherwise)."""
    if not 0.5 <= value <= 0.999:
        raise UsageError(f"{where} {value!r}: expected a confidence from 0.5 to 0.999, e.g. 0.95")


def family_confidence(thresholds: dict[str, float], confidence: float) -> float:
    """Each interval's confidence so that all gated metrics together hold `confidence`
    (Bonferroni): the verdict fails on any one of them, so a same-setting pair must pass all,
    and m intervals at 1 - alpha/m miss together at most alpha of the time."""
    gated = sum(1 for k in thresholds if k in SPECS)
    return 1 - (1 - confidence) / max(1, gated)


def reference_threshold(key: str) -> float:
    """The threshold an ungated metric's `same` is held to: its default (10 % on latency
    figures, 5 % on throughput)."""
    if key in DEFAULT_THRESHOLDS:
        return DEFAULT_THRESHOLDS[key]
    return 0.05 if SPECS[key].metric == "throughput" else 0.10
