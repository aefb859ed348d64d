"""Plan size: how many requests a scenario plans, estimated from the scenario alone, and the
limit above which a plan is refused.

A plan holds every request's intended time and lengths before the first is sent, the journal
holds every request, and the result is built from all of them at once (docs/reliability.md,
"Plan size limit", has the measured cost per request). A typo such as `--rate 1e4 --duration
1h` (36 M requests) would cost gigabytes before the first request; so the scenario's loader
estimates the size before anything is drawn (`check_plan_size`) and refuses a plan above
`max_planned_requests` -- limits.DEFAULT_MAX_PLANNED_REQUESTS unless the scenario raises it -- with a
ConfigError naming the product and the limit. The plan counts again, exactly, as it draws
(`check_drawn`): a gamma process's count and a session's turns are random.

Estimates per phase (each turn of a multi-turn session is a request):

    requests = N                      N (sessions: N x mean turns)
    constant, poisson; duration d     rate x d
    gamma(rate, b); duration d        rate x d + 1/b + 1: Lorden's bound on a renewal count
                                      (a bursty process piles arrivals up in short windows)
    ramp(start, end); duration d      the rate's integral: (start + end) / 2 x d (linear),
                                      (end - start) x d / ln(end / start) (exponential)
    trace                             the rows replayed (the reader stops past the limit)
    closed loop; duration d           none planned: its users send while they get answers; the
                                      lengths drawn ahead are a bounded pool (plan.CLOSED_POOL_MAX)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.errors import ConfigError
from harness.units import MAX_DURATION_S, MAX_DURATION_TEXT
from harness.workload.arrivals import Arrival, Closed, Constant, Gamma, Poisson, Ramp, Trace
from harness.workload.conversation import Conversation
from harness.workload.limits import limit_text


def _count(n: float) -> str:
    return f"{n:,.0f}" if n < 1e15 else f"{n:.3g}"


def expected_arrivals(
    arrival: Arrival, duration_s: float | None, requests: int | None
) -> tuple[float, str, str]:
    """(arrivals, the product they come from as text ("" for a count given as such), the phase
    key that sets them) of an open-loop phase or a closed loop with a count; a closed loop bound
    by a duration plans none (0)."""
    if requests is not None and not isinstance(arrival, Trace):
        return float(requests), "", "requests"
    if isinstance(arrival, Trace):
        t = arrival.rows.offsets_s
        n = len(t)
        if duration_s is not None:
            n = int((t < duration_s).sum())
        if requests is not None:
            n = min(n, requests)
        return float(n), f"the trace {arrival.path} replays {n:,} rows", "arrival.file"
    if isinstance(arrival, Closed) or duration_s is None:
        return 0.0, "", ""
    d = duration_s
    if isinstance(arrival, Constant | Poisson):
        return arrival.rate * d, f"rate {arrival.rate:g}/s x duration {d:g} s", "duration"
    if isinstance(arrival, Gamma):
        extra = 1.0 / arrival.burstiness + 1.0
        return (
            arrival.rate * d + extra,
            f"rate {arrival.rate:g}/s x duration {d:g} s + 1/burstiness + 1 ({extra:.3g}: "
            "a gamma process's bursts)",
            "duration",
        )
    if isinstance(arrival, Ramp):
        a, b = arrival.start, arrival.end
        mean = (a + b) / 2 if arrival.shape == "linear" or a == b else (b - a) / math.log(b / a)
        return mean * d, f"mean rate {mean:g}/s x duration {d:g} s", "duration"
    raise TypeError(f"no size estimate for {arrival!r}")  # a new arrival process needs one


def check_plan_size(
    phases: Sequence[Any],
    conversation: Conversation | None,
    limit: int,
    where: str,
) -> None:
    """Refuse, before anything is drawn, a scenario whose phases plan more than `limit`
    requests, or whose replay runs past MAX_DURATION_S. `phases`: the scenario's Phase objects
    (name, arrival, duration_s, requests). Raises ConfigError naming the product and the limit."""
    turns = conversation.turns.mean_estimate if conversation and conversation.turns else 1.0
    total = 0.0
    parts: list[str] = []
    for i, ph in enumerate(phases):
        n, how, key = expected_arrivals(ph.arrival, ph.duration_s, ph.requests)
        if isinstance(ph.arrival, Trace):
            _check_replay_span(ph, i, where)
        if not n:
            continue
        if conversation is not None:
            how = f"{f'({how})' if how else _count(n)} sessions x {turns:g} turns (mean)"
            n *= turns
        if not n <= limit:  # NaN and inf too
            product = f"{how} = {_count(n)}" if how else _count(n)
            raise ConfigError(
                where, f"phases.{i}.{key}", f"{product} requests, {limit_text(limit)}"
            )
        total += n
        parts.append(_count(n))
    if total > limit:
        raise ConfigError(
            where,
            "phases",
            f"the phases plan {' + '.join(parts)} = {_count(total)} requests, {limit_text(limit)}",
        )


def _check_replay_span(ph: Any, i: int, where: str) -> None:
    """A trace phase without a duration lasts until its last replayed row: at most MAX_DURATION_S."""
    if ph.duration_s is not None:
        return
    t = ph.arrival.rows.offsets_s
    if ph.requests is not None:
        t = t[: ph.requests]
    last = float(t[-1]) if len(t) else 0.0
    if not last <= MAX_DURATION_S:
        raise ConfigError(
            where,
            f"phases.{i}.arrival.file",
            f"the replay of {ph.arrival.path} would last {last:.4g} s (time_scale "
            f"{ph.arrival.time_scale:g}), above {MAX_DURATION_TEXT}; give the phase a duration "
            "or the trace a window (start, duration)",
        )


def check_drawn(total: int, limit: int, where: str, key: str, what: str) -> None:
    """The plan's exact count so far, as it draws (before the lengths): above `limit`, refused."""
    if total > limit:
        raise ConfigError(where, key, f"{what} = {total:,} requests, {limit_text(limit)}")


__all__ = ["check_drawn", "check_plan_size", "expected_arrivals"]
