"""Poll the target's Prometheus `/metrics` during a run and journal what the server reports.

Theory of operation: one task in the run's event loop GETs `/metrics` about once a second
(`[metrics] scrape_interval`), parses the text with prometheus_client's parser (in a worker
thread, so a large exposition never delays the engine's token stamps) and writes one journal
line per poll:

    {"t": "server_metrics", "wall_s": 1712.3, "values": {"vllm:num_requests_running": 12, ...}}

`values` holds every `vllm:` / `llamacpp:` gauge and counter sample, summed over label sets
(several engines or models add up), and the `_sum` / `_count` of the `vllm:iteration_tokens_total`
histogram (tokens per engine step). The first line also carries `info`: the labels of
`vllm:cache_config_info` (block size, number of KV blocks...). A target without `/metrics`
(404, not Prometheus text, or nothing listening) gets one line `{"available": false, "reason": ...}`
and no more polls. Summaries are `harness.analysis.server_metrics`' job. This module is server
side: the client package never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

PREFIXES = ("vllm:", "llamacpp:")
HISTOGRAM_PARTS = ("vllm:iteration_tokens_total_sum", "vllm:iteration_tokens_total_count")
INFO_METRICS = ("vllm:cache_config_info",)
SCRAPE_TIMEOUT_S = 2.0          # a /metrics answer slower than this is skipped, not waited for
MAX_BODY_BYTES = 16 * 1024**2   # vLLM's exposition is ~100 KiB; a bigger body is not /metrics
GIVE_UP_AFTER = 5               # failed polls before any success: the target has no /metrics


def parse_metrics(text: str) -> tuple[dict[str, float], dict[str, dict[str, str]]]:
    """Prometheus text -> (values by sample name, summed over labels; info labels by name).

    Raises ValueError when the text is not Prometheus exposition format.
    """
    values: dict[str, float] = {}
    info: dict[str, dict[str, str]] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(PREFIXES):
            continue
        if fam.name in INFO_METRICS or fam.name.removesuffix("_info") + "_info" in INFO_METRICS:
            for s in fam.samples:
                info[fam.name] = dict(s.labels)
            continue
        for s in fam.samples:
            if fam.type in ("gauge", "counter", "untyped", "unknown") or s.name in HISTOGRAM_PARTS:
                if s.name.endswith("_created"):
                    continue
                values[s.name] = values.get(s.name, 0.0) + float(s.value)
    return values, info


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

    def __init__(self, base_url: str, write: Callable[[dict[str, Any]], None], interval_s: float = 1.0,
                 path: str = "/metrics", tls_verify: bool = True,
                 headers: dict[str, str] | None = None) -> None:
        self.urls = metrics_urls(base_url, path)
        self.write = write
        self.interval_s = interval_s
        self.tls_verify = tls_verify
        self.headers = headers or {}
        self.polls = 0
        self.failures = 0

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=1, ssl=None if self.tls_verify else False)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            url = await self._find(session)
            if url is None:
                return
            loop = asyncio.get_running_loop()
            next_t = loop.time()
            while True:
                next_t += self.interval_s
                await asyncio.sleep(max(0.0, next_t - loop.time()))
                await self._poll(session, url, first=False)

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
        self.write({"t": "server_metrics", "wall_s": time.time(), "available": False,
                    "reason": "; ".join(f"{u}: {r}" for u, r in zip(self.urls, reasons, strict=False))})
        return None

    async def _poll(self, session: aiohttp.ClientSession, url: str, first: bool) -> tuple[bool, str]:
        wall = time.time()
        self.polls += 1
        try:
            async with session.get(url, headers=self.headers) as resp:
                if resp.status != 200:
                    return self._failed(f"HTTP {resp.status}", first, wall)
                raw = await resp.content.read(MAX_BODY_BYTES)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}".strip(), first, wall)
        text = raw.decode("utf-8", "replace")
        try:
            values, info = await asyncio.get_running_loop().run_in_executor(None, parse_metrics, text)
        except ValueError as exc:
            return self._failed(f"not Prometheus text ({exc})", first, wall)
        if first and not values:
            return self._failed("not Prometheus text from vLLM or llama.cpp (no vllm:/llamacpp: metrics)",
                                first, wall)
        line: dict[str, Any] = {"t": "server_metrics", "wall_s": wall, "values": values}
        if first:
            line["url"] = url
            if info:
                line["info"] = info
        self.write(line)
        return True, ""

    def _failed(self, reason: str, first: bool, wall: float) -> tuple[bool, str]:
        self.failures += 1
        if not first:
            self.write({"t": "server_metrics", "wall_s": wall, "error": reason[:200]})
        return False, reason


async def scrape_until_cancelled(scraper: Scraper) -> None:
    """Run a scraper as a background task; cancellation ends it quietly."""
    with contextlib.suppress(asyncio.CancelledError):
        await scraper.run()
