"""Regression compare: baseline vs candidate results, metric by metric, judged by significance.

Theory of operation
-------------------
Every metric knows its direction (latencies: lower is better; throughput: higher). The change
is `candidate / baseline - 1` of the figure over each side's pooled requests (one run or
several). Its 95 % confidence interval is the wider of two:

- Within runs. A percentile of a per-request metric (TTFT, TPOT, E2E) gets a distribution-free
  interval from order statistics (`harness.analysis.compare_stats`): no bootstrap, valid for any
  distribution, so a large change in p99 is decided on a few hundred requests, and a small
  sample gives an interval unbounded on one side rather than a falsely narrow one. Means, ITL
  (whose per-token gaps within a request are correlated) and throughput get a bootstrap over
  requests: each replicate reweights the requests of each side with Poisson(1) weights and
  recomputes the figure from the journal's stamps (whole requests, so ITL's gaps stay together).
  Without a journal the HDR histograms are used (their samples treated as independent).
- Between runs, with two runs or more on a side: each run's own figure already carries its
  within-run noise, and their spread adds what differs from run to run (the machine, warm-up, a
  simulator short of CPU). Student's t on the logarithms of the per-run figures, one variance
  pooled over both sides (`compare_stats.between_runs_interval`).

Verdicts. A gated metric (one with a threshold) is REGRESSION when its change is worse than the
threshold and the whole interval lies on the worse side of zero; it passes (`same`, `better`,
`worse (within threshold)`) only when the interval's worse end stays within the threshold;
otherwise it is INCONCLUSIVE, with the requests per side that would decide it. A health warning
of a result (client or simulator short of CPU, send lag) makes a verdict it could have produced
on the metrics it touches INCONCLUSIVE: a simulator short of CPU makes its side look worse, so
it blocks a REGRESSION when in the candidate and a pass when in the baseline. With journals on
both sides, what each warning measured is set against the figure's own samples
(`compare_health.refined`: the simulator's lost time taken out of the latencies it was inside,
loop lag against the other side's, a late send by the requests it reordered); without, the
run-wide worst cases. Metrics without a threshold say `worse (not gated)`, `better` or `same`.

Modules: compare_specs (metrics, thresholds, confidence), compare_sides (per-request data),
compare_intervals (within-run intervals), compare_stats (order statistics, t), compare_health,
compare_verdict, compare_compat, compare_report; this one judges the rows and builds the
report. Their names are re-exported here (`from harness.analysis.compare import ...`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.analysis import compare_health as health
from harness.analysis import compare_stats as stats
from harness.analysis import compare_verdict as verdicts

# re-exported (`X as X`: an explicit re-export for type checkers)
from harness.analysis.compare_compat import SIMULATED_KINDS as SIMULATED_KINDS
from harness.analysis.compare_compat import check_compatible as check_compatible
from harness.analysis.compare_health import Suspect as Suspect
from harness.analysis.compare_health import health_problems as health_problems
from harness.analysis.compare_intervals import BOOTSTRAP as BOOTSTRAP
from harness.analysis.compare_intervals import _bootstrap_interval as _bootstrap_interval
from harness.analysis.compare_intervals import _bounded_at as _bounded_at
from harness.analysis.compare_intervals import _clustering as _clustering
from harness.analysis.compare_intervals import _hist_replicates as _hist_replicates
from harness.analysis.compare_intervals import _samples as _samples
from harness.analysis.compare_intervals import _weighted_percentile as _weighted_percentile
from harness.analysis.compare_intervals import _weights as _weights
from harness.analysis.compare_intervals import _within_interval as _within_interval
from harness.analysis.compare_intervals import replicates as replicates
from harness.analysis.compare_intervals import reported as reported
from harness.analysis.compare_intervals import sample_count as sample_count
from harness.analysis.compare_report import HEAD as HEAD
from harness.analysis.compare_report import render as render
from harness.analysis.compare_report import table_rows as table_rows
from harness.analysis.compare_sides import BLOCK_LIFETIMES as BLOCK_LIFETIMES
from harness.analysis.compare_sides import MIN_BLOCKS as MIN_BLOCKS
from harness.analysis.compare_sides import Side as Side
from harness.analysis.compare_sides import _journal_side as _journal_side
from harness.analysis.compare_sides import load_runs as load_runs
from harness.analysis.compare_sides import load_side as load_side
from harness.analysis.compare_sides import pool as pool
from harness.analysis.compare_sides import side_from_journal as side_from_journal
from harness.analysis.compare_sides import time_blocks as time_blocks
from harness.analysis.compare_specs import _CHUNK_CELLS as _CHUNK_CELLS
from harness.analysis.compare_specs import ALL_METRICS as ALL_METRICS
from harness.analysis.compare_specs import CHANNEL_KEYS as CHANNEL_KEYS
from harness.analysis.compare_specs import CHANNEL_METRICS as CHANNEL_METRICS
from harness.analysis.compare_specs import DEFAULT_CONFIDENCE as DEFAULT_CONFIDENCE
from harness.analysis.compare_specs import DEFAULT_REPLICATES as DEFAULT_REPLICATES
from harness.analysis.compare_specs import DEFAULT_THRESHOLDS as DEFAULT_THRESHOLDS
from harness.analysis.compare_specs import METRICS as METRICS
from harness.analysis.compare_specs import MIN_TAIL_SAMPLES as MIN_TAIL_SAMPLES
from harness.analysis.compare_specs import PER_REQUEST as PER_REQUEST
from harness.analysis.compare_specs import SPECS as SPECS
from harness.analysis.compare_specs import TOKEN_METRICS as TOKEN_METRICS
from harness.analysis.compare_specs import MetricSpec as MetricSpec
from harness.analysis.compare_specs import _check_metric as _check_metric
from harness.analysis.compare_specs import check_confidence as check_confidence
from harness.analysis.compare_specs import family_confidence as family_confidence
from harness.analysis.compare_specs import load_threshold_file as load_threshold_file
from harness.analysis.compare_specs import parse_threshold as parse_threshold
from harness.analysis.compare_specs import parse_threshold_flags as parse_threshold_flags
from harness.analysis.compare_specs import reference_threshold as reference_threshold

if TYPE_CHECKING:
    from harness.record.journal import Journal


def _worse_space(
    spec: MetricSpec, change: float, lo: float, hi: float
) -> tuple[float, float, float]:
    """(change, low, high) in the worse direction: > 0 is worse."""
    return (change, lo, hi) if spec.better == "lower" else (-change, -hi, -lo)


def _undecided(
    row: dict[str, Any],
    spec: MetricSpec,
    sides: tuple[Side, Side],
    within: tuple[float, float],
    between: tuple[float, float] | None,
    confidence: float,
) -> None:
    """An undecided row's reason and what would decide it: requests and runs per side."""
    pb, pc = sides
    worse, w_lo, w_hi = _worse_space(spec, row["change"], row["ci_low"], row["_hi"])
    limit = row["threshold"] if row["threshold"] is not None else reference_threshold(spec.key)
    n = min(row["samples"]) if spec.metric not in TOKEN_METRICS else min(pb.n, pc.n)
    need = verdicts.requests_needed(n, worse, w_lo, w_hi, limit, _bounded_at(spec, n, confidence))
    runs = tuple(row["runs"])
    per_run = min(pb.n / runs[0], pc.n / runs[1]) * (n / max(min(pb.n, pc.n), 1))
    w_within = _worse_space(spec, row["change"], *within)
    w_between = None if between is None else _worse_space(spec, row["change"], *between)[1:]
    more = verdicts.runs_needed(
        worse, limit, w_within[1:], w_between, (runs[0], runs[1]), per_run, need, confidence
    )
    row["requests_needed"] = need
    row["runs_needed"] = more
    what = (
        "the change is past the threshold but its interval reaches zero"
        if worse > limit
        else "the interval reaches past the threshold"
        if math.isfinite(w_hi) and math.isfinite(w_lo)
        else "the data bound the change on one side only"
    )
    pooled = "" if row["runs"] == [1, 1] else ", pooled over the runs"
    row["reason"] = (
        f"{what}; about {need:,} requests per side would decide it ({n:,} now{pooled}): "
        f"about {more:,} runs per side of this length ({max(runs)} now)"
        + ("" if between is not None else ", at least 3 to measure the spread between runs")
    )


# _judge_row takes _undecided's arguments (and the suspects): the same row seen twice, kept as
# two signatures rather than a bundle object the two would unpack at once.
def _judge_row(
    row: dict[str, Any],
    spec: MetricSpec,
    sides: tuple[Side, Side],
    within: tuple[float, float],
    between: tuple[float, float] | None,
    confidence: float,
    suspects: list[Suspect],
) -> None:
    """The row's verdict (harness.analysis.compare_verdict), and its reason: what would decide
    it, or the health warning whose bound could explain it (compare_health)."""
    lo, hi = row["ci_low"], row["_hi"]
    limit = row["threshold"]
    worse, w_lo, w_hi = _worse_space(spec, row["change"], lo, hi)
    verdict = verdicts.judge(worse, w_lo, w_hi, limit, reference_threshold(spec.key))
    row["verdict"] = verdict
    if verdict in ("INCONCLUSIVE", "not judged"):
        _undecided(row, spec, sides, within, between, confidence)
        return
    if limit is None or not suspects:
        return
    suspects = health.refined(
        spec,
        sides,
        suspects,
        lambda side: float(replicates(side, spec, 0, np.random.default_rng(0))[0]),
        lambda side: _samples(side, spec),
    )
    ch_lo, ch_hi, lo2, hi2 = health.widened(row, lo, hi, suspects)
    # the verdict must hold wherever the bounds put the change and its interval
    outcomes = {
        verdicts.kind(verdicts.judge(*_worse_space(spec, ch, lo2, hi2), limit, limit))
        for ch in (ch_lo, ch_hi)
    }
    if outcomes != {verdicts.kind(verdict)}:
        row["reason"] = (
            f"it would be {verdict}, but "
            + "; ".join(x.text for x in suspects)
            + ", which can make it so"
        )
        row["verdict"] = "INCONCLUSIVE"
        row["held_back"] = True


def _row(
    spec: MetricSpec, bv: float, cv: float, limit: float | None, runs: list[int], method: str
) -> dict[str, Any]:
    return {
        "metric": spec.key,
        "label": spec.label,
        "better": spec.better,
        "baseline": _num(bv),
        "candidate": _num(cv),
        "change": None,
        "ci_low": None,
        "ci_high": None,
        "significant": None,
        "threshold": limit,
        "verdict": "n/a",
        "runs": runs,
        "samples": [0, 0],
        "interval": method or None,
        "confidence": 0.0,
        "reason": None,
        "requests_needed": None,
        "runs_needed": None,
    }


def compare_sides(
    base: Side | list[Side],
    cand: Side | list[Side],
    thresholds: dict[str, float],
    b: int = DEFAULT_REPLICATES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    suspect: dict[str, list[Suspect]] | None = None,
    channels: bool = False,
) -> list[dict[str, Any]]:
    """One row per metric: values, change, its confidence interval, threshold and verdict.
    The channel rows (CHANNEL_METRICS) where `channels` (a side streamed reasoning or tool
    tokens) or a threshold names them.

    A side is one run or a list of runs. Intervals are at `family_confidence`. The interval is
    the wider of the one within runs (order statistics or the bootstrap, on the pooled
    requests) and, with two runs or more on a side, the one from the spread of each run's own
    figure (`compare_stats.between_runs_interval`). `suspect`: metric -> health warnings of
    the results; a gated verdict that a warning's bound could have produced becomes
    INCONCLUSIVE, naming it (`_judge_row`)."""
    base_runs = base if isinstance(base, list) else [base]
    cand_runs = cand if isinstance(cand, list) else [cand]
    pb, pc = pool(base_runs), pool(cand_runs)
    rng = np.random.default_rng(seed)
    confidence = family_confidence(thresholds, confidence)
    rows = []
    for spec in shown_metrics(channels, thresholds):
        bv, cv, lo, hi, method = _within_interval(pb, pc, spec, b, rng, confidence)
        row = _row(spec, bv, cv, thresholds.get(spec.key), [len(base_runs), len(cand_runs)], method)
        row["samples"] = [sample_count(pb, spec), sample_count(pc, spec)]
        row["confidence"] = confidence
        if np.isnan(bv) or np.isnan(cv) or bv == 0 or np.isnan(lo) or np.isnan(hi):
            rows.append(row)
            continue
        change = cv / bv - 1
        row["change"] = float(change)
        within, between = (lo, hi), None
        if len(base_runs) > 1 or len(cand_runs) > 1:
            # the runs' own figures, with the time a simulator lost taken out where every run
            # logged it (its stamps' known lateness is no spread of the model's figures; the
            # health rule moves the change to the model's: compare_health.refined)
            fixed = all(r.fixed is not None for r in base_runs + cand_runs)
            between = stats.between_runs_interval(
                [replicates(r.fixed or r if fixed else r, spec, 0, rng)[0] for r in base_runs],
                [replicates(r.fixed or r if fixed else r, spec, 0, rng)[0] for r in cand_runs],
                change,
                confidence,
            )
            if between is not None:
                lo, hi = min(lo, between[0]), max(hi, between[1])
                row["interval"] = f"{method}, and t over runs"
        row["ci_low"] = float(lo)
        row["ci_high"] = None if math.isinf(hi) else float(hi)  # None: unbounded above
        row["_hi"] = float(hi)
        row["significant"] = bool(lo > 0 or hi < 0)
        _judge_row(
            row, spec, (pb, pc), within, between, confidence, (suspect or {}).get(spec.key, [])
        )
        del row["_hi"]
        rows.append(row)
    return rows


def shown_metrics(channels: bool, thresholds: dict[str, float]) -> list[MetricSpec]:
    """The rows a comparison has: every metric of METRICS, and the channel rows where a side
    had channels or a threshold asks for one."""
    return [m for m in ALL_METRICS if m.key not in CHANNEL_KEYS or channels or m.key in thresholds]


def results_have_channels(results: list[dict[str, Any]]) -> bool:
    """Whether any of these results streamed reasoning or tool tokens (its summary's
    tokens.channels counts requests with them; a result written before channels has none)."""
    from harness.analysis.report_text import has_channels  # the reports' own predicate

    return any(has_channels(r.get("summary") or {}) for r in results)


def _num(v: float) -> float | None:
    return None if np.isnan(v) else float(v)


# ---------------------------------------------------------------- health and compatibility


def suspect_metrics(
    baseline: list[tuple[str, dict[str, Any]]], candidate: list[tuple[str, dict[str, Any]]]
) -> dict[str, list[Suspect]]:
    """metric -> the (file, warning)s that can move it, with their side, bias and bound
    (harness.analysis.compare_health)."""
    return health.suspect_metrics(baseline, candidate, list(SPECS))


def overall_status(rows: list[dict[str, Any]]) -> str:
    """regression (any REGRESSION), inconclusive (a gated metric not judged), or pass."""
    found = {r["verdict"] for r in rows}
    if "REGRESSION" in found:
        return "regression"
    return "inconclusive" if "INCONCLUSIVE" in found else "pass"


EXIT_CODES = {"pass": 0, "regression": 1, "inconclusive": 3}  # 2: bad input


def combined_status(statuses: list[str]) -> str:
    for s in ("regression", "inconclusive"):
        if s in statuses:
            return s
    return "pass"


# ---------------------------------------------------------------- one comparison, one report

ONE_RUN_NOTE = (
    "One run per side: the intervals see the noise within a run only; the noise between runs "
    "(the machine, warm-up, a server or simulator short of CPU) is unmeasured. Give each side "
    "several runs (run --repeat N) to measure it."
)


def _name(doc: dict[str, Any], fallback: str) -> str:
    return str(doc.get("_path") or fallback)


def compare_results(
    base: list[dict[str, Any]],
    cand: list[dict[str, Any]],
    bname: str,
    cname: str,
    thresholds: dict[str, float],
    *,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = 0,
    force: bool = False,
    point: str | None = None,
    journals: tuple[list[Journal], list[Journal]] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    slo_gates: bool = False,
) -> dict[str, Any]:
    """One comparison of a baseline side with a candidate side, each one result or several
    (runs of one setting). `journals`: the runs' journals in memory (tests, tools); otherwise
    they are found beside the results. `slo_gates` (the default thresholds): the scenarios'
    SLO metrics are gated too (`slo_thresholds`). Raises UsageError for results that cannot be
    compared."""
    named_b = [(_name(d, f"{bname}[{i}]"), d) for i, d in enumerate(base)]
    named_c = [(_name(d, f"{cname}[{i}]"), d) for i, d in enumerate(cand)]
    notes: list[str] = []
    first_name, first = named_b[0]
    for name, doc in named_b[1:] + named_c:
        for note in check_compatible(first, doc, first_name, name, force):
            if note not in notes:
                notes.append(note)
    if journals is not None:
        runs_b = [side_from_journal(d, j) for d, j in zip(base, journals[0], strict=True)]
        runs_c = [side_from_journal(d, j) for d, j in zip(cand, journals[1], strict=True)]
    else:
        runs_b, runs_c = load_runs(base), load_runs(cand)
    if len(base) == 1 and len(cand) == 1:
        notes.append(ONE_RUN_NOTE)
    elif len(base) == 1 or len(cand) == 1:
        notes.append(
            f"The variation between runs is measured from {max(len(base), len(cand))} runs of "
            "one side only, and assumed the same for the other."
        )
    thresholds = _gates(thresholds, base + cand, slo_gates, notes)
    notes += health.health_notes(named_b, named_c)
    rows = compare_sides(
        runs_b,
        runs_c,
        thresholds,
        b=replicates,
        seed=seed,
        confidence=confidence,
        suspect=suspect_metrics(named_b, named_c),
        channels=results_have_channels(base + cand),
    )
    data = (
        "per-request journals"
        if runs_b[0].source == runs_c[0].source == "journal"
        else "HDR histograms (a journal was missing: ITL intervals ignore per-request "
        "clustering; no throughput interval)"
    )
    return {
        "baseline": bname,
        "candidate": cname,
        "baseline_runs": [n for n, _ in named_b],
        "candidate_runs": [n for n, _ in named_c],
        "point": point,
        "rows": rows,
        "notes": notes,
        "data": data,
        "status": overall_status(rows),
        "decide": what_decides(rows),
    }


def _gates(
    thresholds: dict[str, float], results: list[dict[str, Any]], slo_gates: bool, notes: list[str]
) -> dict[str, float]:
    """The thresholds a comparison gates on: the given ones, the scenarios' SLO metrics where
    `slo_gates`, less goodput where the sides' SLOs differ (each with its note)."""
    thresholds = dict(thresholds)
    if slo_gates:
        added = {k: v for k, v in slo_thresholds(results).items() if k not in thresholds}
        thresholds.update(added)
        if added:
            notes.append(
                "Gated because the scenario's [slo] names them: "
                + ", ".join(f"{k} {v * 100:g}%" for k, v in added.items())
                + "."
            )
    slos_differ = any("SLOs differ" in n for n in notes)
    if slos_differ and thresholds.pop("goodput_requests_per_s", None) is not None:
        notes.append("Goodput is not gated: the two sides count it against different SLOs.")
    return thresholds


def slo_thresholds(results: list[dict[str, Any]]) -> dict[str, float]:
    """The compare metrics the results' scenarios set an SLO on (`[slo]`, `--slo`), each at its
    reference threshold (10 % on latency figures): gated by default."""
    out: dict[str, float] = {}
    for r in results:
        for key in (r.get("scenario") or {}).get("slo") or {}:
            if key in SPECS:
                out[key] = reference_threshold(key)
    return out


def what_decides(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """For a comparison whose gate is undecided: the most requests and runs per side any
    undecided gated row asks for, and whether a health warning holds a row back (more runs
    of the same machine may not help: rerun where it is quiet). None when decided."""
    open_rows = [r for r in rows if r["verdict"] == "INCONCLUSIVE"]
    if not open_rows or any(r["verdict"] == "REGRESSION" for r in rows):
        return None
    counted = [r for r in open_rows if r.get("runs_needed")]
    return {
        "requests_per_side": max((r["requests_needed"] for r in counted), default=None),
        "runs_per_side": max((r["runs_needed"] for r in counted), default=None),
        "held_back": [r["metric"] for r in open_rows if r.get("held_back")],
    }


def build_report(
    comparisons: list[dict[str, Any]],
    thresholds: dict[str, Any],
    replicates: int,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict[str, Any]:
    """The report `compare` prints and the API returns: thresholds {source, values}."""
    return {
        "kind": "compare",
        "thresholds": thresholds,
        "comparisons": comparisons,
        "status": combined_status([c["status"] for c in comparisons]),
        "replicates": replicates,
        "confidence": confidence,
    }
