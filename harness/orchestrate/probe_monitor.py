"""The live watch beside a capacity probe over HTTP: samples the engine's counters, the records
as they finish and the server's waiting gauge, and stops the probe when
`harness.analysis.runaway` finds a queue that runs away.

The runner calls `observe(record)` for every record it journals and runs `watch(counters,
control, server_values, scrape_interval_s)` beside the engine (`runner.run_command(..., monitor=)`).
Everything it decides on is in the samples, so `series_of` can rebuild the series from the journal
afterwards (there, each sample sees the last poll before it, however old; live, a gauge older than
STALE_SCRAPES scrape intervals is not used).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import Any

from harness.analysis.runaway import Evidence, Sample, runaway_evidence
from harness.record.records import Record

MONITOR_INTERVAL_S = 0.25
# The server's waiting queue, by engine: vLLM (and the simulator), llama.cpp's deferred requests.
WAITING_GAUGES = ("vllm:num_requests_waiting", "llamacpp:requests_deferred")
STALE_SCRAPES = 3  # a gauge older than this many scrape intervals is not used


def waiting_of(values: dict[str, float] | None) -> float | None:
    """The server's waiting-queue gauge from one /metrics poll, or None when it has none."""
    if not values:
        return None
    for name in WAITING_GAUGES:
        if name in values:
            return float(values[name])
    return None


class ProbeMonitor:
    """One probe's watch. `evidence` holds the numbers when it stopped the probe."""

    def __init__(
        self,
        offered_rate_per_s: float,
        measured_phases: Collection[int],
        first_measured_name: str,
        interval_s: float = MONITOR_INTERVAL_S,
        span_s: float | None = None,
        drain_limit_s: float | None = None,
        on_sample: Callable[[Sample], None] | None = None,
    ) -> None:
        """`span_s`, `drain_limit_s`: stop the run when requests are still in flight this long
        after the measured span's planned end (a server that crawls would keep a probe for the
        requests' whole timeout). `on_sample`: called with every sample (the search's progress
        line, harness.orchestrate.capacity_progress)."""
        self.on_sample = on_sample
        self.rate = offered_rate_per_s
        self.span_s = span_s
        self.drain_limit_s = drain_limit_s
        self.measured = frozenset(measured_phases)
        self.first_name = first_measured_name
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.evidence: Evidence | None = None
        self._done = 0
        self._e2e_sum = 0.0
        self._e2e_max = 0.0
        self._decode_max = 0.0
        self._ttft_sum = 0.0

    def observe(self, rec: Record) -> None:
        """A record was journaled: count a measured request that finished with tokens."""
        if rec.phase not in self.measured or not rec.ok or not rec.chunk_ns or rec.sent_ns is None:
            return
        e2e = (rec.chunk_ns[-1] - rec.sent_ns) / 1e9
        self._done += 1
        self._e2e_sum += e2e
        self._e2e_max = max(self._e2e_max, e2e)
        self._decode_max = max(self._decode_max, (rec.chunk_ns[-1] - rec.chunk_ns[0]) / 1e9)
        self._ttft_sum += (rec.chunk_ns[0] - rec.intended_ns) / 1e9

    async def watch(
        self,
        counters: Any,
        control: Any,
        server_values: Callable[[], tuple[dict[str, float] | None, float]],
        scrape_interval_s: float = 1.0,
    ) -> None:
        """Sample until the run stops; stop it with the evidence when the queue runs away.
        `server_values()` returns (the last /metrics values or None, their age in seconds), polled
        every `scrape_interval_s` (the run's [metrics] scrape_interval)."""
        stale_s = STALE_SCRAPES * max(scrape_interval_s, self.interval_s)
        start: float | None = None
        sent0 = 0
        while not control.stopped:
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            if start is None:
                if counters.phase != self.first_name:
                    continue
                start, sent0 = now, counters.sent
                continue
            values, age_s = server_values()
            waiting = waiting_of(values) if age_s <= stale_s else None
            self.samples.append(
                Sample(
                    t_s=now - start,
                    sent=counters.sent - sent0,
                    in_flight=counters.in_flight,
                    done=self._done,
                    e2e_sum_s=self._e2e_sum,
                    e2e_max_s=self._e2e_max,
                    decode_max_s=self._decode_max,
                    ttft_sched_sum_s=self._ttft_sum,
                    waiting=waiting,
                )
            )
            if self.on_sample is not None:
                self.on_sample(self.samples[-1])
            late = self.samples[-1].t_s - (self.span_s or 0.0)
            if (
                self.span_s is not None
                and self.drain_limit_s is not None
                and late > self.drain_limit_s
                and counters.in_flight > 0
            ):
                control.stop(
                    f"probe stopped: {counters.in_flight} requests still in flight {late:.0f}s after "
                    f"its end (drain limit {self.drain_limit_s:.0f}s): the server did not keep up"
                )
                return
            ev = runaway_evidence(self.samples, self.rate)
            if ev is not None:
                self.evidence = ev
                control.stop(f"probe stopped early: {ev.describe()}")
                return
