"""vLLM's Prometheus metrics for the simulator, rendered in the text exposition format.

Same names, labels and bucket edges as vLLM's V1 engine (`vllm:*`). Histograms are plain
numpy bucket counters fed a whole step at a time (one `np.searchsorted` per step instead of
one locked `observe` per token), exposed through a prometheus_client custom collector.
Latencies are real seconds as the server sees them: with `--speedup K` they are K times
shorter than the modelled ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from harness.sim.buckets import (
    ITERATION_TOKEN_BUCKETS,
    ITL_BUCKETS_S,
    REQUEST_BUCKETS_S,
    TTFT_BUCKETS_S,
    BucketCounts,
)


def _family(
    hist: BucketCounts, name: str, doc: str, labels: dict[str, str]
) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), hist.cumulative(_fmt), hist.sum)
    return fam


def _fmt(edge: float) -> str:
    return str(float(edge))


# (name, help, SimMetrics attribute): the scrape's gauges, counters and histograms, in order.
# Tables of vLLM's names, alike in shape by design (issue 46: a shape pair left as it is).
_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)
_COUNTERS = (
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", "preemptions"),
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        "prefix_cache_queries",
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        "prefix_cache_hits",
    ),
)
_HISTOGRAMS = (
    (
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        "iteration_tokens",
    ),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
    (
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "queue",
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "prefill",
    ),
    (
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "decode",
    ),
)


class SimMetrics:
    """Counters and histograms the engine feeds; gauges are read live at scrape time."""

    def __init__(self, model_name: str, cache_info: dict[str, str]) -> None:
        self.labels = {"model_name": model_name, "engine": "0"}
        self.cache_info = cache_info
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.iteration_tokens = BucketCounts(ITERATION_TOKEN_BUCKETS)
        self.ttft = BucketCounts(TTFT_BUCKETS_S)
        self.itl = BucketCounts(ITL_BUCKETS_S)
        self.e2e = BucketCounts(REQUEST_BUCKETS_S)
        self.queue = BucketCounts(REQUEST_BUCKETS_S)
        self.prefill = BucketCounts(REQUEST_BUCKETS_S)  # first scheduled -> first token
        self.decode = BucketCounts(REQUEST_BUCKETS_S)  # first token -> last token
        self.prefix_cache_queries = 0  # tokens looked up in the prefix cache
        self.prefix_cache_hits = 0  # tokens found there
        self.gauges: Callable[[], tuple[int, int, float]] = lambda: (0, 0, 0.0)

    def families(self) -> Iterator[Metric]:
        names, values = list(self.labels), list(self.labels.values())
        for (name, doc), value in zip(_GAUGES, self.gauges(), strict=True):
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            yield g
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=list(self.cache_info),
        )
        info.add_metric(list(self.cache_info.values()), 1.0)
        yield info
        for name, doc, attr in _COUNTERS:
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, getattr(self, attr))
            yield c
        ok = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason, count in self.success.items():
            ok.add_metric([*values, reason], count)
        yield ok
        for name, doc, attr in _HISTOGRAMS:
            yield _family(getattr(self, attr), name, doc, self.labels)


class _Collector:
    def __init__(self, metrics: SimMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics.families()


def render(metrics: SimMetrics) -> bytes:
    """The `/metrics` body (Prometheus text format 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(metrics))
    return generate_latest(registry)
