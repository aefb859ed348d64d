"""Scenario shapes for the capacity tests, and helpers that run them on the simulator's virtual
clock: its service rate (what it serves when overloaded) and the series a live monitor would
have sampled."""

from __future__ import annotations

from pathlib import Path

from harness.analysis import runaway as rw
from harness.analysis.steady import SteadyPart, steady_part
from harness.orchestrate.virtual_capacity import run_at
from harness.orchestrate.virtual_probe import VirtualProbe

# The GPU presets as these shapes were tuned on (the datasheet coefficients before the fit on
# published measurements, issue 23): the shapes test the capacity search and the runaway
# detector, not the simulator's fit, and keep what they test when that fit moves.
DATASHEET_GPUS = Path(__file__).parent / "data" / "datasheet_gpus.toml"

TEMPLATE = (
    '''
name = "{name}"
seed = {seed}
[workload]
prompt_tokens = {prompt}
output_tokens = {output}
ignore_eos = true
[[phases]]
name = "main"
duration = "{duration_s}s"
arrival = {arrival}
[sim]
preset_file = "'''
    + str(DATASHEET_GPUS)
    + '"\n{sim}\n'
)

POISSON = '{ process = "poisson", rate = 1.0 }'
SHAPES: dict[str, dict[str, object]] = {
    # E2E ~45 ms: 8-token answers on an H200
    "short": dict(
        prompt='{ dist = "fixed", value = 32 }',
        output='{ dist = "fixed", value = 8 }',
        arrival=POISSON,
        sim='gpu = "H200"',
        duration_s=30,
    ),
    # scenarios/steady.toml's lengths: E2E ~0.6-1.5 s
    "steady": dict(
        prompt='{ dist = "lognormal", mean = 256, sigma = 0.4, min = 16, max = 2048 }',
        output='{ dist = "fixed", value = 128 }',
        arrival=POISSON,
        sim='gpu = "H200"',
        duration_s=30,
    ),
    # long answers on an L4: E2E 30-45 s
    "long_outputs": dict(
        prompt='{ dist = "fixed", value = 256 }',
        output='{ dist = "uniform", min = 300, max = 700 }',
        arrival=POISSON,
        sim='gpu = "L4"\nmax_num_seqs = 64',
        duration_s=150,
    ),
    # gamma arrivals, burstiness 0.3 (cv^2 ~3.3) and 0.1 (cv^2 ~10)
    "burst": dict(
        prompt='{ dist = "lognormal", mean = 512, sigma = 0.5, min = 16, max = 4096 }',
        output='{ dist = "uniform", min = 64, max = 256 }',
        arrival='{ process = "gamma", rate = 1.0, burstiness = 0.3 }',
        sim='gpu = "A100-80GB"\nmax_num_seqs = 48',
        duration_s=60,
    ),
    "burstier": dict(
        prompt='{ dist = "lognormal", mean = 512, sigma = 0.5, min = 16, max = 4096 }',
        output='{ dist = "uniform", min = 64, max = 256 }',
        arrival='{ process = "gamma", rate = 1.0, burstiness = 0.1 }',
        sim='gpu = "A100-80GB"\nmax_num_seqs = 48',
        duration_s=60,
    ),
    # long prompts, short answers: prefill-bound
    "long_prompts": dict(
        prompt='{ dist = "uniform", min = 2000, max = 6000 }',
        output='{ dist = "fixed", value = 32 }',
        arrival=POISSON,
        sim='gpu = "L40S"',
        duration_s=60,
    ),
    # the running set capped at 8: a waiting queue even when healthy
    "capped": dict(
        prompt='{ dist = "fixed", value = 256 }',
        output='{ dist = "fixed", value = 128 }',
        arrival=POISSON,
        sim='gpu = "H200"\nmax_num_seqs = 8',
        duration_s=60,
    ),
    # long-tailed prompts and answers
    "heavy_tail": dict(
        prompt='{ dist = "lognormal", mean = 512, sigma = 0.8, min = 16, max = 8000 }',
        output='{ dist = "lognormal", mean = 200, sigma = 1.0, min = 4, max = 4000 }',
        arrival=POISSON,
        sim='gpu = "H100-SXM"\nmodel = "Llama-3.1-8B-Instruct"',
        duration_s=90,
    ),
}
# A rate far above each shape's service rate, to measure that rate on the virtual clock.
OVERLOAD = {
    "short": 3000.0,
    "steady": 300.0,
    "long_outputs": 6.0,
    "burst": 60.0,
    "burstier": 60.0,
    "long_prompts": 16.0,
    "capped": 40.0,
    "heavy_tail": 150.0,
}


def write_shape(folder: Path, name: str, seed: int = 1, **override: object) -> Path:
    spec = {**SHAPES[name], **override}
    path = folder / f"{name}-{seed}.toml"
    path.write_text(TEMPLATE.format(name=name, seed=seed, **spec), encoding="utf-8")
    return path


def virtual_at(
    path: Path, rate: float, duration_s: float | None = None
) -> tuple[VirtualProbe, SteadyPart]:
    _, vp = run_at(str(path), [], rate, duration_s)
    return vp, steady_part(vp.columns, vp.span_ns, vp.measured)


SERVICE_RATE_RUN_S = (
    20.0  # long enough to be in steady overload (many E2Es), short enough to stay cheap
)


def service_rate(
    path: Path, overload_rate: float, duration_s: float | None = SERVICE_RATE_RUN_S
) -> float:
    """Requests/s the simulator serves when offered far more than it can take (None: the
    scenario's own duration)."""
    _, part = virtual_at(path, overload_rate, duration_s)
    assert not part.served_ok, "not an overload"
    return part.served_requests_per_s


def series(vp: VirtualProbe, gauge: bool = True) -> list[rw.Sample]:
    """What a live monitor sampling every 0.25 s would have seen (with or without /metrics)."""
    return rw.series_of(
        vp.columns, vp.measured, vp.span_ns[0], vp.span_ns[1], 0.25, vp.waiting if gauge else None
    )
