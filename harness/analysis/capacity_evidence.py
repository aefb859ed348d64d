"""What capacity probes say together: `Probe` (one probe's outcome as the search sees it),
the SLO that binds an answer, the server's measured service rate (`service_rate_cap`: a
sustainable rate is never above what a probe that fell behind served), and a change of the
server's speed during one command (`speed_change`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.analysis.capacity_verdict import ERROR_SHARE, NO_REQUESTS, SERVED, STOPPED, Verdict
from harness.analysis.steady import SteadyPart


@dataclass(frozen=True)
class Probe:
    """One probe's outcome as the search sees it."""

    rate: float
    kind: str  # probe | confirm
    verdict: Verdict
    part: SteadyPart
    detail: dict[str, object] = field(
        default_factory=dict
    )  # the prober's own keys (result file...);
    # "suspect": True when the harness itself was late, so what it served says nothing of the server


def binding_slo(at_answer: Sequence[Verdict], failed: Verdict | None) -> str:
    """The SLO that bounds the answer: the one the failing probe above it broke furthest (a
    gateway's error_share jumps from 0 to 15 % across its rate limit while latency stays flat),
    else the one closest to its limit at the answer."""
    if failed is not None and failed.ratios:
        broken = max(failed.ratios, key=lambda k: failed.ratios[k])
        if failed.ratios[broken] > 1:
            return broken
    return at_answer[-1].binding if at_answer else ""


def service_rate_cap(probes: Sequence[Probe]) -> float | None:
    """The highest rate a probe was seen to serve while it fell behind what was offered
    (the server's measured service rate), or None when no probe fell behind. A probe the
    harness itself was late in counts only as `service_evidence` says."""
    best = _fastest_behind(probes)
    return best[1].served_requests_per_s if best is not None else None


def service_rate_probe(probes: Sequence[Probe]) -> Probe | None:
    """The probe whose served rate is `service_rate_cap`: the evidence above an answer that the
    cap, not a failure at the bracket's rate, bounds."""
    best = _fastest_behind(probes)
    return best[0] if best is not None else None


def _fastest_behind(probes: Sequence[Probe]) -> tuple[Probe, SteadyPart] | None:
    behind = [(p, e) for p in probes if (e := service_evidence(p)) is not None]
    return max(behind, key=lambda pe: pe[1].served_requests_per_s) if behind else None


def service_evidence(p: Probe) -> SteadyPart | None:
    """What a probe shows of the server's service rate: its steady part when it fell behind what
    was offered, else None. A probe the harness was late in ("suspect": the client sending late,
    our simulator behind its model) counts only when it fell behind by more than that lateness
    explains (offered rate x the client's p99 lag and the simulator's lost seconds), and then
    with its served rate counted over the time the simulator kept up. Leaving such probes out
    altogether let a starved run answer 22.6 req/s against a server that serves 17: every probe
    of the search was late, so no probe bounded it (a full run of 2026-12-03)."""
    part = p.part
    if part.served_ok or part.requests == 0:
        return None
    if not p.detail.get("suspect"):
        return part
    behind_s = max(detail_number(p, "simulator_behind_s"), 0.0)
    late_s = detail_number(p, "client_lag_ms") / 1e3 + behind_s
    explained = part.offered_requests_per_s * late_s
    if part.served_deficit_requests <= part.served_allowance_requests + explained:
        return None
    window_s = (part.window_ns[1] - part.window_ns[0]) / 1e9
    scale = window_s / max(window_s - behind_s, window_s / 2) if window_s > 0 else 1.0
    return dataclasses.replace(part, served_requests_per_s=part.served_requests_per_s * scale)


SPEED_CHANGE = 1.15  # two runs each resolve a 10 % shortfall (3 sigma): their ratio ~14 %


@dataclass(frozen=True)
class SpeedChange:
    """Two runs of one command that no single server speed explains: `fast`, offered as much
    or more, did `ratio` x better than `slow` on the check `slow` failed. `check` is SERVED (the
    values are served req/s: `slow` fell behind what it was offered) or a latency SLO's name
    (the values are that statistic in ms: `fast` met the limit `slow` broke)."""

    check: str
    fast: int  # index of the run that did better, in the runs as given (their order in time)
    slow: int  # ... and of the one that failed the check
    fast_value: float
    slow_value: float

    @property
    def ratio(self) -> float:
        if self.check == SERVED:
            return self.fast_value / self.slow_value
        return self.slow_value / self.fast_value

    @property
    def slowed(self) -> bool:
        """True when the slower run came later: the server lost speed during the command."""
        return self.slow > self.fast


def speed_change(runs: Sequence[Probe]) -> SpeedChange | None:
    """The largest disagreement about the server's speed among `runs` (in the order they ran),
    when it is at least SPEED_CHANGE, else None. Two kinds, one rule: a run offered as much or
    more than another did SPEED_CHANGE x better on a check the other failed.

    - Served: a run that fell behind (`service_evidence`) served what the server could do then,
      at that load; another offered as much or more that served SPEED_CHANGE x as much means the
      server's speed changed between them (a shared machine, a GPU's clocks, another tenant).
    - A latency SLO: on one server, more load never means less queueing, so a run offered as
      much or more that met a limit another broke, with a figure SPEED_CHANGE x lower, means
      the speed changed, or that the latency at this load varies more than one run resolves (a
      slow server's short run holds a dozen requests, whose p90 is their second slowest). In
      both cases the runs do not agree on which side of the limit that load lies.

    Only runs offered as much count: a server can serve less the further it is overloaded
    (preemptions, an early stop), so a pass below the knee and a collapse far above it are one
    speed. The search and a verification made at different speeds disagree for this reason, not
    because the answer is wrong. A run the harness itself was late in ("suspect") is never the
    slow side of a latency change: its latency may be the harness's own."""
    best: SpeedChange | None = None
    for j, p in enumerate(runs):
        for check, slow_value in _failed_figures(p):
            for i, q in enumerate(runs):
                if q.rate < p.rate:
                    continue
                if check == SERVED:
                    change = SpeedChange(check, i, j, q.part.served_requests_per_s, slow_value)
                else:
                    fast_value = q.verdict.values.get(check)
                    if check in q.verdict.failed_checks or fast_value is None or fast_value <= 0:
                        continue
                    change = SpeedChange(check, i, j, fast_value, slow_value)
                if best is None or change.ratio > best.ratio:
                    best = change
    return best if best is not None and best.ratio >= SPEED_CHANGE else None


def _failed_figures(p: Probe) -> list[tuple[str, float]]:
    """The checks `p` failed that say something of the server's speed, with `p`'s figure for
    each: SERVED with the rate it served while it fell behind, and each latency SLO it broke."""
    out: list[tuple[str, float]] = []
    if (e := service_evidence(p)) is not None and e.served_requests_per_s > 0:
        out.append((SERVED, e.served_requests_per_s))
    if p.detail.get("suspect"):
        return out
    for check in p.verdict.failed_checks:
        value = p.verdict.values.get(check)
        if check not in (SERVED, STOPPED, NO_REQUESTS, ERROR_SHARE) and value is not None:
            out.append((check, value))
    return out


def detail_number(p: Probe, key: str) -> float:
    """A number the probe's runner recorded in its detail (client lag, simulator lateness); 0
    when absent."""
    value = p.detail.get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0
