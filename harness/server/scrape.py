"""Poll the target's Prometheus `/metrics` during a run and journal what the server reports.

Theory of operation: one task in the run's event loop GETs `/metrics` about once a second
(`[metrics] scrape_interval`), parses the text with prometheus_client's parser (in a worker
thread, so a large exposition never delays the engine's token stamps) and writes one journal
line per poll:

    {"t": "server_metrics", "wall_s": 1712.3, "done_s": 1712.31, "values": {"vllm:num_requests_running": 12, ...}}

`wall_s` is when the GET went out and `done_s` when its body had arrived: the server took its
snapshot somewhere between the two (under load, a /metrics answer can wait behind the requests).

`values` holds every `vllm:` / `llamacpp:` gauge and counter sample, summed over label sets
(several engines or models add up), and the `_sum` / `_count` of the `vllm:iteration_tokens_total`
histogram (tokens per engine step). The first line also carries `info`: the labels of
`vllm:cache_config_info` (block size, number of KV blocks...). A target without `/metrics`
(404, not Prometheus text, or nothing listening) gets one line `{"available": false, "reason": ...}`
and no more polls. Summaries are `harness.analysis.server_metrics`' job. This module is server
side: the client package never imports it.

The latency histograms vLLM keeps of what it saw (`HISTOGRAMS`: TTFT, ITL, E2E and the queue /
prefill / decode split) go into the line too, as `hist`: {name: [sum, count, [cumulative bucket
counts...]]}, only for those whose count changed since the last line that carried them (a
reader carries the last one forward); `hist_le` gives a histogram's finite bucket bounds on the
first line that carries it. The window's edges are polls: `ready` is set once the first poll
is done (the runner waits for it, a few seconds at most, before sending anything), and when
the task is cancelled at the end of a run it polls once more (`"edge": "end"`), so the bucket
deltas between two polls cover the measured requests (`harness.analysis.server_view`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from harness.redact import NO_SECRETS

PREFIXES = ("vllm:", "llamacpp:")
HISTOGRAM_PARTS = ("vllm:iteration_tokens_total_sum", "vllm:iteration_tokens_total_count")
# vLLM V1's request latency histograms (vllm/v1/metrics/loggers.py), kept bucket by bucket.
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
)
INFO_METRICS = ("vllm:cache_config_info",)
SCRAPE_TIMEOUT_S = 2.0  # a /metrics answer slower than this is skipped, not waited for
MAX_BODY_BYTES = 16 * 1024**2  # vLLM's exposition is ~100 KiB; a bigger body is not /metrics
END_POLL_TRIES = 2  # the poll that closes the window is retried once
GIVE_UP_AFTER = 5  # failed polls before any success: the target has no /metrics
READY_WAIT_S = 10.0  # the run waits this long at most for the first poll (the window's start). With
# 3 s, a vLLM run on a machine at load ~5 began before it: its server view counted the TTFT of 40
# of the run's 48 requests (the 8 first in the batch came before the window's first edge)


Histogram = tuple[
    tuple[float, ...], list[float], float, float
]  # finite bounds, cumulative, sum, count


def parse_metrics(text: str) -> tuple[dict[str, float], dict[str, dict[str, str]]]:
    """Prometheus text -> (values by sample name, summed over labels; info labels by name).

    Raises ValueError when the text is not Prometheus exposition format.
    """
    values, info, _ = parse_exposition(text)
    return values, info


def parse_exposition(
    text: str,
) -> tuple[dict[str, float], dict[str, dict[str, str]], dict[str, Histogram]]:
    """`parse_metrics`, plus the `HISTOGRAMS` bucket by bucket, summed over label sets:
    {name: (finite upper bounds, cumulative counts incl. +Inf, sum, count)}."""
    values: dict[str, float] = {}
    info: dict[str, dict[str, str]] = {}
    hists: dict[str, Histogram] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(PREFIXES):
            continue
        if fam.name in INFO_METRICS or fam.name.removesuffix("_info") + "_info" in INFO_METRICS:
            for s in fam.samples:
                info[fam.name] = dict(s.labels)
            continue
        if fam.name in HISTOGRAMS:
            h = _histogram(fam.samples)
            if h is not None:
                hists[fam.name] = h
            continue
        for s in fam.samples:
            if fam.type in ("gauge", "counter", "untyped", "unknown") or s.name in HISTOGRAM_PARTS:
                if s.name.endswith("_created"):
                    continue
                values[s.name] = values.get(s.name, 0.0) + float(s.value)
    return values, info, hists


def _histogram(samples: list[Any]) -> Histogram | None:
    by_le: dict[float, float] = {}
    total_sum = total_count = 0.0
    for s in samples:
        if s.name.endswith("_bucket"):
            le = float(s.labels.get("le", "nan"))
            if le == le:  # not NaN
                by_le[le] = by_le.get(le, 0.0) + float(s.value)
        elif s.name.endswith("_sum"):
            total_sum += float(s.value)
        elif s.name.endswith("_count"):
            total_count += float(s.value)
    if float("inf") not in by_le:
        return None
    bounds = sorted(by_le)
    return (
        tuple(b for b in bounds if b != float("inf")),
        [by_le[b] for b in bounds],
        total_sum,
        total_count,
    )


def metrics_urls(base_url: str, path: str = "/metrics") -> list[str]:
    """Where to look: under the base URL first, then at the host's root when they differ."""
    parts = urlsplit(base_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    urls = [base_url.rstrip("/") + path]
    if origin + path not in urls:
        urls.append(origin + path)
    return urls


class Scraper:
    """Polls /metrics until cancelled; `write` receives each journal line (a dict)."""

    def __init__(
        self,
        base_url: str,
        write: Callable[[dict[str, Any]], None],
        interval_s: float = 1.0,
        path: str = "/metrics",
        tls_verify: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.urls = metrics_urls(base_url, path)
        # server text (labels, error reasons) with control characters escaped, as the harness
        # keeps all server text (harness.redact; no secret is sent to /metrics)
        self.write: Callable[[dict[str, Any]], None] = lambda line: write(NO_SECRETS.value(line))
        self.interval_s = interval_s
        self.tls_verify = tls_verify
        self.headers = headers or {}
        self.polls = 0
        self.failures = 0
        self.ready = threading.Event()  # the first poll is done (or /metrics was given up on)
        self._hist_last: dict[str, float] = {}  # count last journaled per histogram
        self.latest: dict[str, float] | None = (
            None  # the last poll's values (a live watcher reads them)
        )
        self.latest_monotonic_s = 0.0

    def latest_values(self) -> tuple[dict[str, float] | None, float]:
        """(the last poll's values or None, their age in seconds)."""
        return self.latest, time.monotonic() - self.latest_monotonic_s

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=1, ssl=self.tls_verify)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            try:
                url = await self._find(session)
            finally:
                self.ready.set()
            if url is None:
                return
            loop = asyncio.get_running_loop()
            next_t = loop.time()
            try:
                while True:
                    next_t += self.interval_s
                    await asyncio.sleep(max(0.0, next_t - loop.time()))
                    await self._poll(session, url, first=False)
            except asyncio.CancelledError:
                # The run ended: one last poll closes the window the histograms are read over
                # (tried twice: without it the window would end at the previous poll).
                for _ in range(END_POLL_TRIES):
                    ok, _reason = await self._poll(session, url, first=False, edge="end")
                    if ok:
                        break
                raise

    async def wait_ready(self, timeout_s: float = READY_WAIT_S) -> None:
        """Wait (in the run's loop) until the first poll is done, at most timeout_s."""
        deadline = time.monotonic() + timeout_s
        while not self.ready.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _find(self, session: aiohttp.ClientSession) -> str | None:
        """Try each candidate URL; retry connection failures a few times; journal a give-up."""
        reasons: list[str] = []
        for attempt in range(GIVE_UP_AFTER):
            reasons = []
            for url in self.urls:
                ok, reason = await self._poll(session, url, first=True)
                if ok:
                    return url
                reasons.append(reason)
            if all(r.startswith(("HTTP", "not Prometheus")) for r in reasons):
                break  # the server answered: it has no /metrics, retrying will not change that
            await asyncio.sleep(self.interval_s if attempt else 0.2)
        self.write(
            {
                "t": "server_metrics",
                "wall_s": time.time(),
                "available": False,
                "reason": "; ".join(f"{u}: {r}" for u, r in zip(self.urls, reasons, strict=False)),
            }
        )
        return None

    async def _poll(
        self, session: aiohttp.ClientSession, url: str, first: bool, edge: str | None = None
    ) -> tuple[bool, str]:
        wall = time.time()
        self.polls += 1
        try:
            async with session.get(url, headers=self.headers) as resp:
                if resp.status != 200:
                    return self._failed(f"HTTP {resp.status}", first, wall)
                raw = await _read_body(resp.content)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}".strip(), first, wall)
        if raw is None:
            return self._failed(
                f"not /metrics: the body is over {MAX_BODY_BYTES // 1024**2} MiB", first, wall
            )
        done = time.time()
        text = raw.decode("utf-8", "replace")
        try:
            values, info, hists = await asyncio.get_running_loop().run_in_executor(
                None, parse_exposition, text
            )
        except ValueError as exc:
            return self._failed(f"not Prometheus text ({exc})", first, wall)
        if first and not values:
            return self._failed(
                "not Prometheus text from vLLM or llama.cpp (no vllm:/llamacpp: metrics)",
                first,
                wall,
            )
        self.latest, self.latest_monotonic_s = values, time.monotonic()
        line: dict[str, Any] = {
            "t": "server_metrics",
            "wall_s": wall,
            "done_s": done,
            "values": values,
        }
        if first:
            line["url"] = url
            line["edge"] = "start"
            if info:
                line["info"] = info
        if edge:
            line["edge"] = edge
        changed = {
            name: h for name, h in hists.items() if self._hist_last.get(name) != h[3] or edge
        }
        if changed:
            line["hist"] = {name: [h[2], h[3], h[1]] for name, h in changed.items()}
            new = {name: list(h[0]) for name, h in changed.items() if name not in self._hist_last}
            if new:
                line["hist_le"] = new
            self._hist_last.update({name: h[3] for name, h in changed.items()})
        self.write(line)
        return True, ""

    def _failed(self, reason: str, first: bool, wall: float) -> tuple[bool, str]:
        self.failures += 1
        if not first:
            self.write({"t": "server_metrics", "wall_s": wall, "error": reason[:200]})
        return False, reason


async def _read_body(content: aiohttp.StreamReader) -> bytes | None:
    """The whole body, or None past MAX_BODY_BYTES. (`content.read(n)` returns whatever has
    arrived, up to n bytes: a busy vLLM sends its ~100 KiB exposition in several chunks, and
    a body cut mid-line is not Prometheus text.)"""
    chunks: list[bytes] = []
    total = 0
    async for chunk in content.iter_chunked(1 << 16):
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def scrape_until_cancelled(scraper: Scraper) -> None:
    """Run a scraper as a background task; cancellation ends it quietly."""
    with contextlib.suppress(asyncio.CancelledError):
        await scraper.run()
