"""Fitting the shared coefficients on the fit split (`fit`, Nelder-Mead on `fit_loss`), and
leaving one publisher out over the API server's two coefficients (`cross_validate`): the
validation's slow modes (minutes), apart from what every run needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from harness.orchestrate.validation_engine import V0_COEFFICIENTS, validate
from harness.orchestrate.validation_points import (
    PUBLISHED,
    TARGETS,
    Fold,
    Point,
    Row,
    publishers,
)

# The coefficients the fit varies: the same for every GPU (each GPU keeps its datasheet rates),
# so that a GPU no fitted source measured (L4, H200) is a test of transfer, not of a fit.
FIT_COEFFICIENTS = (
    "compute_efficiency",
    "weight_bandwidth_efficiency",
    "kv_bandwidth_efficiency",
    "per_sequence_overhead_s",
    "tp_step_overhead_s",
    "intake_s_per_request",
    "stream_s_per_token",
    "request_latency_s",
)


def fit_loss(rows: Sequence[Row]) -> float:
    """Mean Cauchy loss of log(predicted / published) over the target figures (a point that
    could not run counts as a large error)."""
    total, n = 0.0, 0
    for r in rows:
        if r.figure not in TARGETS:
            continue
        e = math.log(r.ratio) if r.ratio else 3.0
        total += math.log1p((e / 0.2) ** 2)
        n += 1
    return total / max(n, 1)


# A share of a datasheet rate that a fit may not exceed: no GPU reads or computes faster than
# its datasheet (a CPU preset's efficiencies are relative to numpy rates and may; not fitted here).
MAX_SHARE = 0.95
SHARES = ("compute_efficiency", "weight_bandwidth_efficiency", "kv_bandwidth_efficiency")


def fit(
    points: Sequence[Point],
    names: Sequence[str] = FIT_COEFFICIENTS,
    rounds: int = 60,
    start: Mapping[str, float] | None = None,
    in_sample: bool = False,
) -> tuple[dict[str, float], float]:
    """Coefficients (GpuPreset fields, one value for every GPU) that minimise `fit_loss` over
    the fit split of `points` (every point with `in_sample`: how far one set of coefficients can
    go, with nothing held out), by Nelder-Mead in log space from today's defaults (or the values
    `start` gives); and the loss. A share of a datasheet rate stays within MAX_SHARE. `rounds`
    bounds the simplex iterations (each costs one or two validations)."""
    import numpy as np

    from harness.calibrate.fit import decode_coefficient, encode_coefficient, nelder_mead
    from harness.sim.presets import GpuPreset

    fitting = [p for p in points if (in_sample or p.split == "fit") and not p.multi_step]
    base = GpuPreset("base", 1, 1.0, 1.0)
    first = {n: getattr(base, n) for n in names} | dict(start or {})
    u0 = np.array([encode_coefficient(n, first[n]) for n in names])

    def values(u: np.ndarray) -> dict[str, float]:
        out = {n: decode_coefficient(n, float(v)) for n, v in zip(names, u, strict=True)}
        return {n: min(v, MAX_SHARE) if n in SHARES else v for n, v in out.items()}

    def loss(u: np.ndarray) -> float:
        return fit_loss(validate(fitting, values(u)))

    best = nelder_mead(loss, u0, step=0.4, iters=rounds)
    return values(best), loss(best)


# The two API-server coefficients on which the sources disagree most (docs/validation.md, "The
# request latency stays one value"): the grid `cross_validate` chooses them on. V0 points keep
# the presets' intake (V0's API server shared its process with the engine): only V1's is tried.
CROSS_GRID: dict[str, tuple[float, ...]] = {
    "request_latency_s": (0.0, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.0417, 0.048),
    "intake_s_per_request": (0.0005, 0.001, 0.002, 0.003, 0.005, 0.00705),
}


def _validate_at(args: tuple[Sequence[Point], dict[str, float]]) -> list[Row]:
    points, values = args
    from harness.sim.presets import DEFAULT_INTAKE_S_PER_REQUEST

    v0 = {**V0_COEFFICIENTS, "intake_s_per_request": DEFAULT_INTAKE_S_PER_REQUEST}
    return validate(points, values, v0)


def cross_validate(
    points: Sequence[Point],
    grid: Mapping[str, Sequence[float]] = CROSS_GRID,
    workers: int | None = None,
) -> tuple[list[Fold], dict[str, float]]:
    """Leave one publisher out, for the coefficients of `grid` (the others stay the presets'):
    every grid point is validated once, then for each publisher the point that fits every
    other publisher best is chosen and this publisher's rows there are its held-out error.
    Also the values all publishers choose together. V0 multi-step points take no part."""
    import itertools
    import os
    from concurrent.futures import ProcessPoolExecutor

    names = list(grid)
    combos = [dict(zip(names, vs, strict=True)) for vs in itertools.product(*grid.values())]
    usable = [p for p in points if not p.multi_step]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        runs = list(pool.map(_validate_at, [(usable, c) for c in combos]))
    return choose_folds(combos, runs, publishers())


def choose_folds(
    combos: Sequence[dict[str, float]], runs: Sequence[Sequence[Row]], owner: Mapping[str, str]
) -> tuple[list[Fold], dict[str, float]]:
    """`cross_validate`'s choice, from every grid point's rows (`runs[i]` at `combos[i]`) and
    each source's publisher."""

    def best(keep: Any) -> tuple[int, float]:
        losses = [fit_loss([r for r in rows if keep(owner[r.point.source])]) for rows in runs]
        i = min(range(len(combos)), key=losses.__getitem__)
        return i, losses[i]

    folds = []
    for pub in sorted({owner[r.point.source] for r in runs[0]}):
        i, loss = best(lambda x, pub=pub: x != pub)
        mine = [r for r in runs[i] if owner[r.point.source] == pub]
        folds.append(Fold(pub, combos[i], loss, mine))
    return folds, combos[best(lambda x: True)[0]]


# Leaving out a publisher the coefficients were fitted on: FIT_COEFFICIENTS refitted on the fit
# split's other publisher (`refit_publishers`, stored in refits.toml), and the left-out
# publisher's points predicted there (`refit_rows`). Only points no other fitted value saw
# count: not an A100 point (the A100 presets' compute efficiency was chosen on the fit split's
# A100 points) and only tensor parallel 1 (V1's per-sequence TP overhead was fitted on
# GPUStack's TP points, V0's per-step one on Lambda's).
REFITS = PUBLISHED.with_name("refits.toml")
REFIT_ROUNDS = 40


def refit_eligible(point: Point) -> bool:
    return not point.gpu.startswith("A100") and int(point.raw["tp"]) == 1 and not point.multi_step


def fit_publishers(points: Sequence[Point]) -> list[str]:
    owner = publishers()
    return sorted({owner[p.source] for p in points if p.split == "fit"})


def _refit_one(args: tuple[Sequence[Point], str, int]) -> tuple[str, dict[str, float], float]:
    points, publisher, rounds = args
    owner = publishers()
    rest = [p for p in points if owner[p.source] != publisher]
    coefficients, loss = fit(rest, rounds=rounds)
    return publisher, coefficients, loss


def refit_publishers(
    points: Sequence[Point], rounds: int = REFIT_ROUNDS
) -> dict[str, tuple[dict[str, float], float]]:
    """publisher -> (FIT_COEFFICIENTS fitted without it, the loss on the others' fit points),
    for each publisher of the fit split, in parallel."""
    from concurrent.futures import ProcessPoolExecutor

    pubs = fit_publishers(points)
    with ProcessPoolExecutor(max_workers=len(pubs)) as pool:
        done = list(pool.map(_refit_one, [(points, pub, rounds) for pub in pubs]))
    return {pub: (coefficients, loss) for pub, coefficients, loss in done}


def refits_toml(
    refits: Mapping[str, tuple[dict[str, float], float]], command: str, rounds: int
) -> str:
    out = [
        "# FIT_COEFFICIENTS refitted without each publisher of the fit split (leave one publisher",
        f"# out), written by `{command}` ({rounds} rounds each); validation --write reads it.",
        "",
    ]
    for pub, (coefficients, loss) in sorted(refits.items()):
        out.append(f'[publisher."{pub}"]\nloss = {loss:.4f}\nrounds = {rounds}')
        out += [f"{k} = {v:.6g}" for k, v in coefficients.items()]
        out.append("")
    return "\n".join(out)


def load_refits(path: Any = None) -> dict[str, dict[str, float]]:
    """publisher -> its refitted coefficients ({} without the file)."""
    import tomllib
    from pathlib import Path

    path = Path(path or REFITS)
    if not path.exists():
        return {}
    doc = tomllib.loads(path.read_text())
    return {
        pub: {k: float(v) for k, v in t.items() if k in FIT_COEFFICIENTS}
        for pub, t in doc.get("publisher", {}).items()
    }


def refit_rows(points: Sequence[Point], refits: Mapping[str, Mapping[str, float]]) -> list[Row]:
    """Each refitted publisher's eligible points (`refit_eligible`) predicted at the
    coefficients fitted without it: its figures and `plan`'s capacity checks."""
    from harness.orchestrate import validation_engine as v

    owner = publishers()
    rows: list[Row] = []
    for pub, coefficients in sorted(refits.items()):
        mine = [p for p in points if owner[p.source] == pub and refit_eligible(p)]
        rows += v.validate(mine, coefficients) + v.plan_rows(mine, coefficients)
    return rows
