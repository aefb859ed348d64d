"""vLLM's Prometheus metrics for the simulator, rendered in the text exposition format.

Same names, labels and bucket edges as vLLM's V1 engine (`vllm:*`). Histograms are plain
numpy bucket counters fed a whole step at a time (one `np.searchsorted` per step instead of
one locked `observe` per token), exposed through a prometheus_client custom collector.
Latencies are real seconds as the server sees them: with `--speedup K` they are K times
shorter than the modelled ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

# Bucket edges copied from vllm/v1/metrics/loggers.py.
TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS_S = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class BucketHistogram:
    """Cumulative-on-export histogram fed arrays of observations."""

    def __init__(self, edges: Sequence[float]) -> None:
        self.edges = np.asarray(edges, dtype=float)
        self.counts = np.zeros(len(edges) + 1, np.int64)  # last: above every edge (+Inf)
        self.sum = 0.0

    def observe(self, values: np.ndarray | Sequence[float]) -> None:
        v = np.asarray(values, dtype=float)
        if v.size == 0:
            return
        idx = np.searchsorted(self.edges, v, side="left")  # value <= edge -> that bucket
        self.counts += np.bincount(idx, minlength=self.counts.size)
        self.sum += float(v.sum())

    def family(self, name: str, doc: str, labels: dict[str, str]) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=list(labels))
        cum = np.cumsum(self.counts)
        buckets = [(_fmt(e), int(c)) for e, c in zip(self.edges, cum[:-1], strict=True)]
        buckets.append(("+Inf", int(cum[-1])))
        fam.add_metric(list(labels.values()), buckets, self.sum)
        return fam


def _fmt(edge: float) -> str:
    return str(float(edge))


class SimMetrics:
    """Counters and histograms the engine feeds; gauges are read live at scrape time."""

    def __init__(self, model_name: str, cache_info: dict[str, str]) -> None:
        self.labels = {"model_name": model_name, "engine": "0"}
        self.cache_info = cache_info
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.iteration_tokens = BucketHistogram(ITERATION_TOKEN_BUCKETS)
        self.ttft = BucketHistogram(TTFT_BUCKETS_S)
        self.itl = BucketHistogram(ITL_BUCKETS_S)
        self.e2e = BucketHistogram(REQUEST_BUCKETS_S)
        self.queue = BucketHistogram(REQUEST_BUCKETS_S)
        self.prefill = BucketHistogram(REQUEST_BUCKETS_S)  # first scheduled -> first token
        self.decode = BucketHistogram(REQUEST_BUCKETS_S)  # first token -> last token
        self.prefix_cache_queries = 0  # tokens looked up in the prefix cache
        self.prefix_cache_hits = 0  # tokens found there
        self.gauges: Callable[[], tuple[int, int, float]] = lambda: (0, 0, 0.0)

    def families(self) -> Iterator[Metric]:
        names, values = list(self.labels), list(self.labels.values())
        running, waiting, kv = self.gauges()
        for name, doc, value in (
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                running,
            ),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv),
        ):
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
        for name, doc, value in (
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                self.generation_tokens,
            ),
            (
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                self.preemptions,
            ),
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                self.prefix_cache_queries,
            ),
            (
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                self.prefix_cache_hits,
            ),
        ):
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            yield c
        ok = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason, count in self.success.items():
            ok.add_metric([*values, reason], count)
        yield ok
        for name, doc, hist in (
            (
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                self.iteration_tokens,
            ),
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                self.ttft,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                self.itl,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                self.e2e,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                self.queue,
            ),
            (
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                self.prefill,
            ),
            (
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                self.decode,
            ),
        ):
            yield hist.family(name, doc, self.labels)


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
