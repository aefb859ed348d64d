"""`sim calibrate`: fit the simulator's step-time coefficients to measured runs, then check
them by replaying held-out runs on the virtual clock.

Theory of operation
-------------------
1. **Load** each run (a result JSON with its journal beside it, or a journal): per request the
   intended send time, the server's prompt and output token counts and every token stamp; the
   run's `max_num_seqs` (llama.cpp's `--parallel`) from the sweep's `summary.json` beside it,
   the scenario's `[sim]` table, or the peak of the running gauge the run scraped; and its
   measured output tokens/s, mean ITL and mean TTFT (the harness's own result figures).
2. **Steps.** Every active stream gets one token per engine step, so the token stamps of all
   streams fall into clusters, one per step. A cluster's duration is the gap since the last
   cluster (or since the newest request in it was sent, if the engine was idle), and its work
   is known: one decode token (and its context) per stream that already had tokens, a whole
   prompt for each stream whose first token it is (llama.cpp prefills a prompt in one step,
   alongside the others' decodes).
3. **Fit** the roofline's TUNABLE coefficients (efficiencies, per-step and per-sequence
   overheads, the GEMM's fixed cost) to those step durations of the fit runs: Nelder-Mead in
   log space on a Cauchy loss of log(model / measured), so descheduled steps on a shared
   machine do not drag the fit.
4. **Contention.** The typical step is what (3) fits; a mean also carries the stalls other
   jobs cause. One factor, the geometric mean over the fit runs of measured / replayed mean
   ITL, scales every time coefficient (efficiencies divided, overheads multiplied).
5. **Replay** every run's arrivals (same times, same token counts) through the scheduler on
   the virtual clock with the fitted roofline, and compare throughput, mean ITL and mean
   TTFT with the measurement; held-out runs are the prediction test.

Nothing here opens a socket or sleeps; a run of 40 requests replays in well under a second.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.sim.presets import Calibration as CalibrationRecord
from harness.sim.presets import GpuPreset, ModelPreset, gpu_to_toml, model_to_toml
from harness.sim.roofline import TUNABLE, Roofline
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from harness.sim.virtual import run_virtual

CLUSTER_GAP_NS = 2_000_000  # tokens of one step reach the client within ~1 ms of each other
CAUCHY_SCALE = 0.10  # residuals of ~10 % in log-time count fully; stalls count little
DEFAULT_BLOCK_SIZE = 16
# llama.cpp's default n_batch: a step takes every pending prompt token up to this many.
DEFAULT_BATCH_TOKENS = 2048
# Coefficient bounds for the search (lower, upper): wide, only to keep it physical.
BOUNDS: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.01, 20.0),
    "matvec_efficiency": (0.01, 20.0),
    "gemm_fixed_rows": (0.0, 200.0),
    "weight_bandwidth_efficiency": (0.05, 20.0),
    "kv_bandwidth_efficiency": (0.05, 20.0),
    "step_overhead_s": (0.0, 0.1),
    "per_sequence_overhead_s": (0.0, 0.05),
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


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run, reduced to what calibration needs. Times in seconds from run start."""

    name: str
    max_num_seqs: int
    setting_source: str  # where max_num_seqs came from
    intended_s: np.ndarray  # per request (all phases)
    sent_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    measured_phase: np.ndarray  # bool: request belongs to a measured (non-warm-up) phase
    token_s: list[np.ndarray]  # per request, its token stamps
    window_start_s: float  # start of the measured window
    output_tokens_per_s: float
    itl_mean_ms: float
    ttft_mean_ms: float
    ttft_p50_ms: float = math.nan


@dataclass(frozen=True)
class Steps:
    """Engine steps recovered from token stamps: their work and measured duration."""

    group: np.ndarray  # per step: the measured gap it belongs to (a gap may hold two)
    num_tokens: np.ndarray
    num_seqs: np.ndarray
    num_sampled: np.ndarray
    kv_read_tokens: np.ndarray
    attention_pairs: np.ndarray
    duration_s: np.ndarray  # per gap
    batch: np.ndarray  # per gap: streams decoding in it (for reports)
    prefill: np.ndarray  # per gap: it holds prompt work

    def model_s(self, roofline: Roofline) -> np.ndarray:
        """Modelled seconds per gap (the sum of its steps)."""
        per_step = roofline.step_times_s(
            self.num_tokens,
            self.num_seqs,
            self.num_sampled,
            self.kv_read_tokens,
            self.attention_pairs,
        )
        return np.bincount(self.group, weights=per_step, minlength=len(self.duration_s))

    @classmethod
    def concat(cls, parts: Sequence[Steps]) -> Steps:
        names = ("num_tokens", "num_seqs", "num_sampled", "kv_read_tokens", "attention_pairs")
        arrays = {n: np.concatenate([getattr(p, n) for p in parts]) for n in names}
        offsets = np.cumsum([0] + [len(p.duration_s) for p in parts[:-1]])
        return cls(
            group=np.concatenate([p.group + o for p, o in zip(parts, offsets, strict=True)]),
            **arrays,
            duration_s=np.concatenate([p.duration_s for p in parts]),
            batch=np.concatenate([p.batch for p in parts]),
            prefill=np.concatenate([p.prefill for p in parts]),
        )


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


# ---- loading ----------------------------------------------------------------------------------


def _journal_for(result_path: Path, result: Mapping[str, Any]) -> Path:
    from harness.record.journal import find_journal, journal_path_for

    found = find_journal(dict(result), result_path)
    if found is None:
        raise ConfigError(str(result_path), "files.journal",
                          f"its journal is needed and not found ({journal_path_for(result_path)})")
    return found


def _sweep_setting(path: Path) -> int | None:
    summary = path.with_name("summary.json")
    if not summary.is_file():
        return None
    try:
        doc = json.loads(summary.read_text())
    except (OSError, ValueError):
        return None
    for point in doc.get("points", []):
        for run in point.get("runs", []):
            if run.get("result") in (path.name, path.name.replace(".journal.jsonl", ".json")):
                value = (point.get("setting") or {}).get("max_num_seqs")
                if isinstance(value, int) and value > 0:
                    return value
    return None


_RUNNING_GAUGES = ("llamacpp:requests_processing", "vllm:num_requests_running")


def _max_num_seqs(path: Path, header: Mapping[str, Any], events: Mapping[str, Any]) -> tuple[int, str]:
    from_sweep = _sweep_setting(path)
    if from_sweep is not None:
        return from_sweep, "sweep summary.json"
    sim = (header.get("scenario") or {}).get("sim") or {}
    if isinstance(sim.get("max_num_seqs"), int):
        return int(sim["max_num_seqs"]), "scenario [sim]"
    peak = 0.0
    for sample in events.get("server_metrics", []):
        values = sample.get("values") or {}
        for g in _RUNNING_GAUGES:
            v = values.get(g)
            if isinstance(v, int | float):
                peak = max(peak, float(v))
    if peak >= 1:
        return int(peak), "peak running (server /metrics)"
    raise ConfigError(
        str(path),
        "max_num_seqs",
        "cannot tell the run's max_num_seqs / --parallel: no sweep summary.json beside it, no "
        "[sim] max_num_seqs in its scenario and no running gauge scraped",
    )


def load_run(path: str | Path) -> MeasuredRun:
    """Read a result JSON (with its journal) or a journal. Raises ConfigError."""
    from harness.analysis.result import build_result, load_result
    from harness.record.journal import read_journal

    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "", "file not found")
    if p.name.endswith(".jsonl"):
        journal_path, result = p, None
    else:
        result = load_result(p)
        journal_path = _journal_for(p, result)
    try:
        j = read_journal(journal_path)
    except (OSError, ValueError) as e:
        raise ConfigError(str(journal_path), "", f"not a readable harness journal: {e}") from None
    if result is None:
        result = build_result(j, str(journal_path))
    header = j.header
    measured_ix = {i for i, ph in enumerate(header.get("phases", [])) if not ph.get("warmup")}
    recs = [r for r in j.records if r.ok and r.chunk_ns]
    if not recs:
        raise ConfigError(str(p), "records", "no completed request to calibrate from")
    recs.sort(key=lambda r: r.intended_ns)
    end = j.end or {}
    starts = end.get("phase_starts_ns") or []
    measured_starts = [starts[i] for i in sorted(measured_ix) if i < len(starts)]
    measured = np.array([r.phase in measured_ix for r in recs])
    window_ns = measured_starts[0] if measured_starts else min(
        (r.intended_ns for r in recs if r.phase in measured_ix), default=0
    )
    summary = result.get("summary") or {}
    lat = summary.get("latency_ms") or {}
    try:
        tput = float(summary["throughput"]["output_tokens_per_s"])
        itl = float(lat["itl"]["mean"])
        ttft = float(lat["ttft"]["mean"])
        ttft_p50 = float(lat["ttft"].get("p50") if lat["ttft"].get("p50") is not None else math.nan)
    except (KeyError, TypeError, ValueError):
        raise ConfigError(str(p), "summary", "no throughput / ITL / TTFT in the result") from None
    mns, source = _max_num_seqs(p, header, j.events)
    return MeasuredRun(
        name=p.name,
        max_num_seqs=mns,
        setting_source=source,
        intended_s=np.array([r.intended_ns for r in recs]) / 1e9,
        sent_s=np.array([r.sent_ns for r in recs], dtype=float) / 1e9,
        prompt_tokens=np.array([r.prompt_tokens or r.planned_prompt_tokens for r in recs]),
        output_tokens=np.array([r.output_tokens or r.planned_output_tokens for r in recs]),
        measured_phase=measured,
        token_s=[np.array(r.chunk_ns) / 1e9 for r in recs],
        window_start_s=window_ns / 1e9,
        output_tokens_per_s=tput,
        itl_mean_ms=itl,
        ttft_mean_ms=ttft,
        ttft_p50_ms=ttft_p50,
    )


# ---- steps from token stamps -----------------------------------------------------------------


def _clusters(run: MeasuredRun, gap_s: float) -> list[tuple[float, float, np.ndarray, np.ndarray]]:
    """(first stamp, last stamp, request ids, token positions) per cluster of token stamps."""
    t = np.concatenate(run.token_s)
    req = np.concatenate([np.full(len(x), i) for i, x in enumerate(run.token_s)])
    pos = np.concatenate([np.arange(len(x)) for x in run.token_s])
    order = np.argsort(t, kind="stable")
    t, req, pos = t[order], req[order], pos[order]
    out = []
    i = 0
    while i < len(t):
        j = i + 1
        seen = {int(req[i])}
        while j < len(t) and t[j] - t[j - 1] <= gap_s and int(req[j]) not in seen:
            seen.add(int(req[j]))
            j += 1
        out.append((float(t[i]), float(t[j - 1]), req[i:j], pos[i:j]))
        i = j
    return out


def observed_steps(
    run: MeasuredRun, lag_steps: int = 1, gap_s: float = CLUSTER_GAP_NS / 1e9
) -> Steps:
    """Cluster every stream's token stamps into engine steps (see the module docstring).

    lag_steps 1 (llama.cpp, observed): a request's first token comes one step after the
    step that processed its prompt, so the prompt's work belongs to the previous cluster if
    the request had been sent and a slot was free then; otherwise (the engine was idle, or
    the slot was freed by the request that ended in the previous cluster) the cluster's gap
    holds two steps, prefill and a one-row step, and both are modelled.
    lag_steps 0 (the built-in simulator, vLLM): the first token ends the prompt's step.
    """
    clusters = _clusters(run, gap_s)
    # Step entries: [group, tokens, seqs, kv, pairs]; a group's model time is its sum.
    entries: list[list[float]] = []
    groups: list[tuple[float, float]] = []  # per cluster-gap: (duration, decode batch)
    owner: list[int] = []  # entry index of each cluster's main step, -1 if skipped
    attached = [0] * len(clusters)  # prompts moved into each cluster's step
    prev_end: float | None = None
    for k, (first, last, r, pos) in enumerate(clusters):
        new = r[pos == 0]
        is_decode = pos > 0 if lag_steps == 0 else np.ones(len(r), bool)
        dec, dpos = r[is_decode], pos[is_decode]
        ctx = run.prompt_tokens[dec] + dpos
        start = prev_end
        hidden: list[int] = []  # prompts whose step hides inside this gap
        attach: list[int] = []  # prompts that belong to the previous cluster's step
        for q in new.tolist():
            sent = float(run.sent_s[q])
            if (
                lag_steps
                and k >= 2
                and owner[k - 1] >= 0
                and clusters[k - 2][1] >= sent - gap_s
                and len(clusters[k - 1][2]) + attached[k - 1] < run.max_num_seqs
            ):
                attach.append(q)
                attached[k - 1] += 1
            else:
                hidden.append(q)
                start = sent if start is None else max(start, sent)
        prev_end = last
        for q in attach:
            e = entries[owner[k - 1]]
            p = float(run.prompt_tokens[q])
            e[1] += p
            e[2] += 1
            e[4] += p * (p + 1) / 2
        if start is None or first <= start:
            owner.append(-1)
            continue
        g = len(groups)
        groups.append((first - start, float(len(dec))))
        hp = run.prompt_tokens[hidden].astype(float)
        if len(hidden) and lag_steps:
            entries.append([g, float(hp.sum()), float(len(hidden)), 0.0,
                            float((hp * (hp + 1) / 2).sum())])
            hp = np.zeros(0)
        owner.append(len(entries))
        entries.append([g, float(len(dec) + hp.sum()), float(len(dec) + len(hp)),
                        float(ctx.sum()), float((ctx + 1).sum() + (hp * (hp + 1) / 2).sum())])
    a = np.array(entries, dtype=float).reshape(-1, 5)
    d = np.array(groups, dtype=float).reshape(-1, 2)
    return Steps(
        group=a[:, 0].astype(np.int64),
        num_tokens=a[:, 1],
        num_seqs=a[:, 2],
        num_sampled=a[:, 2],
        kv_read_tokens=a[:, 3],
        attention_pairs=a[:, 4],
        duration_s=d[:, 0],
        batch=d[:, 1],
        prefill=np.bincount(a[:, 0].astype(np.int64), weights=a[:, 1], minlength=len(d))
        > d[:, 1],
    )


# ---- fitting --------------------------------------------------------------------------------


def nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.3, iters: int = 2000,
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
_OFFSET = {"gemm_fixed_rows": 0.1, "step_overhead_s": 1e-5, "per_sequence_overhead_s": 1e-6}


def _encode(name: str, value: float) -> float:
    return math.log(value + _OFFSET.get(name, 0.0))


def _decode(name: str, u: float) -> float:
    lo, hi = BOUNDS[name]
    return min(max(math.exp(u) - _OFFSET.get(name, 0.0), lo), hi)


def fit_steps(base: Roofline, steps: Steps, names: Sequence[str]) -> dict[str, float]:
    """Coefficients `names` that best explain `steps` (robust loss on log time ratios)."""
    for n in names:
        if n not in TUNABLE:
            raise ConfigError("command line", "--coefficients", f"unknown {n!r}; allowed: "
                              f"{', '.join(TUNABLE)}")
    measured = np.log(steps.duration_s)
    # Prompt-carrying gaps are few (one per request) but set TTFT: both kinds weigh the same.
    n_pre = max(int(steps.prefill.sum()), 1)
    n_dec = max(len(measured) - n_pre, 1)
    weight = np.where(steps.prefill, 0.5 / n_pre, 0.5 / n_dec) * len(measured)

    def coefficients(u: np.ndarray) -> dict[str, float]:
        return {n: _decode(n, float(v)) for n, v in zip(names, u, strict=True)}

    def loss(u: np.ndarray) -> float:
        model = steps.model_s(base.with_coefficients(**coefficients(u)))
        r = (np.log(np.maximum(model, 1e-9)) - measured) / CAUCHY_SCALE
        return float((weight * np.log1p(r * r)).sum())

    start = np.array([_encode(n, max(getattr(base, n), BOUNDS[n][0])) for n in names])
    best = nelder_mead(loss, start)
    best = nelder_mead(loss, best, step=0.1)  # restart: the simplex may have collapsed early
    return coefficients(best)


def scaled(roofline: Roofline, factor: float) -> Roofline:
    """Every step `factor` times longer (rates divided, overheads multiplied)."""
    values = {n: getattr(roofline, n) * factor for n in _SCALE_UP}
    values.update({n: getattr(roofline, n) / factor for n in _SCALE_DOWN})
    return roofline.with_coefficients(**values)


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
        raise ConfigError("command line", "--fit-on", f"no run at those settings; the runs have "
                          f"parallel={','.join(map(str, have))}")
    if names is None:
        names = DEFAULT_FIT_TILED if base.gemm_tile_rows > 1 else DEFAULT_FIT
    steps = Steps.concat([observed_steps(r, lag_steps) for r in fit_runs])
    if len(steps.duration_s) < 2 * len(names):
        raise ConfigError("command line", "RESULTS", f"only {len(steps.duration_s)} engine steps "
                          "in the fit runs; too few to fit")
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
        cal.rows.append({
            "run": r.name,
            "max_num_seqs": r.max_num_seqs,
            "role": "fit" if r in fit_runs else "held-out",
            "measured": {"output_tokens_per_s": r.output_tokens_per_s,
                         "itl_mean_ms": r.itl_mean_ms, "ttft_mean_ms": r.ttft_mean_ms,
                         "ttft_p50_ms": r.ttft_p50_ms},
            "predicted": {"output_tokens_per_s": pred.output_tokens_per_s,
                          "itl_mean_ms": pred.itl_mean_ms, "ttft_mean_ms": pred.ttft_mean_ms,
                          "ttft_p50_ms": pred.ttft_p50_ms},
            "error_pct": {
                "output_tokens_per_s": _error_pct(pred.output_tokens_per_s, r.output_tokens_per_s),
                "itl_mean_ms": _error_pct(pred.itl_mean_ms, r.itl_mean_ms),
                "ttft_mean_ms": _error_pct(pred.ttft_mean_ms, r.ttft_mean_ms),
                "ttft_p50_ms": _error_pct(pred.ttft_p50_ms, r.ttft_p50_ms),
            },
        })
    return cal


# ---- output ---------------------------------------------------------------------------------


def error_table(cal: Calibration) -> str:
    """The measured-vs-predicted table, one row per run (plain text, also a TOML comment)."""
    head = (f"{'parallel':>8}  {'role':<8}  {'out tok/s meas/pred':>20} {'err':>7}  "
            f"{'ITL mean ms':>15} {'err':>7}  {'TTFT mean ms':>17} {'err':>7}  {'TTFT p50 ms':>17} {'err':>7}")
    lines = [head]
    for row in cal.rows:
        m, p, e = row["measured"], row["predicted"], row["error_pct"]
        lines.append(
            f"{row['max_num_seqs']:>8}  {row['role']:<8}  "
            f"{m['output_tokens_per_s']:>9.1f}/{p['output_tokens_per_s']:<10.1f} "
            f"{e['output_tokens_per_s']:>+6.1f}%  "
            f"{m['itl_mean_ms']:>6.1f}/{p['itl_mean_ms']:<8.1f} {e['itl_mean_ms']:>+6.1f}%  "
            f"{m['ttft_mean_ms']:>8.0f}/{p['ttft_mean_ms']:<8.0f} {e['ttft_mean_ms']:>+6.1f}%  "
            f"{m['ttft_p50_ms']:>8.0f}/{p['ttft_p50_ms']:<8.0f} {e['ttft_p50_ms']:>+6.1f}%"
        )
    return "\n".join(lines)


# The calibration record's names for the three figures (as builtin.toml's records spell them).
RECORD_FIGURES = {"output_tokens_per_s": "output_tokens_per_s", "itl_mean_ms": "itl_mean",
                  "ttft_mean_ms": "ttft_mean", "ttft_p50_ms": "ttft_p50"}


def _settings(values: Sequence[int]) -> str:
    return "max_num_seqs=" + ",".join(str(v) for v in sorted(set(values))) if values else ""


def calibration_record(cal: Calibration, engine: str, model: str, reference: str = "",
                       measured_on: str = "") -> CalibrationRecord:
    """What `cal` was fitted to and, per figure, the worst |error| in % over the runs held out
    of the fit (an empty table when every run was fitted): the preset's own account of how far
    to trust it."""
    fit = [row["max_num_seqs"] for row in cal.rows if row["role"] == "fit"]
    held = [row for row in cal.rows if row["role"] == "held-out"]
    worst = {name: round(max(abs(row["error_pct"][key]) for row in held), 1)
             for key, name in RECORD_FIGURES.items()
             if held and all(math.isfinite(row["error_pct"][key]) for row in held)}
    return CalibrationRecord(engine=engine, model=model, fit_on=_settings(fit),
                             held_out=_settings([row["max_num_seqs"] for row in held]),
                             held_out_error_pct=worst, reference=reference, measured_on=measured_on)


def calibrated_gpu(gpu: GpuPreset, roofline: Roofline, name: str,
                   record: CalibrationRecord | None = None) -> GpuPreset:
    """`gpu` renamed, with the roofline's coefficients and this fit's calibration record (the
    base preset's record, which described other coefficients, is dropped)."""
    from dataclasses import replace

    return replace(gpu, name=name, calibration=record, **{n: getattr(roofline, n) for n in TUNABLE})


def preset_text(gpu: GpuPreset, model: ModelPreset, cal: Calibration, command: str) -> str:
    """The preset file: a comment with how it was made and its errors, then the two tables."""
    comment = [
        "# Written by `python -m harness sim calibrate` -- load it with --preset-file.",
        f"# command: {command}",
        f"# fitted on: {', '.join(cal.fit_runs)} ({cal.steps_used} engine steps)",
        "# fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in cal.fitted.items()),
        f"# contention factor (measured / replayed mean ITL on the fit runs): "
        f"{cal.contention_factor:.3f}",
        "# prediction by replay on the virtual clock:",
        *("#   " + line for line in error_table(cal).splitlines()),
    ]
    return "\n".join(comment) + "\n\n" + gpu_to_toml(gpu) + "\n" + model_to_toml(model)

