"""Capacity on the simulator's virtual clock: the same search and the same verdict as
`harness capacity`, with each probe a `virtual_run` instead of a run over HTTP.

It answers in seconds of CPU what the HTTP path answers in minutes of real time, with no
client in the way, which makes it the *known knee* the capacity tests hold the HTTP path to,
and the deployment planner's inner loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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


SESSION_SPANS = 5  # a multi-turn probe lasts at least this many sessions' think time
DEFAULT_START_RATE = (
    1.0  # req/s: the first probe of a scenario with no rate of its own (closed loops)
)


@dataclass(frozen=True)
class ProbeForm:
    """How a scenario runs as a capacity probe, and what that changed: every measured phase gets
    the probe's rate and length. A rate process (constant, poisson, gamma) takes the rate; a
    trace is replayed faster or slower and keeps its own length; a closed loop becomes Poisson
    arrivals (a closed loop's users set no rate); a phase of `requests = N` lasts the probe's
    length instead. Multi-turn sessions: a probe at R requests/s starts R / (turns per session)
    sessions/s, so the rate a probe names is always requests/s. Made by `probe_form`, which
    refuses what cannot run as a probe before anything starts."""

    path: str
    measured: tuple[int, ...]
    traces: dict[int, tuple[float, float, bool]]  # phase -> (own rate, time_scale, rate_scale?)
    closed: tuple[int, ...]  # measured closed loops, run as Poisson arrivals
    counted: tuple[int, ...]  # measured phases of `requests = N`, run for the probe's length
    requests_per_arrival: float  # 1; turns per session where arrivals start sessions
    own_rate: float | None  # the first measured phase's rate in requests/s (None: a closed loop)
    notes: tuple[str, ...]  # what changed, one clause per change (`describe`)
    min_probe_s: float = 0.0  # multi-turn: SESSION_SPANS x a session's think time, else 0

    @property
    def start_rate(self) -> float:
        return DEFAULT_START_RATE if self.own_rate is None else self.own_rate

    def describe(self) -> str:
        """One line: how the scenario runs as probes ("" when it runs as written)."""
        return f"{self.path} as capacity probes: " + "; ".join(self.notes) if self.notes else ""

    def at(self, rate: float, duration_s: float | None) -> Callable[[dict[str, Any]], None]:
        """The change to the scenario document (after --set) that makes it a probe at `rate`
        requests/s, every measured rate phase an equal share of `duration_s` (None: the
        phases keep their own length; a `requests = N` phase then keeps its count)."""

        def adapt(doc: dict[str, Any]) -> None:
            phases = doc["phases"]
            for i in self.measured:
                ph = phases[i]
                if i in self.traces:
                    own, time_scale, by_rate = self.traces[i]
                    if by_rate:
                        ph["arrival"]["rate_scale"] = rate
                    else:
                        ph["arrival"]["time_scale"] = time_scale * own / rate
                    continue
                per_s = rate / self.requests_per_arrival
                if i in self.closed:
                    ph["arrival"] = {"process": "poisson", "rate": per_s}
                    ph.pop("max_concurrency", None)
                else:
                    ph["arrival"]["rate"] = per_s
                if duration_s is not None:
                    ph.pop("requests", None)
                    ph["duration"] = f"{duration_s / len(self.measured):.6g}s"

        return adapt


def probe_form(scn: Scenario, virtual: bool = False) -> ProbeForm:
    """How `scn` runs as capacity probes (`ProbeForm`), or a UsageError naming the file, the
    phase and the fix, before anything starts. `virtual`: the probes run on the virtual clock,
    which cannot run multi-turn sessions."""
    measured = measured_phases(scn)
    traces: dict[int, tuple[float, float, bool]] = {}
    closed: list[int] = []
    counted: list[int] = []
    notes: list[str] = []
    conversation = scn.workload.sources.conversation
    if conversation is not None and virtual:
        raise UsageError(
            f"{scn.path}: workload.conversation: the virtual clock cannot run multi-turn sessions "
            "(their later turns carry the answers' text); run `capacity` against a server "
            "(the simulator over HTTP is the default) instead"
        )
    for i in measured:
        ph = scn.phases[i]
        arrival = ph.arrival
        where = f"phases.{i} ({ph.name})"
        if isinstance(arrival, Trace):
            _refuse_a_burst(scn, where, arrival)
            table = scn.resolved["phases"][i]["arrival"]
            traces[i] = (trace_rate_per_s(arrival), arrival.time_scale, "rate_scale" in table)
            continue
        if isinstance(arrival, Ramp):
            raise UsageError(
                f"{scn.path}: {where}: a ramp moves its rate over the phase, and a capacity probe "
                'holds one rate; give the phase arrival = { process = "poisson", rate = R } (each '
                "probe sets R), or run the ramp with `run`"
            )
        if isinstance(arrival, Closed):
            closed.append(i)
            notes.append(
                f"{where}: the closed loop of {arrival.users} users becomes Poisson arrivals at "
                "each probe's rate (users set no rate)"
                + (", without its max_concurrency" if ph.max_concurrency is not None else "")
            )
        if ph.requests is not None:
            counted.append(i)
            notes.append(f"{where}: requests = {ph.requests} gives way to each probe's length")
    per_arrival, min_probe_s = 1.0, 0.0
    if conversation is not None:
        per_arrival = _turns_per_session(scn)
        think = conversation.think
        mean_think = (think.a_s + think.b_s) / 2 if think.dist == "uniform" else think.a_s
        # a session's later turns come think times after its first: the request rate reaches R
        # only once sessions started that long ago are still sending; probes run several spans
        min_probe_s = SESSION_SPANS * (per_arrival - 1) * mean_think
        notes.append(
            f"multi-turn sessions of {per_arrival:.3g} turns on average (the scenario's plan): a "
            f"probe at R req/s starts R/{per_arrival:.3g} sessions/s"
            + (
                f" and runs at least {min_probe_s:.3g}s ({SESSION_SPANS} sessions' think time)"
                if min_probe_s
                else ""
            )
        )
    first = scn.phases[measured[0]].arrival
    own: float | None
    if isinstance(first, Trace):
        own = trace_rate_per_s(first)
    elif isinstance(first, Constant | Poisson | Gamma):
        own = float(first.rate) * per_arrival
    else:
        own = None
        notes.append(f"first probe at {DEFAULT_START_RATE:g} req/s (--start-rate to change it)")
    return ProbeForm(
        scn.path,
        tuple(measured),
        traces,
        tuple(closed),
        tuple(counted),
        per_arrival,
        own,
        tuple(notes),
        min_probe_s,
    )


def _turns_per_session(scn: Scenario) -> float:
    """Requests per session over the measured phases of the scenario's own plan."""
    from harness.workload.plan import build_plan

    plan = build_plan(scn)
    sessions = requests = 0
    for i in measured_phases(scn):
        pp = plan.phases[i]
        if pp.sessions is not None and pp.sessions.count:
            sessions += pp.sessions.count
            requests += pp.count
    return requests / sessions if sessions else 1.0


def check_rate_scalable(scn: Scenario) -> None:
    """Raise UsageError unless the scenario can run as capacity probes (`probe_form`)."""
    probe_form(scn)


def _refuse_a_burst(scn: Scenario, where: str, trace: Trace) -> None:
    """A trace whose requests all arrive at once (an offline batch) has no rate to scale: a
    probe would replay it at n requests per nanosecond. UsageError naming the phase and the fix."""
    t = trace.rows.offsets_s
    if len(t) and float(t[-1]) - float(t[0]) <= 0.0:
        raise UsageError(
            f"{scn.path}: {where}: all {len(t)} requests of the trace arrive at once, which has "
            "no rate to scale; a capacity search needs a rate-scalable arrival: a trace whose "
            'requests spread over time, or arrival = { process = "poisson", rate = R }'
        )


def trace_rate_per_s(trace: Trace) -> float:
    """A trace window's own request rate as replayed (its time_scale applied): requests over the
    offset of its last one."""
    t = trace.rows.offsets_s
    return len(t) / max(float(t[-1]), 1e-9) if len(t) else 0.0


def start_rate_of(scn: Scenario) -> float:
    """The first probe's rate in requests/s: the first measured phase's as written (a trace: its
    own rate; multi-turn: sessions/s x turns per session), DEFAULT_START_RATE for a closed loop."""
    return probe_form(scn).start_rate


MAX_VIRTUAL_PROBE_S = 3600.0  # a virtual probe never covers more than an hour of model time


DEFAULT_PROBE_S = (
    10.0  # a virtual probe of a scenario with no length of its own (closed loop counts)
)


def measured_duration_s(scn: Scenario) -> float:
    """The scenario's measured phases, in seconds: a phase's `duration`, a rate phase of
    `requests = N` N over its rate; DEFAULT_PROBE_S when that leaves nothing (a closed loop that
    runs for a count)."""
    total = 0.0
    for i in measured_phases(scn):
        ph = scn.phases[i]
        if ph.duration_s is not None:
            total += ph.duration_s
        elif ph.requests is not None and isinstance(ph.arrival, Constant | Poisson | Gamma):
            total += ph.requests / float(ph.arrival.rate)
    return total or DEFAULT_PROBE_S


def run_at(
    path: str, sets: Sequence[str], rate: float, duration_s: float | None
) -> tuple[Scenario, VirtualProbe]:
    """One virtual run of the scenario (with `sets`) at `rate` for `duration_s` in all over its
    measured phases (`ProbeForm.at`)."""
    form = probe_form(load_scenario(path, list(sets)), virtual=True)
    scn = load_scenario(path, list(sets), adapt=form.at(rate, duration_s))
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
    form = probe_form(scn, virtual=True)
    base = min_duration_s or measured_duration_s(scn)
    prober = VirtualProber(
        path, sets, cap.with_error_share(slos), cap.ProbeSizer(base, MAX_VIRTUAL_PROBE_S)
    )
    search = cap.RateSearch(start_rate or form.start_rate, max_rate, tolerance, max_probes)
    return cap.search_capacity(prober, search, recheck=False)  # deterministic: no re-runs
