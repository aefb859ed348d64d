"""Calibration, steps 3 and 4: fit the roofline's coefficients to the steps' durations
(Nelder-Mead in log space on a Cauchy loss) and scale them for contention."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from harness.calibrate.steps import Steps
from harness.errors import ConfigError
from harness.sim.roofline import TUNABLE, Roofline

CAUCHY_SCALE = 0.10  # residuals of ~10 % in log-time count fully; stalls count little
# Coefficient bounds for the search (lower, upper): wide, only to keep it physical.
BOUNDS: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.01, 20.0),
    "matvec_efficiency": (0.01, 20.0),
    "gemm_fixed_rows": (0.0, 200.0),
    "weight_bandwidth_efficiency": (0.05, 20.0),
    "kv_bandwidth_efficiency": (0.05, 20.0),
    "step_overhead_s": (0.0, 0.1),
    "per_sequence_overhead_s": (0.0, 0.05),
    "prefill_efficiency_factor": (0.05, 20.0),
    "allreduce_latency_s": (0.0, 1e-3),
    "allreduce_bandwidth_efficiency": (0.01, 2.0),
    "tp_step_overhead_s": (0.0, 0.1),
    "tp_sequence_overhead_s": (0.0, 0.01),
    # The API server's costs do not change a step's duration (what fit_steps fits); they are
    # tunable for fits against whole runs (TTFT under bursts, delivery under load).
    "intake_s_per_request": (0.0, 0.1),
    "intake_s_per_prompt_token": (0.0, 1e-3),
    "stream_s_per_token": (0.0, 0.01),
    "request_latency_s": (0.0, 1.0),
}
# Coefficients fitted by default; the GEMM ones only where the preset tiles rows (a CPU).
DEFAULT_FIT = ("compute_efficiency", "step_overhead_s", "per_sequence_overhead_s")
DEFAULT_FIT_TILED = (
    "compute_efficiency",
    "matvec_efficiency",
    "gemm_fixed_rows",
    "weight_bandwidth_efficiency",
    "step_overhead_s",
    "per_sequence_overhead_s",
)
_SCALE_UP = ("step_overhead_s", "per_sequence_overhead_s")  # time coefficients
_SCALE_DOWN = (  # rate coefficients
    "compute_efficiency",
    "matvec_efficiency",
    "weight_bandwidth_efficiency",
    "kv_bandwidth_efficiency",
)


# ---- fitting --------------------------------------------------------------------------------


def nelder_mead(
    f: Callable[[np.ndarray], float],
    x0: np.ndarray,
    step: float = 0.3,
    iters: int = 2000,
    tol: float = 1e-9,
) -> np.ndarray:
    """Minimise f from x0 (the standard simplex method; no dependency beyond numpy)."""
    n = len(x0)
    simplex = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tol * (abs(values[0]) + tol):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        xr = centroid + (centroid - worst)
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2 * (centroid - worst)
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (worst - centroid)
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


# Zero-able coefficients are searched as log(value + offset) so 0 stays reachable.
_OFFSET = {
    "gemm_fixed_rows": 0.1,
    "step_overhead_s": 1e-5,
    "per_sequence_overhead_s": 1e-6,
    "allreduce_latency_s": 1e-7,
    "tp_step_overhead_s": 1e-5,
    "tp_sequence_overhead_s": 1e-7,
    "intake_s_per_request": 1e-5,
    "intake_s_per_prompt_token": 1e-8,
    "stream_s_per_token": 1e-7,
    "request_latency_s": 1e-4,
}


def encode_coefficient(name: str, value: float) -> float:
    return math.log(value + _OFFSET.get(name, 0.0))


def decode_coefficient(name: str, u: float) -> float:
    """The coefficient at search coordinate u, within its BOUNDS. A simplex can wander far
    past a bound on a flat loss (a full test run: exp(u) overflowed), so u is clipped to the
    upper bound's coordinate first."""
    lo, hi = BOUNDS[name]
    offset = _OFFSET.get(name, 0.0)
    return min(max(math.exp(min(u, math.log(hi + offset))) - offset, lo), hi)


def fit_steps(base: Roofline, steps: Steps, names: Sequence[str]) -> dict[str, float]:
    """Coefficients `names` that best explain `steps` (robust loss on log time ratios)."""
    for n in names:
        if n not in TUNABLE:
            raise ConfigError(
                "command line", "--coefficients", f"unknown {n!r}; allowed: {', '.join(TUNABLE)}"
            )
    measured = np.log(steps.duration_s)
    # Prompt-carrying gaps are few (one per request) but set TTFT: both kinds weigh the same.
    n_pre = max(int(steps.prefill.sum()), 1)
    n_dec = max(len(measured) - n_pre, 1)
    weight = np.where(steps.prefill, 0.5 / n_pre, 0.5 / n_dec) * len(measured)

    def coefficients(u: np.ndarray) -> dict[str, float]:
        return {n: decode_coefficient(n, float(v)) for n, v in zip(names, u, strict=True)}

    def loss(u: np.ndarray) -> float:
        model = steps.model_s(base.with_coefficients(**coefficients(u)))
        r = (np.log(np.maximum(model, 1e-9)) - measured) / CAUCHY_SCALE
        return float((weight * np.log1p(r * r)).sum())

    best = min(
        (polish(loss, start) for start in _starts(base, steps, names)),
        key=loss,
    )
    return coefficients(best)


def polish(loss: Callable[[np.ndarray], float], start: np.ndarray) -> np.ndarray:
    best = nelder_mead(loss, start)
    return nelder_mead(loss, best, step=0.1)  # restart: the simplex may have collapsed early


def _starts(base: Roofline, steps: Steps, names: Sequence[str]) -> list[np.ndarray]:
    """Where the search starts: the preset's values, and with its time overheads set from the
    measured decode steps (the half of a median step per step, or an eighth per sequence) when
    they are fitted. From the preset's near-zero overheads alone the simplex stopped with
    every step's time on the per-sequence term at its bound (a four-stream step 1.9x too long):
    a time of tens of ms is many simplex widths away in log space from 10 us."""
    preset = {n: max(getattr(base, n), BOUNDS[n][0]) for n in names}
    decode = steps.duration_s[~steps.prefill] if (~steps.prefill).any() else steps.duration_s
    median = float(np.median(decode)) if len(decode) else 0.0
    tries = [preset]
    if median > 0 and "step_overhead_s" in names:
        tries.append({**preset, "step_overhead_s": median / 2})
    if median > 0 and "per_sequence_overhead_s" in names:
        tries.append({**preset, "per_sequence_overhead_s": median / 8})
    return [
        np.array([encode_coefficient(n, min(max(v[n], BOUNDS[n][0]), BOUNDS[n][1])) for n in names])
        for v in tries
    ]


def scaled(roofline: Roofline, factor: float) -> Roofline:
    """Every step `factor` times longer (rates divided, overheads multiplied)."""
    values = {n: getattr(roofline, n) * factor for n in _SCALE_UP}
    values.update({n: getattr(roofline, n) / factor for n in _SCALE_DOWN})
    return roofline.with_coefficients(**values)
