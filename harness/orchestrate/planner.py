"""The deployment planner: GPU preset x max_num_seqs x tensor parallel x replicas, searched on
the simulator's virtual clock, ranked by cost, before anything is deployed.

Theory of operation
-------------------
For every configuration (GPU, max_num_seqs, tensor parallel size) that fits the model:

1. its capacity per replica: the capacity search (`harness.analysis.capacity`, the same search
   and the same verdict on the steady part as `harness capacity`) with every probe a virtual
   run of the scenario (`virtual_capacity`), arrivals and lengths from the scenario's plan
   (traces and length files included);
2. replicas: enough that each runs at most (1 - headroom) of that capacity at the target load;
3. the operating point: one more virtual run at the load each replica then takes (target /
   replicas), whose steady part gives the margin and the binding SLO there.

Configurations that meet every SLO are ranked by cost per hour (replicas x tensor parallel x
the GPU's price), then by GPUs; each carries what its GPU preset was validated against
(`GpuPreset.calibration`) so nobody mistakes an uncalibrated roofline for a measurement.
Everything is pure computation: no HTTP, no real time. `verify_top` (the `--verify` flag) runs
the top pick's operating point through the real HTTP path against the simulator.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis import capacity as cap
from harness.analysis.steady import steady_part
from harness.errors import ConfigError
from harness.orchestrate.capacity_answer import unbroken_reason
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.virtual_capacity import (
    MAX_VIRTUAL_PROBE_S,
    VirtualProber,
    measured_duration_s,
    probe_form,
    run_at,
)
from harness.sim.presets import load_presets
from harness.sim.provenance import coefficient_sources
from harness.sim.settings import SimSettings
from harness.sim.validation.errors import margin_for, validation_line

PLAN_TOLERANCE = 0.05  # capacity per replica to within 5 %: replicas are whole numbers anyway
PLAN_MAX_RATE = 1e6  # req/s: the search's top rate per replica
DEFAULT_MAX_REPLICAS = 100  # more than this is not a deployment anyone would choose


@dataclass(frozen=True)
class Config:
    gpu: str
    max_num_seqs: int | None  # None: vLLM's default for the GPU
    tensor_parallel_size: int
    pipeline_parallel_size: int = 1

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def sets(self, model: str | None) -> list[str]:
        out = [
            f'sim.gpu="{self.gpu}"',
            f"sim.tensor_parallel_size={self.tensor_parallel_size}",
            f"sim.pipeline_parallel_size={self.pipeline_parallel_size}",
            "sim.speedup=1.0",
        ]
        if self.max_num_seqs is not None:
            out.append(f"sim.max_num_seqs={self.max_num_seqs}")
        if model is not None:
            out.append(f'sim.model="{model}"')
        return out

    def label(self) -> str:
        seqs = "default" if self.max_num_seqs is None else str(self.max_num_seqs)
        pp = f" pp={self.pipeline_parallel_size}" if self.pipeline_parallel_size > 1 else ""
        return f"{self.gpu} tp={self.tensor_parallel_size}{pp} max_num_seqs={seqs}"


@dataclass
class Option:
    """One configuration's answer."""

    config: Config
    model: str
    calibration: str
    feasible: bool = False
    reason: str = ""  # why it is not feasible
    capacity_requests_per_s: float | None = None  # per replica
    # no virtual probe broke above the capacity (out of probes, or at the search's top rate):
    # it is a lower bound, and the replicas may be more than needed
    capacity_lower_bound: bool = False
    replicas: int | None = None
    gpus: int | None = None
    price_per_gpu_hour: float | None = None
    cost_per_hour: float | None = None
    per_replica_requests_per_s: float | None = None
    binding_slo: str = ""
    margin: float | None = None  # 1 - the binding SLO's value / limit at the operating point
    values: dict[str, float | None] = field(default_factory=dict)
    probes: int = 0
    ignored: tuple[str, ...] = ()
    validation: str = ""  # the GPU class's error on held-out published points (validation)
    capacity_margin: float = 0.0  # capacity per replica divided by 1 + this for the replicas
    capacity_margin_source: str = "no margin"
    # the 80 % interval for the capacity per replica on a publisher not among those it was
    # built from (held-out capacity checks under an SLO, between-publisher spread included)
    capacity_interval: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.config.gpu,
            "max_num_seqs": self.config.max_num_seqs,
            "tensor_parallel_size": self.config.tensor_parallel_size,
            "pipeline_parallel_size": self.config.pipeline_parallel_size,
            "model": self.model,
            "calibration": self.calibration,
            "feasible": self.feasible,
            "reason": self.reason,
            "capacity_requests_per_s": self.capacity_requests_per_s,
            "capacity_lower_bound": self.capacity_lower_bound,
            "replicas": self.replicas,
            "gpus": self.gpus,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "cost_per_hour": self.cost_per_hour,
            "per_replica_requests_per_s": self.per_replica_requests_per_s,
            "binding_slo": self.binding_slo,
            "margin": self.margin,
            "values": self.values,
            "virtual_probes": self.probes,
            "ignored": list(self.ignored),
            "validation": self.validation,
            "capacity_margin": self.capacity_margin,
            "capacity_margin_source": self.capacity_margin_source,
            "capacity_interval": self.capacity_interval,
        }


def calibration_text(gpu: str, preset_file: str | None = None) -> str:
    """What the GPU preset was validated against, or that it was not. Reads the preset alone:
    no model, tensor parallel size or KV cache has to fit for the answer (a 70B model fits no
    single GPU, yet its plan states each GPU's calibration)."""
    preset = load_presets(preset_file).gpu(gpu, preset_file or "presets", "gpu")
    return coefficient_sources(preset)  # which coefficients were fitted on what


def capacity_interval(gpu: str, capacity: float) -> dict[str, Any] | None:
    """The 80 % interval for the capacity per replica on a publisher not among those the
    held-out capacity checks under an SLO in open load came from (between-publisher spread
    included: harness.sim.validation.intervals), or None with too few publishers."""
    from harness.sim.validation import intervals as iv
    from harness.sim.validation.errors import CAPACITY_FIGURE, gpu_class

    band = iv.interval(iv.CAPACITY_SLO, CAPACITY_FIGURE, gpu_class(gpu))
    if band is None:
        return None
    low, high = band.published_range(capacity)
    return {"low": low, "high": high, "n": band.n, "scope": band.scope, "regime": iv.CAPACITY_SLO}


def configs(
    gpus: Sequence[str],
    max_num_seqs: Sequence[int | None],
    tps: Sequence[int],
    pps: Sequence[int] = (1,),
) -> list[Config]:
    return [Config(g, m, t, p) for g, m, t, p in itertools.product(gpus, max_num_seqs, tps, pps)]


def evaluate(
    path: str,
    config: Config,
    slos: Sequence[cap.Slo],
    target_rate: float,
    headroom: float,
    prices: dict[str, float],
    model: str | None = None,
    min_duration_s: float | None = None,
    max_probes: int = cap.DEFAULT_MAX_PROBES,
    max_replicas: int = DEFAULT_MAX_REPLICAS,
    margin: str = "none",
) -> Option:
    """Plan one configuration (module docstring). A model that does not fit gives an option
    that is not feasible, with the reason. `margin` (none, median, worst or a percentage):
    the replicas are sized for the capacity divided by 1 + the GPU class's validated error
    (`harness.sim.validation.errors.margin_for`)."""
    sets = config.sets(model)
    try:
        scn = load_scenario(path, sets)
        settings = SimSettings.from_mapping(scn.sim, path)
    except ConfigError as exc:
        return Option(config, model or "", "", reason=f"{exc.key}: {exc.detail}")
    opt = Option(
        config,
        settings.model,
        calibration_text(settings.gpu, settings.preset_file),
        price_per_gpu_hour=prices.get(config.gpu),
        validation=validation_line(config.gpu),
    )
    opt.capacity_margin, opt.capacity_margin_source = margin_for(config.gpu, margin)
    form = probe_form(scn, virtual=True)
    base = min_duration_s or measured_duration_s(scn)
    prober = VirtualProber(path, sets, slos, cap.ProbeSizer(base, MAX_VIRTUAL_PROBE_S))
    found = cap.search_capacity(
        prober,
        cap.RateSearch(form.start_rate, PLAN_MAX_RATE, PLAN_TOLERANCE, max_probes),
        recheck=False,
    )
    opt.probes = len(found.probes)
    if found.answer is None:
        lowest = min(found.probes, key=lambda p: p.rate) if found.probes else None
        opt.reason = "no rate met the SLOs" + (
            f" (at {lowest.rate:.3g} req/s: {lowest.verdict.reason})" if lowest else ""
        )
        return opt
    capacity = found.answer
    opt.capacity_interval = capacity_interval(config.gpu, capacity)
    opt.capacity_lower_bound = (
        unbroken_reason(capacity, found.search, PLAN_MAX_RATE, found.service_rate_cap) is not None
    )
    n = cap.replicas_needed(target_rate, capacity / (1 + opt.capacity_margin), headroom)
    if n > max_replicas:
        opt.capacity_requests_per_s, opt.replicas = capacity, n
        opt.reason = (
            f"{capacity:.3g} req/s per replica: needs {n} replicas, more than {max_replicas}"
        )
        return opt
    per_replica = target_rate / n
    _, vp = run_at(path, sets, per_replica, prober.sizer.duration_s(per_replica))
    verdict = cap.judge(steady_part(vp.columns, vp.span_ns, vp.measured), slos)
    opt.capacity_requests_per_s, opt.replicas, opt.per_replica_requests_per_s = (
        capacity,
        n,
        per_replica,
    )
    opt.gpus = n * config.gpus_per_replica
    opt.cost_per_hour = (
        None if opt.price_per_gpu_hour is None else opt.gpus * opt.price_per_gpu_hour
    )
    opt.binding_slo, opt.values = verdict.binding, verdict.values
    opt.margin = 1 - verdict.ratios[verdict.binding] if verdict.binding else None
    opt.ignored = vp.ignored
    opt.feasible = verdict.passed
    if not verdict.passed:
        opt.reason = f"at {per_replica:.3g} req/s per replica: {verdict.reason}"
    return opt


def rank(options: Sequence[Option]) -> list[Option]:
    """Feasible options first, by cost per hour (unpriced ones after the priced), then GPUs."""

    def key(o: Option) -> tuple[int, int, float, int]:
        return (
            0 if o.feasible else 1,
            0 if o.cost_per_hour is not None else 1,
            o.cost_per_hour if o.cost_per_hour is not None else math.inf,
            o.gpus or 1_000_000,
        )

    return sorted(options, key=key)


def plan_deployment(
    path: str,
    slos: Sequence[cap.Slo],
    target_rate: float,
    candidates: Sequence[Config],
    headroom: float = cap.DEFAULT_HEADROOM,
    prices: dict[str, float] | None = None,
    model: str | None = None,
    min_duration_s: float | None = None,
    on_option: Callable[[Option], None] | None = None,
    max_replicas: int = DEFAULT_MAX_REPLICAS,
    margin: str = "none",
) -> list[Option]:
    """Every candidate planned and ranked (module docstring). `on_option` sees each as it is done."""
    out = []
    for c in candidates:
        opt = evaluate(
            path,
            c,
            slos,
            target_rate,
            headroom,
            prices or {},
            model,
            min_duration_s,
            max_replicas=max_replicas,
            margin=margin,
        )
        if on_option is not None:
            on_option(opt)
        out.append(opt)
    return rank(out)
