"""A scenario's plain sections, parsed from validated tables: `--set` overrides, `[target]`,
`[slo]` and `[retry]`.

These are plain data that need nothing of the workload. The scenario as a whole (phases with
arrival processes, length distributions, prompt sources) is interpreted by
`harness.workload.scenario`, which calls the parsers here; `config` never imports `workload`.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from harness.catalogue import METRICS_WITH_PERCENTILES, PER_REQUEST_SLOS, STATS, SloLimit
from harness.config.bounded import check_nesting, nesting_message
from harness.config.validate import Table
from harness.errors import UsageError

ENDPOINTS = ("chat", "completions", "responses", "embeddings")
RETRY_ON_WORDS = ("connect", "stream_cut", "timeout")


@dataclass(frozen=True, slots=True)
class TargetOverrides:
    url: str | None = None
    model: str | None = None
    endpoint: str | None = None
    api_key_env: str | None = None


DEFAULT_RETRY_BACKOFF_S = 0.5  # first wait without a Retry-After; doubles per retry
DEFAULT_RETRY_MAX_WAIT_S = 30.0  # no wait (backoff or Retry-After) is longer than this


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`[retry]`: which failures are sent again (`on`), how often (`max`), and how long to wait:
    the server's Retry-After, else exponential backoff with jitter from `backoff_s`, both capped
    at `max_wait_s` (harness.client.retry)."""

    on: tuple[str, ...] = ()
    max: int = 0
    backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    max_wait_s: float = DEFAULT_RETRY_MAX_WAIT_S


def parse_set_value(text: str) -> Any:
    """A --set value as TOML would read it (5, 2.5, true, "x", [1, 2]); bare words stay strings."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        raise UsageError(f"--set: a value with {nesting_message()}") from None
    check_nesting(value, "--set")
    return value


def apply_overrides(doc: dict[str, Any], sets: list[str]) -> set[str]:
    """Apply `KEY=VALUE` overrides by dotted path (list items by index). Returns the paths set.

    Raises UsageError for malformed items or paths that cannot exist (an index past the end,
    a key under a non-table). Unknown key *names* are caught by validation afterwards.
    """
    paths: set[str] = set()
    for item in sets:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise UsageError(
                f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. phases.0.duration=5s"
            )
        parts = key.split(".")
        node: Any = doc
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise UsageError(
                        f"--set {key}: {'.'.join(parts[:i]) or 'document'} has "
                        f"{len(node)} items; {part!r} is not an index 0..{len(node) - 1}"
                    )
                if last:
                    node[int(part)] = parse_set_value(value)
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = parse_set_value(value)
                else:
                    node = node.setdefault(part, {})
            else:
                raise UsageError(f"--set {key}: {'.'.join(parts[:i])} is a value, not a table")
        paths.add(key)
    return paths


def parse_slo(t: Table) -> tuple[SloLimit, ...]:
    out: list[SloLimit] = []
    allowed = [f"{m}_{s}" for m in METRICS_WITH_PERCENTILES for s in STATS] + list(PER_REQUEST_SLOS)
    for name in list(t.data):
        if name in PER_REQUEST_SLOS:
            metric, stat = name, None
        else:
            metric, _, stat = name.rpartition("_")
            if metric not in METRICS_WITH_PERCENTILES or stat not in STATS:
                close = difflib.get_close_matches(name, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                t.fail(
                    name,
                    f"unknown SLO{hint}; use <metric>_<stat> with metric in "
                    f"{', '.join(METRICS_WITH_PERCENTILES)} and stat in {', '.join(STATS)}, "
                    f"or a per-request limit: {', '.join(PER_REQUEST_SLOS)}",
                )
        out.append(SloLimit(name, metric, stat, t.duration_s(name, allow_zero=False)))
    return tuple(out)


def parse_target(tt: Table | None) -> TargetOverrides:
    """`[target]`: url, model, endpoint, api_key_env (all optional)."""
    if tt is None:
        return TargetOverrides()
    target = TargetOverrides(
        url=tt.url("url", None),
        model=tt.str("model", None),
        endpoint=tt.str("endpoint", None, choices=ENDPOINTS),
        api_key_env=tt.str("api_key_env", None),
    )
    if target.api_key_env is not None and not re.fullmatch(
        r"[A-Za-z_][A-Za-z0-9_]*", target.api_key_env
    ):
        tt.fail(
            "api_key_env",
            f"expected the name of an environment variable (letters, digits, '_'), "
            f'such as "TAOTOKEN_API_KEY", got {target.api_key_env!r}',
        )
    tt.finish()
    return target


def parse_retry(rt: Table | None) -> RetryPolicy:
    """`[retry]`: on, max, backoff, max_wait."""
    if rt is None:
        return RetryPolicy()
    on = rt.list("on", [])
    for v in on:
        if not (isinstance(v, str) and (v.isdigit() or v in RETRY_ON_WORDS)):
            rt.fail(
                "on",
                f'expected HTTP codes as strings ("429") or connect, stream_cut, timeout; got {v!r}',
            )
    retry = RetryPolicy(
        tuple(on),
        rt.int("max", 1, min=0, max=10),
        rt.duration_s("backoff", DEFAULT_RETRY_BACKOFF_S, allow_zero=True),
        rt.duration_s("max_wait", DEFAULT_RETRY_MAX_WAIT_S, allow_zero=True),
    )
    rt.finish()
    return retry


__all__ = [
    "DEFAULT_RETRY_BACKOFF_S",
    "DEFAULT_RETRY_MAX_WAIT_S",
    "ENDPOINTS",
    "METRICS_WITH_PERCENTILES",
    "PER_REQUEST_SLOS",
    "STATS",
    "RetryPolicy",
    "SloLimit",
    "TargetOverrides",
    "apply_overrides",
    "parse_retry",
    "parse_set_value",
    "parse_slo",
    "parse_target",
]
