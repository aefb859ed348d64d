"""Live metrics: the client's own counters and histograms on a Prometheus endpoint while a run goes.

`run --prometheus-port N` serves them at http://HOST:N/metrics, so a Prometheus that scrapes
the server (vLLM's `/metrics`) can scrape the client beside it; docs/grafana-dashboard.json
puts the two side by side. Fed from the same place as the progress line
(harness.orchestrate.progress): the live `Counters` once a second (sent, completed, failed,
in flight, output tokens, phase), and each finished Record as it is journaled (errors by
kind, TTFT / ITL / E2E into histograms). Nothing is done per token on the hot path: a
finished Record is appended to a list, and the list is filed into the buckets once a second
(and at each scrape) with a few numpy calls per batch. Worker and Ray runs
feed the records from the journal lines the parent process receives.

Served by prometheus_client's HTTP server in a thread, from our own registry (not the global
one), through a collector that reads the numbers under a lock at scrape time. Every series
carries the labels `run` (the result's file name without `.json`, e.g. `steady-20261202T080920Z`)
and `scenario` (the scenario's name), so one Prometheus tells runs apart.

After the run the endpoint stays up `--prometheus-linger` seconds (DEFAULT_LINGER_S) with the
final counts, so a scraper polling every 15 s still reads them: `linger` hands the server to a
timer that stops it, and `wait_lingering` (the command's last step, after the report) waits for
it; Ctrl-C ends the wait.

Metric names (units in the name, as Prometheus does): harness_requests_sent_total,
harness_requests_completed_total, harness_requests_failed_total, harness_errors_total{kind},
harness_requests_in_flight, harness_output_tokens_total, harness_phase{phase},
harness_ttft_seconds, harness_itl_seconds, harness_e2e_seconds (histograms; vLLM's bucket
bounds for TTFT, ITL and E2E request latency, plus finer ones below vLLM's lowest for ITL and E2E).
Token channels (issue 25), always served: harness_ttfo_seconds (first answer token - sent; the
same as TTFT for a model that does not reason; a request without an answer token adds nothing),
harness_ttft_tool_seconds (first tool-call token - sent; empty without tool calls), both on
TTFT's bounds, and harness_channel_tokens_total{channel} (answer, reasoning, tool: the tokens
the events of each channel carried, failed requests' included, as harness_output_tokens_total).

Time base (issue 45): against the simulator at `speedup = K` the histograms are in model
seconds, as the result's figures are (each Record converted by harness.analysis.clock's one
conversion before it is filed), and harness_clock_speedup says K (1 at real speed). Counters
are counts; a PromQL rate() over them is per wall second (divide by K for the model's).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from itertools import chain
from typing import Any

import numpy as np
import orjson

from harness.analysis.clock import record_to_model_time
from harness.record.journal import decode_record
from harness.record.records import CHANNEL_NAMES, Record
from harness.sim.buckets import ITL_BUCKETS_S as VLLM_ITL_BUCKETS_S
from harness.sim.buckets import REQUEST_BUCKETS_S, TTFT_BUCKETS_S, BucketCounts

NS_PER_S = 1e9
DEFAULT_LINGER_S = 30.0  # two scrapes at Prometheus' common 15 s interval see the final counts
LABELS = ("run", "scenario")  # on every series
DEFAULT_HOST = (
    "127.0.0.1"  # the client's figures are not secret, but a port is opened only where asked
)
# vLLM's bounds (harness.sim.buckets), so client and server quantiles line up; ITL and E2E
# with finer ones below vLLM's lowest (10 ms, 0.3 s): fast decode and small models, short answers.
ITL_BUCKETS_S = (0.001, 0.0025, 0.005, *VLLM_ITL_BUCKETS_S)
E2E_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.2, *REQUEST_BUCKETS_S)


def _buckets(h: BucketCounts) -> list[tuple[str, float]]:
    return [(le, float(c)) for le, c in h.cumulative(lambda b: f"{b:g}")]


class LiveMetrics:
    """The numbers behind the endpoint; `update` once a second, `observe` per finished Record."""

    def __init__(self, run: str = "", scenario: str = "") -> None:
        self.labels = [run, scenario]  # the values of LABELS
        self._lock = threading.Lock()
        self.sent = self.completed = self.failed = self.in_flight = self.output_tokens = 0
        self.phase = ""
        self.errors: dict[str, int] = {}
        self.ttft = BucketCounts(TTFT_BUCKETS_S)
        self.itl = BucketCounts(ITL_BUCKETS_S)
        self.e2e = BucketCounts(E2E_BUCKETS_S)
        self.ttfo = BucketCounts(TTFT_BUCKETS_S)
        self.ttft_tool = BucketCounts(TTFT_BUCKETS_S)
        self.channel_tokens = dict.fromkeys(CHANNEL_NAMES, 0)
        # the simulator's speedup (set_speedup): the histograms are filed in model time, as
        # the result's figures are (harness.analysis.clock)
        self.speedup = 1.0
        # observed, not yet filed: appended from the engine's loop, taken from the scrape thread
        # one by one (deque's append and popleft are atomic: no record is lost between the two)
        self._pending: deque[Record] = deque()

    def update(self, c: Any) -> None:
        """The live counters (`Counters`, or their sum over workers); also files the records
        observed since the last update into the histograms."""
        with self._lock:
            self.sent, self.completed, self.failed = c.sent, c.completed, c.failed
            self.in_flight, self.output_tokens, self.phase = c.in_flight, c.output_tokens, c.phase
            self._file_pending()

    def set_speedup(self, k: float) -> None:
        """The run's time base: a simulator at speedup k has its latencies filed x k (model
        time, by the one conversion the result and the exports use), and says k on
        harness_clock_speedup. Called before the first record is observed."""
        with self._lock:
            self.speedup = float(k)

    def observe(self, r: Record) -> None:
        """One finished attempt. Only kept here (an append); filed into the histograms in
        batches, once a second and at each scrape, with a few numpy calls per batch."""
        self._pending.append(r)

    def _file_pending(self) -> None:
        """Errors by kind; TTFT, TTFO, first tool call, E2E and per-token ITL of the successes;
        tokens by channel (lock held)."""
        batch = []
        while True:
            try:
                batch.append(self._pending.popleft())
            except IndexError:
                break
        if self.speedup != 1.0:
            batch = [record_to_model_time(r, self.speedup) for r in batch]
        self._file_channels(batch)
        ok = []
        sent: list[int] = []  # ok's sent_ns, known to be set
        for r in batch:
            if r.error is not None:
                kind = r.error_class or "unknown"
                self.errors[kind] = self.errors.get(kind, 0) + 1
            elif r.chunk_ns and r.sent_ns is not None:
                ok.append(r)
                sent.append(r.sent_ns)
        if not ok:
            return
        sent_ns = np.array(sent, dtype=np.int64)
        first = np.fromiter((r.chunk_ns[0] for r in ok), np.int64, len(ok)) - sent_ns
        last = np.fromiter((r.chunk_ns[-1] for r in ok), np.int64, len(ok)) - sent_ns
        self.ttft.observe(first / NS_PER_S)
        self.e2e.observe(last / NS_PER_S)
        for hist, firsts in (
            (self.ttfo, [r.ttfo_ns for r in ok]),
            (self.ttft_tool, [r.ttft_tool_ns for r in ok]),
        ):
            hist.observe(
                np.array([t for t in firsts if t is not None], dtype=np.float64) / NS_PER_S
            )
        # ITL: every record's stamps end to end; the differences across two records are dropped.
        lengths = np.fromiter((len(r.chunk_ns) for r in ok), np.int64, len(ok))
        total = int(lengths.sum())
        if total < 2:
            return
        stamps = np.fromiter(chain.from_iterable(r.chunk_ns for r in ok), np.int64, total)
        tokens = np.fromiter(
            chain.from_iterable(r.chunk_tokens or (1,) * len(r.chunk_ns) for r in ok),
            np.int64,
            total,
        )
        keep = np.ones(total - 1, dtype=bool)
        keep[np.cumsum(lengths)[:-1] - 1] = (
            False  # the gap from one record's last stamp to the next's first
        )
        gaps = np.diff(stamps)[keep] / NS_PER_S
        k = np.maximum(tokens[1:][keep], 1).astype(
            float
        )  # a chunk of k tokens after a gap g: k samples of g/k
        self.itl.observe(gaps / k, k)

    def _file_channels(self, batch: list[Record]) -> None:
        """The tokens of the batch's events by channel (every attempt: as output tokens)."""
        for r in batch:
            tokens = r.chunk_tokens or (1,) * len(r.chunk_ns)
            if not r.channel_runs:  # every event an answer
                self.channel_tokens["answer"] += sum(tokens)
                continue
            per = np.bincount(
                np.asarray(r.channels, dtype=np.int64),
                weights=np.asarray(tokens, dtype=np.float64),
                minlength=len(CHANNEL_NAMES),
            )
            for name, k in zip(CHANNEL_NAMES, per.tolist(), strict=True):
                self.channel_tokens[name] += int(k)

    def observe_lines(self, lines: bytes) -> None:
        """Journal lines as worker processes and Ray tasks ship them: the records among them."""
        for line in lines.splitlines():
            if b'"t":"rec"' not in line:
                continue
            try:
                self.observe(decode_record(orjson.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue  # a damaged line is the journal reader's business, not ours

    def collect(self) -> Iterator[Any]:
        """prometheus_client's collector protocol: the families, read under the lock."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        base = self.labels
        with self._lock:
            self._file_pending()
            for name, doc, value in (
                ("harness_requests_sent", "requests the client sent", self.sent),
                (
                    "harness_requests_completed",
                    "requests that finished with every token",
                    self.completed,
                ),
                ("harness_requests_failed", "requests that failed (any kind)", self.failed),
                ("harness_output_tokens", "output tokens received", self.output_tokens),
            ):
                counter = CounterMetricFamily(name, doc, labels=LABELS)
                counter.add_metric(base, value)
                yield counter
            errors = CounterMetricFamily(
                "harness_errors",
                "failed attempts by kind (http_429, stream_cut, timeout_first_token, ...)",
                labels=[*LABELS, "kind"],
            )
            for kind, n in sorted(self.errors.items()):
                errors.add_metric([*base, kind], n)
            yield errors
            by_channel = CounterMetricFamily(
                "harness_channel_tokens",
                "output tokens by channel (answer, reasoning, tool)",
                labels=[*LABELS, "channel"],
            )
            for name, n in self.channel_tokens.items():
                by_channel.add_metric([*base, name], n)
            yield by_channel
            in_flight = GaugeMetricFamily(
                "harness_requests_in_flight", "requests sent and not finished", labels=LABELS
            )
            in_flight.add_metric(base, self.in_flight)
            yield in_flight
            speedup = GaugeMetricFamily(
                "harness_clock_speedup",
                "model seconds per wall second: the latency histograms are in model time "
                "(1: real speed; a simulator's speedup otherwise)",
                labels=LABELS,
            )
            speedup.add_metric(base, self.speedup)
            yield speedup
            phase = GaugeMetricFamily(
                "harness_phase", "the scenario phase running now (1)", labels=[*LABELS, "phase"]
            )
            if self.phase:
                phase.add_metric([*base, self.phase], 1)
            yield phase
            for name, doc, h in (
                ("harness_ttft_seconds", "time to first token (first token - sent)", self.ttft),
                ("harness_itl_seconds", "inter-token latency, per token", self.itl),
                ("harness_e2e_seconds", "end to end (last token - sent)", self.e2e),
                ("harness_ttfo_seconds", "time to first answer token (TTFO)", self.ttfo),
                (
                    "harness_ttft_tool_seconds",
                    "time to first tool-call token (first tool-call token - sent)",
                    self.ttft_tool,
                ),
            ):
                hist = HistogramMetricFamily(name, doc, labels=LABELS)
                hist.add_metric(base, buckets=_buckets(h), sum_value=h.sum)
                yield hist


class MetricsServer:
    """The endpoint: start() serves `metrics` on host:port in a thread; stop() closes it."""

    def __init__(self, metrics: LiveMetrics, port: int, host: str = DEFAULT_HOST) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._linger: threading.Timer | None = None
        self.linger_s = 0.0  # how long it stays up after its run (`linger`)

    def start(self) -> int:
        """Serve; returns the port (the one chosen when `port` was 0). OSError when taken."""
        from prometheus_client import CollectorRegistry, start_http_server

        for other in list(_lingering):  # a port held by an earlier run's final counts: freed
            if self.port and other.port == self.port:
                other.stop()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.metrics)
        self._server, self._thread = start_http_server(self.port, addr=self.host, registry=registry)
        self.port = int(self._server.server_port)
        return self.port

    def linger(self, seconds: float) -> None:
        """Keep serving `seconds` more, then stop (a daemon timer; `wait_lingering` waits for
        it). 0 or less: stop now."""
        if seconds <= 0:
            self.stop()
            return
        self.linger_s = seconds
        timer = threading.Timer(seconds, self.stop)
        timer.daemon = True
        self._linger = timer
        _lingering.append(self)
        timer.start()

    def stop(self) -> None:
        timer, self._linger = self._linger, None
        if timer is not None:
            timer.cancel()
        if self in _lingering:
            _lingering.remove(self)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


_lingering: list[MetricsServer] = []  # endpoints kept up after their run (`linger`)


def wait_lingering(say: Any = None) -> None:
    """Wait until every lingering endpoint has stopped (the CLI's last step); Ctrl-C stops them
    at once. `say(text)`: told how long, once."""
    servers = list(_lingering)
    if not servers:
        return
    if say is not None:
        urls = ", ".join(f"http://{s.host}:{s.port}/metrics" for s in servers)
        say(
            f"live metrics: {urls} keeps the final counts for --prometheus-linger "
            f"({max(s.linger_s for s in servers):g} s); Ctrl-C ends it"
        )
    try:
        for s in servers:
            timer = s._linger
            if timer is not None:
                timer.join()
            s.stop()
    except KeyboardInterrupt:
        for s in servers:
            s.stop()
