"""Calibration, step 5: replay runs through the scheduler on the virtual clock with the
fitted roofline and compare with the measurement (`calibrate` runs steps 1-5)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.calibrate.fit import DEFAULT_FIT, DEFAULT_FIT_TILED, fit_steps, scaled
from harness.calibrate.load import MeasuredRun
from harness.calibrate.steps import DEFAULT_BATCH_TOKENS, DEFAULT_BLOCK_SIZE, Steps, observed_steps
from harness.errors import ConfigError
from harness.sim.roofline import Roofline
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from harness.sim.virtual import run_virtual


@dataclass(frozen=True)
class Prediction:
    output_tokens_per_s: float
    itl_mean_ms: float
    ttft_mean_ms: float
    ttft_p50_ms: float = math.nan


@dataclass
class Calibration:
    roofline: Roofline
    fitted: dict[str, float]
    contention_factor: float
    fit_runs: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    steps_used: int = 0


# ---- replay ---------------------------------------------------------------------------------


def replay(
    run: MeasuredRun,
    roofline: Roofline,
    max_model_len: int = 2048,
    lag_steps: int = 1,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> Prediction:
    """The run's arrivals through the scheduler on the virtual clock; its three figures."""
    blocks_per_seq = -(-max_model_len // DEFAULT_BLOCK_SIZE)
    lag = max(lag_steps, 0)
    cfg = SchedulerConfig(
        max_num_seqs=run.max_num_seqs,
        max_num_batched_tokens=batch_tokens,
        num_blocks=run.max_num_seqs * blocks_per_seq,
        block_size=DEFAULT_BLOCK_SIZE,
        chunked_prefill=True,
        prefix_caching=False,
        jitter=False,
    )
    # lag_steps: the engine spends that many steps before the first token is out (llama.cpp:
    # one); modelled as that many extra tokens generated and not delivered.
    arrivals = [
        (float(t), SimRequest(rid=i, prompt_tokens=int(p), target_output=max(int(o), 1) + lag))
        for i, (t, p, o) in enumerate(
            zip(run.intended_s, run.prompt_tokens, run.output_tokens, strict=True)
        )
    ]
    vr = run_virtual(Scheduler(cfg, roofline), arrivals)
    delivered = {i: np.asarray(t.token_s)[lag:] for i, t in vr.times.items()}
    return virtual_metrics(delivered, run.intended_s, run.measured_phase, run.window_start_s)


def virtual_metrics(
    tokens: Mapping[int, np.ndarray],
    arrival_s: np.ndarray,
    measured: np.ndarray,
    window_start_s: float,
) -> Prediction:
    """Output tokens/s from the window start to the last token, mean ITL, mean and median TTFT
    over the measured phases' requests -- as the result computes them from the journal."""
    all_tokens = np.concatenate(list(tokens.values()))
    in_window = all_tokens[all_tokens >= window_start_s]
    span = float(all_tokens.max()) - window_start_s
    gaps = [np.diff(tokens[i]) for i in tokens if measured[i]]
    ttfts = [tokens[i][0] - arrival_s[i] for i in tokens if measured[i]]
    itl = np.concatenate(gaps) if gaps else np.zeros(1)
    return Prediction(
        output_tokens_per_s=len(in_window) / span if span > 0 else 0.0,
        itl_mean_ms=float(itl.mean()) * 1e3,
        ttft_mean_ms=float(np.mean(ttfts)) * 1e3,
        ttft_p50_ms=float(np.median(ttfts)) * 1e3,
    )


def _error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0 if measured else math.nan


def calibrate(
    runs: Sequence[MeasuredRun],
    base: Roofline,
    fit_on: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    max_model_len: int = 2048,
    lag_steps: int = 1,
) -> Calibration:
    """Fit on the runs whose max_num_seqs is in `fit_on` (all when None); predict every run."""
    fit_runs = [r for r in runs if fit_on is None or r.max_num_seqs in fit_on]
    if not fit_runs:
        have = sorted({r.max_num_seqs for r in runs})
        raise ConfigError(
            "command line",
            "--fit-on",
            f"no run at those settings; the runs have parallel={','.join(map(str, have))}",
        )
    if names is None:
        names = DEFAULT_FIT_TILED if base.gemm_tile_rows > 1 else DEFAULT_FIT
    steps = Steps.concat([observed_steps(r, lag_steps) for r in fit_runs])
    if len(steps.duration_s) < 2 * len(names):
        raise ConfigError(
            "command line",
            "RESULTS",
            f"only {len(steps.duration_s)} engine steps in the fit runs; too few to fit",
        )
    fitted = fit_steps(base, steps, names)
    roof = base.with_coefficients(**fitted)
    ratios = [
        r.itl_mean_ms / replay(r, roof, max_model_len, lag_steps).itl_mean_ms for r in fit_runs
    ]
    factor = float(np.exp(np.mean(np.log(ratios))))
    roof = scaled(roof, factor)
    cal = Calibration(
        roofline=roof,
        fitted=fitted,
        contention_factor=factor,
        fit_runs=[r.name for r in fit_runs],
        steps_used=len(steps.duration_s),
    )
    for r in sorted(runs, key=lambda r: r.max_num_seqs):
        pred = replay(r, roof, max_model_len, lag_steps)
        cal.rows.append(
            {
                "run": r.name,
                "max_num_seqs": r.max_num_seqs,
                "role": "fit" if r in fit_runs else "held-out",
                "measured": {
                    "output_tokens_per_s": r.output_tokens_per_s,
                    "itl_mean_ms": r.itl_mean_ms,
                    "ttft_mean_ms": r.ttft_mean_ms,
                    "ttft_p50_ms": r.ttft_p50_ms,
                },
                "predicted": {
                    "output_tokens_per_s": pred.output_tokens_per_s,
                    "itl_mean_ms": pred.itl_mean_ms,
                    "ttft_mean_ms": pred.ttft_mean_ms,
                    "ttft_p50_ms": pred.ttft_p50_ms,
                },
                "error_pct": {
                    "output_tokens_per_s": _error_pct(
                        pred.output_tokens_per_s, r.output_tokens_per_s
                    ),
                    "itl_mean_ms": _error_pct(pred.itl_mean_ms, r.itl_mean_ms),
                    "ttft_mean_ms": _error_pct(pred.ttft_mean_ms, r.ttft_mean_ms),
                    "ttft_p50_ms": _error_pct(pred.ttft_p50_ms, r.ttft_p50_ms),
                },
            }
        )
    return cal
