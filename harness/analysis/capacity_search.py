"""The capacity search itself (harness.analysis.capacity's theory of operation): `RateSearch`
(the bracket: double, then bisect geometrically), `ProbeSizer` (how long each probe runs),
`outlier_failure`, and `search_capacity`, which drives a probe function through them, confirms
the answer and caps it at the measured service rate. Pure: the probe function is the caller's
(over HTTP: harness.orchestrate.capacity; on the virtual clock: virtual_capacity)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harness.analysis.capacity_evidence import Probe, service_rate_cap
from harness.analysis.steady import SteadyPart, min_probe_duration_s

DEFAULT_TOLERANCE = 0.05  # stop bisecting when hi/lo - 1 is at most this
DEFAULT_MAX_PROBES = 20  # doubling from 1 to 1000 req/s, then bisecting to 5 %: ~15
DEFAULT_HEADROOM = 0.2  # plan replicas to run at most 80 % of their capacity
SEARCH_BUDGET_FACTOR = (
    3  # runs in all (probes, confirmations, re-searches): at most 3x --max-probes
)


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
    driver = _Driver(probe, search, confirm_runs, recheck)
    answer = driver.drive()
    return SearchResult(
        answer,
        search,
        driver.probes,
        service_rate_cap(driver.probes),
        driver.notes,
    )


class _Driver:
    """`search_capacity` under way: the runs made so far (one budget for all) and its notes."""

    def __init__(
        self, probe: ProbeFn, search: RateSearch, confirm_runs: int, recheck: bool
    ) -> None:
        self.probe, self.search, self.confirm_runs, self.recheck = (
            probe,
            search,
            confirm_runs,
            recheck,
        )
        self.probes: list[Probe] = []
        self.notes: list[str] = []
        self.extra = max(search.max_probes // 2, 1)
        self.budget = SEARCH_BUDGET_FACTOR * search.max_probes

    def run(self, rate: float, kind: str) -> bool:
        p = self.probe(rate, kind)
        self.probes.append(p)
        return p.verdict.passed

    def drive(self) -> float | None:
        """The answer: converged, not above the service rate, its bracket's failure no outlier,
        confirmed; None when no rate passed or the budget ran out."""
        search = self.search
        while True:
            rate = search.next_rate()
            while rate is not None and len(self.probes) < self.budget:
                search.record(rate, self.run(rate, "probe"))
                rate = search.next_rate()
            answer = search.lo
            if rate is not None or (
                answer is not None and len(self.probes) + self.confirm_runs > self.budget
            ):
                self.notes.append(
                    f"gave up after {len(self.probes)} runs (probes and confirmations; the budget is "
                    f"{SEARCH_BUDGET_FACTOR} x --max-probes = {self.budget}) without a confirmed answer"
                )
                return None
            if answer is None:
                return None
            if self._above_service_rate(answer) or self._outlier_passed(answer):
                continue
            if self.confirm_runs == 0 or self._confirmed(answer):
                return answer

    def _search_on(self) -> None:
        """More probes for the search that goes on."""
        self.search.max_probes = max(self.search.max_probes, self.search.probes + self.extra)

    def _above_service_rate(self, answer: float) -> bool:
        """True when the answer is above the rate the server served when it fell behind: every
        rate above that counts as failed and the search goes on below it."""
        cap = service_rate_cap(self.probes)
        if cap is None or answer <= cap:
            return False
        self.notes.append(
            f"{answer:.4g} req/s passed but is above the {cap:.4g} req/s the server served when it "
            "fell behind: searching below it"
        )
        self.search.reject_above(cap)
        self._search_on()
        return True

    def _outlier_passed(self, answer: float) -> bool:
        """An outlier failure at the bracket's top run again (`outlier_failure`): True when it
        passed both times (the failure is retracted and the search goes on above it)."""
        search, budget = self.search, self.budget
        suspect = (
            outlier_failure(self.probes, answer, search.hi)
            if self.recheck and search.hi is not None
            else None
        )
        if suspect is None or len(self.probes) >= budget:
            return False
        if self.run(suspect.rate, "recheck") and (
            len(self.probes) < budget and self.run(suspect.rate, "recheck")
        ):
            self.notes.append(
                f"{suspect.rate:.4g} req/s failed ({suspect.verdict.reason}) far beyond what "
                f"{answer:.4g} req/s measured, and passed both times when run again: an "
                "outlier, searching above it"
            )
            search.retract_failure(suspect.rate)
            search.record(suspect.rate, True)
            self._search_on()
            return True
        again = [p for p in self.probes if p.rate == suspect.rate and p.kind == "recheck"]
        self.notes.append(
            f"{suspect.rate:.4g} req/s failed far beyond what {answer:.4g} req/s measured, and "
            + (
                "failed again when run again"
                if len(again) == 1
                else f"failed {sum(not p.verdict.passed for p in again) + 1} of "
                f"{len(again) + 1} runs"
            )
        )
        return False

    def _confirmed(self, answer: float) -> bool:
        """`confirm_runs` runs at the answer; one failure makes it a failure and the search goes
        on below it."""
        if all(self.run(answer, "confirm") for _ in range(self.confirm_runs)):
            return True
        self.notes.append(f"{answer:.4g} req/s failed its confirmation: searching below it")
        self.search.record(answer, False)
        self._search_on()
        return False
