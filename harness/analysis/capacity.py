"""Capacity planning, the pure part: SLOs, the verdict on a probe's steady part, the rate
search, the service-rate cap and replica counts. `harness.commands.capacity` runs probes over
HTTP and `harness.orchestrate.virtual_capacity` on the simulator's virtual clock; everything
here is testable without a server.

Theory of operation
-------------------
`RateSearch` holds the highest rate that met every SLO (`lo`) and the lowest that did not
(`hi`). Without a failure yet it doubles the rate; once both exist it bisects geometrically
(sqrt(lo * hi)) until hi / lo - 1 <= the tolerance, or the probe budget runs out. The answer
is then confirmed by longer runs at `lo`; a failed confirmation makes it the new `hi` and the
search goes on below it. Before that, a failure at `hi` far worse than `lo` measured
(`outlier_failure`) is run again: the evidence the answer cites is a failure seen twice. When
the second run passes, a third decides (two passes of three: an outlier, and the search goes on
above it; two failures: the failure stands). A single pass never outvotes a failure: a noisy
tail that fails most runs would otherwise be searched past. Every run, probe or confirmation, counts against one budget of
SEARCH_BUDGET_FACTOR x --max-probes; a search that would need more gives up without an answer.

A probe passes (`judge`) when, over its steady part (`harness.analysis.steady`: after the
fill-up), the server served what was offered and every SLO held: latency percentiles and the
error share. A probe stopped early as a runaway queue (`harness.analysis.runaway`) fails.
A sustainable rate is never above what the server was seen to serve when it could not keep
up: `service_rate_cap` returns the highest rate served by a probe that fell behind, and the
answer is capped there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.steady import SteadyPart, min_probe_duration_s
from harness.catalogue import METRICS_WITH_PERCENTILES, STATS
from harness.errors import UsageError
from harness.units import parse_duration_s, parse_percent, parse_rate_per_s

DEFAULT_TOLERANCE = 0.05  # stop bisecting when hi/lo - 1 is at most this
DEFAULT_MAX_PROBES = 20  # doubling from 1 to 1000 req/s, then bisecting to 5 %: ~15
DEFAULT_HEADROOM = 0.2  # plan replicas to run at most 80 % of their capacity
DEFAULT_ERROR_SHARE = 0.01  # the error_share SLO when none is given: 1 % of requests
SEARCH_BUDGET_FACTOR = (
    3  # runs in all (probes, confirmations, re-searches): at most 3x --max-probes
)
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


@dataclass
class RateSearch:
    start_rate: float
    max_rate: float
    tolerance: float = DEFAULT_TOLERANCE
    max_probes: int = DEFAULT_MAX_PROBES
    lo: float | None = None  # highest rate that passed
    hi: float | None = None  # lowest rate that failed
    probes: int = 0
    history: list[tuple[float, bool]] = field(default_factory=list)

    def record(self, rate: float, passed: bool) -> None:
        self.probes += 1
        self.history.append((rate, passed))
        if passed:
            if self.hi is None or rate < self.hi:  # a noisy pass above a failure is not trusted
                self.lo = rate if self.lo is None else max(self.lo, rate)
        else:
            self.hi = rate if self.hi is None else min(self.hi, rate)
            if self.lo is not None and self.lo >= self.hi:
                below = [r for r, p in self.history if p and r < self.hi]
                self.lo = max(below) if below else None

    def retract_failure(self, rate: float) -> None:
        """Forget the failures recorded at `rate` (an outlier that passed when run again)."""
        self.history = [(r, p) for r, p in self.history if p or r != rate]
        fails = [r for r, p in self.history if not p]
        self.hi = min(fails) if fails else None
        passes = [r for r, p in self.history if p and (self.hi is None or r < self.hi)]
        self.lo = max(passes) if passes else None

    def reject_above(self, rate: float) -> None:
        """Count every rate above `rate` as failed (it is above what the server can serve),
        without spending a probe on it."""
        self.max_rate = min(self.max_rate, rate)
        above = [r for r, p in self.history if r > rate]
        if above:
            self.hi = min(above) if self.hi is None else min(self.hi, min(above))
        below = [r for r, p in self.history if p and r <= rate and (self.hi is None or r < self.hi)]
        self.lo = max(below) if below else None

    def converged(self) -> bool:
        return (
            self.lo is not None and self.hi is not None and self.hi / self.lo - 1 <= self.tolerance
        )

    def next_rate(self) -> float | None:
        """The next rate to probe, or None when done (converged, out of probes, or at a bound)."""
        if self.probes >= self.max_probes or self.converged():
            return None
        if self.hi is None:
            if self.lo is None:
                return self.start_rate if self.probes == 0 else None
            nxt = min(self.lo * 2, self.max_rate)
            return None if nxt <= self.lo else nxt
        if self.lo is None:
            nxt = min(self.hi / 4, self.max_rate)
            return nxt if nxt >= self.start_rate / 1024 else None
        nxt = min(math.sqrt(self.lo * self.hi), self.max_rate)
        return None if nxt <= self.lo else nxt


@dataclass
class ProbeSizer:
    """How long each probe runs: at least `base_s`, and long enough for its steady part to be
    judged (`min_probe_duration_s`), from the E2E of the highest-rate probe that passed (or
    the first probe, before any passed); at most `max_s`."""

    base_s: float
    max_s: float
    e2e_p99_s: float | None = None
    e2e_mean_s: float | None = None
    arrival_cv2: float = 1.0
    _ref_rate: float = -1.0

    def duration_s(self, rate: float) -> float:
        if self.e2e_p99_s is None or self.e2e_mean_s is None:
            return self.base_s
        need = min_probe_duration_s(rate, self.e2e_p99_s, self.e2e_mean_s, self.arrival_cv2)
        return min(max(self.base_s, need), self.max_s)

    def observe(self, rate: float, part: SteadyPart, passed: bool) -> None:
        e2e = part.latency_ms["e2e"]
        if e2e["p99"] is None or e2e["mean"] is None:
            return
        if (passed and rate > self._ref_rate) or self.e2e_p99_s is None:
            self.e2e_p99_s, self.e2e_mean_s = e2e["p99"] / 1e3, e2e["mean"] / 1e3
            self.arrival_cv2 = part.arrival_cv2
            self._ref_rate = rate if passed else -1.0


def replicas_needed(
    target_rate: float, capacity_rate: float, headroom: float = DEFAULT_HEADROOM
) -> int:
    """Replicas so that each runs at most (1 - headroom) of its measured capacity."""
    if capacity_rate <= 0:
        raise ValueError("capacity must be > 0")
    return max(1, math.ceil(target_rate / (capacity_rate * (1 - headroom)) - 1e-9))


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


ProbeFn = Callable[[float, str], Probe]

OUTLIER_FACTOR = 2.0  # a failure this many times its passing neighbour's figure is run again


def outlier_failure(probes: Sequence[Probe], lo: float, hi: float) -> Probe | None:
    """The failing probe at `hi` when it looks like an outlier: within the final bracket (a
    few percent above `lo`), the SLO it broke furthest is more than OUTLIER_FACTOR times what the
    passing probe at `lo` measured (TTFT p99 1,214 ms at 25.8 req/s against 131 ms at 25.77: no
    knee is that steep). None when it is no outlier or was already run again."""
    at_hi = [p for p in probes if p.rate == hi]
    if not at_hi or at_hi[-1].verdict.passed or any(p.kind == "recheck" for p in at_hi):
        return None
    failed = at_hi[-1].verdict
    passed = [p.verdict for p in probes if p.rate == lo and p.verdict.passed]
    broken = [k for k, r in failed.ratios.items() if r > 1]
    if not passed or not broken:
        return None
    worst = max(broken, key=lambda k: failed.ratios[k])
    below = passed[-1].ratios.get(worst)
    if below is None or not math.isfinite(failed.ratios[worst]):
        return None
    return at_hi[-1] if failed.ratios[worst] > OUTLIER_FACTOR * max(below, 1e-12) else None


@dataclass
class SearchResult:
    answer: float | None
    search: RateSearch
    probes: list[Probe]
    service_rate_cap: float | None  # requests/s served by the best probe that fell behind
    notes: list[str] = field(default_factory=list)


def search_capacity(
    probe: ProbeFn, search: RateSearch, confirm_runs: int = 0, recheck: bool = True
) -> SearchResult:
    """Drive the search with `probe(rate, kind)` until it converges, then confirm the answer
    `confirm_runs` times. An answer above the measured service rate (`service_rate_cap`) or a
    failed confirmation counts as a failure at that rate, and the search goes on below it, with
    at least `extra` more probes. Every call of `probe` counts against the budget
    (SEARCH_BUDGET_FACTOR x the search's max_probes as given); when the search, or the
    confirmation of its answer, would need more, it gives up and the answer is None. `recheck`:
    run an outlier failure again before citing it (`outlier_failure`; off where runs are
    deterministic, on the virtual clock)."""
    probes: list[Probe] = []
    notes: list[str] = []
    extra = max(search.max_probes // 2, 1)
    budget = SEARCH_BUDGET_FACTOR * search.max_probes

    def run(rate: float, kind: str) -> bool:
        p = probe(rate, kind)
        probes.append(p)
        return p.verdict.passed

    answer: float | None = None
    while True:
        rate = search.next_rate()
        while rate is not None and len(probes) < budget:
            search.record(rate, run(rate, "probe"))
            rate = search.next_rate()
        answer = search.lo
        if rate is not None or (answer is not None and len(probes) + confirm_runs > budget):
            notes.append(
                f"gave up after {len(probes)} runs (probes and confirmations; the budget is "
                f"{SEARCH_BUDGET_FACTOR} x --max-probes = {budget}) without a confirmed answer"
            )
            answer = None
            break
        if answer is None:
            break
        cap = service_rate_cap(probes)
        if cap is not None and answer > cap:
            notes.append(
                f"{answer:.4g} req/s passed but is above the {cap:.4g} req/s the server served when it "
                "fell behind: searching below it"
            )
            search.reject_above(cap)
            search.max_probes = max(search.max_probes, search.probes + extra)
            answer = None
            continue
        suspect = (
            outlier_failure(probes, answer, search.hi)
            if recheck and search.hi is not None
            else None
        )
        if suspect is not None and len(probes) < budget:
            if run(suspect.rate, "recheck") and (
                len(probes) < budget and run(suspect.rate, "recheck")
            ):
                notes.append(
                    f"{suspect.rate:.4g} req/s failed ({suspect.verdict.reason}) far beyond what "
                    f"{answer:.4g} req/s measured, and passed both times when run again: an "
                    "outlier, searching above it"
                )
                search.retract_failure(suspect.rate)
                search.record(suspect.rate, True)
                search.max_probes = max(search.max_probes, search.probes + extra)
                answer = None
                continue
            again = [p for p in probes if p.rate == suspect.rate and p.kind == "recheck"]
            notes.append(
                f"{suspect.rate:.4g} req/s failed far beyond what {answer:.4g} req/s measured, and "
                + (
                    "failed again when run again"
                    if len(again) == 1
                    else f"failed {sum(not p.verdict.passed for p in again) + 1} of "
                    f"{len(again) + 1} runs"
                )
            )
        if confirm_runs == 0:
            break
        if all(run(answer, "confirm") for _ in range(confirm_runs)):
            break
        notes.append(f"{answer:.4g} req/s failed its confirmation: searching below it")
        search.record(answer, False)
        search.max_probes = max(search.max_probes, search.probes + extra)
        answer = None
    return SearchResult(
        answer,
        search,
        probes,
        service_rate_cap(probes),
        notes,
    )
