"""`RunArgs`: what `run`'s command line says (and what a sweep, capacity or the Python API sets
for a run they start). Plain data; `harness.orchestrate.run.measure` reads it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunArgs:
    scenario: str | dict[str, Any]  # a scenario file, or a document in memory (a quick run's)
    target: str | None = None
    model: str | None = None
    endpoint: str | None = None
    out: str | None = None
    sets: list[str] = field(default_factory=list)
    seed: int | None = None
    # a command's own change to the scenario document after `sets` (a capacity probe's rate and
    # length: harness.orchestrate.virtual_capacity.ProbeForm); its errors never name --set
    adapt: Callable[[dict[str, Any]], None] | None = None
    quiet: bool = False
    grace_s: float = 10.0
    probe: bool = True
    settings: str | None = None  # settings.json (default ./settings.json when present)
    config: str | None = None  # config.toml (default ./config.toml when present)
    insecure: bool = False  # skip TLS certificate verification
    api_key_env: str | None = None  # the environment variable holding the key
    explain: bool = False  # print where each target value comes from, then stop
    http_client: str = "auto"  # fast | aiohttp | auto (fast for http://, aiohttp for https://)
    workers: str | None = None  # worker processes: N or "auto" (None: one process)
    ray: str | None = None  # run the shards as Ray tasks: "auto" or a cluster address
    html: str | None = None  # also write the HTML report here
    result_dir: str | None = None  # the results folder (None: config.toml [output] dir, results/)
    save_result: bool = False  # also write vllm bench serve's result JSON beside the result
    save_detailed: bool = False  # ... with its per-request lists
    result_filename: str | None = None  # ... under this name (default: vLLM's)
    brief: bool = False  # print the compact block (report_brief) instead of the full report
    percentile_metrics: tuple[str, ...] | None = None  # vLLM's names; None: its default
    metric_percentiles: tuple[float, ...] | None = None  # None: vLLM's default (99)
    strict_request: bool = False  # refuse to run when the target refuses part of the request shape
    prometheus_port: int | None = (
        None  # serve the client's live metrics on this port (0: any free one)
    )
    prometheus_host: str = "127.0.0.1"  # ... on this address
    prometheus_linger_s: float | None = None  # ... and keep it up this long after (None: default)
    # sweep / capacity --reset-prefix-cache: how the reset before this run went
    # (harness.orchestrate.prefix_reset.OUTCOMES); the result's options.prefix_cache_reset
    prefix_cache_reset: str | None = None
    slo_exit: bool = False  # exit SLO_FAIL_EXIT on a missed SLO (run's default; not a sweep's)
