"""Capacity SLOs and the verdict on one probe: `Slo` and its parsing (`parse_slo`, the default
error-share SLO), and `judge`, which passes a probe's steady part when the server served what
was offered and every SLO held (harness.analysis.capacity's theory of operation)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.analysis.steady import SteadyPart
from harness.catalogue import METRICS_WITH_PERCENTILES, STATS, SloLimit
from harness.errors import UsageError
from harness.units import parse_duration_s, parse_percent, parse_rate_per_s

DEFAULT_ERROR_SHARE = 0.01  # the error_share SLO when none is given: 1 % of requests
ERROR_SHARE = "error_share"  # the SLO on failed or unsent requests, a share of the steady ones


@dataclass(frozen=True, slots=True)
class Slo:
    """One limit: a latency percentile (`limit_ms`) or the error share (`limit_share`)."""

    name: str  # e.g. ttft_p99, error_share
    metric: str  # a latency metric, or "error_share"
    stat: str  # p99, mean, ...; "" for error_share
    limit_ms: float | None = None
    limit_share: float | None = None

    @property
    def is_share(self) -> bool:
        return self.limit_share is not None

    def limit_text(self) -> str:
        return (
            f"{self.limit_share:.2%}" if self.limit_share is not None else f"{self.limit_ms:g} ms"
        )


def error_share_slo(share: float) -> Slo:
    return Slo(ERROR_SHARE, ERROR_SHARE, "", limit_share=share)


def parse_slo(text: str) -> Slo:
    """'ttft_p99=2s' or 'error_share=1%' -> Slo. Raises UsageError naming --slo and what is allowed."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if sep and name == ERROR_SHARE:
        try:
            share = parse_percent(value.strip())
        except ValueError as exc:
            raise UsageError(f"--slo {ERROR_SHARE}: {exc}") from None
        if not 0 <= share < 1:
            raise UsageError(f"--slo {ERROR_SHARE}={value.strip()}: expected 0%..99.9%")
        return error_share_slo(share)
    metric, _, stat = name.rpartition("_")
    if not sep or metric not in METRICS_WITH_PERCENTILES or stat not in STATS:
        raise UsageError(
            f"--slo {text!r}: expected METRIC_STAT=DURATION such as ttft_p99=2s, with METRIC in "
            f"{', '.join(METRICS_WITH_PERCENTILES)} and STAT in {', '.join(STATS)}, "
            f"or {ERROR_SHARE}=PERCENT such as {ERROR_SHARE}=1%"
        )
    try:
        limit = parse_duration_s(value.strip(), allow_zero=False)
    except ValueError as exc:
        raise UsageError(f"--slo {name}: {exc}") from None
    return Slo(name, metric, stat, limit_ms=limit * 1e3)


def with_error_share(slos: Sequence[Slo], default_share: float = DEFAULT_ERROR_SHARE) -> list[Slo]:
    """The SLOs, plus error_share at `default_share` when they do not name it."""
    out = list(slos)
    if not any(s.metric == ERROR_SHARE for s in out):
        out.append(error_share_slo(default_share))
    return out


def slos_from(
    given: Sequence[str],
    scenario_slo: Sequence[SloLimit],
    default_share: float = DEFAULT_ERROR_SHARE,
) -> list[Slo]:
    """`--slo`'s limits (`given`), else the scenario's aggregate [slo] ones, plus error_share
    (`with_error_share`). Raises UsageError when none of them is a latency limit."""
    slos = [parse_slo(s) for s in given] or [
        Slo(s.name, s.metric, s.stat, limit_ms=s.limit_s * 1e3)
        for s in scenario_slo
        if s.stat is not None
    ]
    if not any(not s.is_share for s in slos):
        raise UsageError(
            "give at least one --slo METRIC_STAT=DURATION (e.g. ttft_p99=2s); the scenario has no "
            "aggregate [slo]"
        )
    return with_error_share(slos, default_share)


def parse_target_load(text: str) -> float:
    try:
        return parse_rate_per_s(text)
    except ValueError as exc:
        raise UsageError(f"--target-load: {exc}") from None


STOPPED = "stopped"  # Verdict.failed_checks: the probe was stopped before its end
NO_REQUESTS = "no_requests"  # ... its steady part held no request
SERVED = "served"  # ... it served less than it was offered (beyond the allowance)


@dataclass
class Verdict:
    passed: bool
    values: dict[str, float | None]  # latency SLOs in ms, error_share as a share
    ratios: dict[str, float]  # value / limit: above 1 breaks the SLO
    binding: str  # the SLO closest to (or furthest past) its limit
    reason: str = ""  # every reason it failed, "; "-joined ("" when it passed), for people
    failed_checks: tuple[
        str, ...
    ] = ()  # what it failed, for code: STOPPED, NO_REQUESTS, SERVED, SLO names


def _ratio(value: float | None, limit: float) -> float:
    if value is None:
        return math.inf
    if limit <= 0:
        return 0.0 if value <= 0 else math.inf
    return value / limit


def slo_values(part: SteadyPart, slos: Sequence[Slo]) -> dict[str, float | None]:
    """Each SLO's figure over the steady part: the latency statistic (ms) or the error share."""
    return {
        s.name: part.error_share if s.is_share else part.latency_ms[s.metric][s.stat] for s in slos
    }


def judge(part: SteadyPart, slos: Sequence[Slo], stop_reason: str | None = None) -> Verdict:
    """Did this probe's steady part meet every SLO and serve what was offered? A probe stopped
    before its end (`stop_reason`) fails whatever its figures."""
    values = slo_values(part, slos)
    ratios = {
        s.name: _ratio(
            values[s.name],
            s.limit_share if s.limit_share is not None else s.limit_ms or 0.0,
        )
        for s in slos
    }
    binding = max(ratios, key=lambda k: ratios[k]) if ratios else ""
    reasons = []
    failed: list[str] = []
    if stop_reason:
        failed.append(STOPPED)
        reasons.append(f"stopped: {stop_reason}")
    if part.requests == 0:
        failed.append(NO_REQUESTS)
        reasons.append("no request in the steady part")
    if not part.served_ok:
        failed.append(SERVED)
        reasons.append(
            f"served {part.served_requests_per_s:.3g} req/s of {part.offered_requests_per_s:.3g} "
            f"offered (short by {part.served_deficit_requests:.0f} requests, more than the "
            f"{part.served_allowance_requests:.0f} a stable server shows)"
        )
    for s in slos:
        if ratios[s.name] > 1:
            failed.append(s.name)
            v = values[s.name]
            shown = "none" if v is None else (f"{v:.2%}" if s.is_share else f"{v:.1f} ms")
            reasons.append(f"{s.name} {shown} > {s.limit_text()}")
    return Verdict(not reasons, values, ratios, binding, "; ".join(reasons), tuple(failed))


def client_lag_ms(client: dict[str, Any]) -> float:
    """The client's own lateness from a result's `client` block: the larger of its send lag and
    event-loop lag p99, wall milliseconds (0 where neither was recorded)."""
    return max(
        float((client.get("send_lag_ms") or {}).get("p99") or 0.0),
        float((client.get("loop_lag_ms") or {}).get("p99") or 0.0),
    )


def within_lateness(verdict: Verdict, slos: Sequence[Slo], late_ms: float) -> bool:
    """True when the verdict failed and every check it failed is a latency SLO missed by no more
    than `late_ms`, the harness's own lateness in the probe's time: such a failure may be the
    harness's, not the server's, so it says nothing either way. A served-rate shortfall, an
    error share or a stopped run is never explained so."""
    if verdict.passed or late_ms <= 0 or not verdict.failed_checks:
        return False
    by_name = {s.name: s for s in slos}
    for name in verdict.failed_checks:
        s = by_name.get(name)
        value = verdict.values.get(name)
        if s is None or s.limit_ms is None or value is None or value - s.limit_ms > late_ms:
            return False
    return True


LONGER_RETRIES = 2  # a probe short only of served-vs-offered runs again 2x, then 4x as long
LONGER_MIN_SERVED_SHARE = 0.8  # ... unless it served less than this share: that is no slow fill-up


def worth_a_longer_run(verdict: Verdict, part: SteadyPart) -> bool:
    """True when the probe failed only because it served less than it was offered, by a margin
    a slow approach to the steady state can explain: near the knee the batch keeps growing for
    many E2Es, and a longer probe tells that apart from a queue that grows for good."""
    share = part.served_share
    only_served = verdict.failed_checks == (SERVED,)
    return (
        not verdict.passed
        and only_served
        and share is not None
        and share >= LONGER_MIN_SERVED_SHARE
    )
