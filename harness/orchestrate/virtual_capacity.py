"""Capacity on the simulator's virtual clock: the same search and the same verdict as
`harness capacity`, with each probe a `virtual_run` instead of a run over HTTP.

It answers in seconds of CPU what the HTTP path answers in minutes of real time, with no
client in the way, which makes it the *known knee* the capacity tests hold the HTTP path to,
and the deployment planner's inner loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis import capacity as cap
from harness.analysis.steady import steady_part
from harness.errors import UsageError
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.virtual_probe import VirtualProbe, virtual_run
from harness.sim.settings import SimSettings
from harness.workload.arrivals import Closed, Constant, Gamma, Poisson, Ramp, Trace
from harness.workload.scenario import Scenario


def measured_phases(scn: Scenario) -> list[int]:
    return [i for i, ph in enumerate(scn.phases) if not ph.warmup]


def check_rate_scalable(scn: Scenario) -> None:
    """Raise UsageError unless every measured phase's load can be set to a rate: an open-loop
    process with a rate (constant, poisson, gamma) or a trace (replayed faster or slower)."""
    for i in measured_phases(scn):
        arrival = scn.phases[i].arrival
        if isinstance(arrival, Closed | Ramp) or not (
            isinstance(arrival, Trace) or hasattr(arrival, "rate")
        ):
            raise UsageError(
                f"{scn.path}: phases.{i}.arrival is {arrival}; capacity needs an open-loop process "
                "with a rate (constant, poisson, gamma) or a trace"
            )


def trace_rate_per_s(trace: Trace) -> float:
    """A trace window's own request rate as replayed (its time_scale applied): requests over the
    offset of its last one."""
    t = trace.rows.offsets_s
    return len(t) / max(float(t[-1]), 1e-9) if len(t) else 0.0


def rate_sets(scn: Scenario, rate: float, duration_s: float | None) -> list[str]:
    """`--set` overrides that run every measured phase at `rate` requests/s: a rate process gets
    the rate and, when `duration_s` is given, an equal share of it (the measured phases then
    last `duration_s` in all); a trace is replayed faster or slower (time_scale) and keeps its
    own length."""
    sets: list[str] = []
    measured = measured_phases(scn)
    for i in measured:
        arrival = scn.phases[i].arrival
        if isinstance(arrival, Trace):
            table = scn.resolved["phases"][i]["arrival"]
            if "rate_scale" in table:
                sets.append(f"phases.{i}.arrival.rate_scale={rate!r}")
            else:
                scale = arrival.time_scale * trace_rate_per_s(arrival) / rate
                sets.append(f"phases.{i}.arrival.time_scale={scale!r}")
            continue
        sets.append(f"phases.{i}.arrival.rate={rate!r}")
        if duration_s is not None:
            sets.append(f'phases.{i}.duration="{duration_s / len(measured):.6g}s"')
    return sets


def start_rate_of(scn: Scenario) -> float:
    """The rate of the first measured phase as written (a trace: its own rate)."""
    arrival = scn.phases[measured_phases(scn)[0]].arrival
    if isinstance(arrival, Trace):
        return trace_rate_per_s(arrival)
    if isinstance(arrival, Constant | Poisson | Gamma):
        return float(arrival.rate)
    raise TypeError(f"{arrival} has no rate (check_rate_scalable first)")


MAX_VIRTUAL_PROBE_S = 3600.0  # a virtual probe never covers more than an hour of model time


def measured_duration_s(scn: Scenario) -> float:
    """The scenario's measured phases, in seconds (a trace phase: its planned length)."""
    return sum(scn.phases[i].duration_s or 0.0 for i in measured_phases(scn))


def run_at(
    path: str, sets: Sequence[str], rate: float, duration_s: float | None
) -> tuple[Scenario, VirtualProbe]:
    """One virtual run of the scenario (with `sets`) at `rate` for `duration_s` per measured phase."""
    scn = load_scenario(path, list(sets))
    scn = load_scenario(path, list(sets) + rate_sets(scn, rate, duration_s))
    resolved = SimSettings.from_mapping(scn.sim, path).resolved()
    return scn, virtual_run(scn, resolved)


@dataclass
class VirtualProber:
    """`probe(rate, kind)` for `cap.search_capacity`: one virtual run of the scenario (with its
    `--set` overrides) at `rate`, judged on its steady part; each probe as long as `sizer` says
    (at least the scenario's own length)."""

    path: str
    sets: Sequence[str]
    slos: Sequence[cap.Slo]
    sizer: cap.ProbeSizer

    def __call__(self, rate: float, kind: str) -> cap.Probe:
        duration = self.sizer.duration_s(rate)
        for attempt in range(cap.LONGER_RETRIES + 1):
            _, vp = run_at(self.path, self.sets, rate, duration)
            part = steady_part(vp.columns, vp.span_ns, vp.measured)
            verdict = cap.judge(part, self.slos)
            if (
                attempt == cap.LONGER_RETRIES
                or duration >= self.sizer.max_s
                or not cap.worth_a_longer_run(verdict, part)
            ):
                break
            duration = min(2 * duration, self.sizer.max_s)
        self.sizer.observe(rate, part, verdict.passed)
        return cap.Probe(rate, kind, verdict, part, {"steps": vp.steps, "duration_s": duration})


def virtual_capacity(
    path: str,
    slos: Sequence[cap.Slo],
    sets: Sequence[str] = (),
    min_duration_s: float | None = None,
    start_rate: float | None = None,
    max_rate: float = 100_000.0,
    tolerance: float = cap.DEFAULT_TOLERANCE,
    max_probes: int = cap.DEFAULT_MAX_PROBES,
) -> cap.SearchResult:
    """The highest rate meeting `slos` on the simulator the scenario describes (`[sim]` and
    `sets`), on the virtual clock. Each probe runs at least `min_duration_s` (default: the
    scenario's measured phases), longer where its steady part needs it (`cap.ProbeSizer`).
    No confirmation runs: a virtual run is deterministic."""
    scn = load_scenario(path, list(sets))
    check_rate_scalable(scn)
    base = min_duration_s or measured_duration_s(scn)
    prober = VirtualProber(
        path, sets, cap.with_error_share(slos), cap.ProbeSizer(base, MAX_VIRTUAL_PROBE_S)
    )
    search = cap.RateSearch(start_rate or start_rate_of(scn), max_rate, tolerance, max_probes)
    return cap.search_capacity(prober, search)
