"""Regression compare: baseline vs candidate results, metric by metric, judged by significance.

Theory of operation
-------------------
Every metric knows its direction (latencies: lower is better; throughput: higher). The change
is `candidate / baseline - 1` of the figure the results report. Its 95 % confidence interval
comes from a bootstrap over *requests*: each replicate draws the baseline's requests and the
candidate's requests with replacement (independently) and recomputes the figure on each side
from the journal's per-request stamps. Resampling whole requests (a cluster bootstrap) keeps
the tokens of one request together, so ITL, whose gaps within a request are correlated, does
not get a falsely narrow interval; per-request figures (TTFT, TPOT, E2E) are plain bootstraps.
Throughput is the output tokens of the resampled requests that arrived inside the measured
window, over its length. When a journal is missing, latencies fall back to the result's HDR
histograms (values treated as independent: narrower intervals for ITL, said in the output).

A threshold is crossed only when the change is worse than the limit AND the whole interval
lies on the worse side of zero: noise does not fail a build, a real regression does.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# the report, re-exported (`X as X`: an explicit re-export for type checkers)
from harness.analysis.compare_report import HEAD as HEAD
from harness.analysis.compare_report import render as render
from harness.analysis.compare_report import table_rows as table_rows
from harness.catalogue import BY_NAME, PER_REQUEST_SLOS, stat_label
from harness.errors import ConfigError, UsageError
from harness.record import hist
from harness.units import parse_percent

DEFAULT_REPLICATES = 1000  # percentile intervals settle to ~1 % with 1000 draws
DEFAULT_CONFIDENCE = 0.95
MIN_TAIL_SAMPLES = 5  # a percentile is judged only with this many samples above it
_CHUNK_CELLS = 4_000_000  # replicate x sample cells per block: bounds memory (~32 MB)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    key: str
    label: str
    better: str  # "lower" or "higher"
    metric: str  # per-request / token metric, or "throughput"
    stat: str  # "p50", "p99", "mean", or a throughput key


def _better(name: str) -> str:
    return "lower" if BY_NAME[name].lower_is_better else "higher"


def _latency(metric: str, stat: str) -> MetricSpec:
    return MetricSpec(f"{metric}_{stat}", stat_label(metric, stat), _better(metric), metric, stat)


def _throughput(name: str) -> MetricSpec:
    return MetricSpec(name, BY_NAME[name].label, _better(name), "throughput", name)


# Names, labels and directions come from the metric catalogue (harness.catalogue).
METRICS: tuple[MetricSpec, ...] = (
    _latency("ttft", "p50"),
    _latency("ttft", "p99"),
    _latency("ttft_from_schedule", "p99"),
    _latency("itl", "p50"),
    _latency("itl", "p99"),
    _latency("tpot", "mean"),
    _latency("tpot", "p99"),
    _latency("e2e", "p99"),
    _latency("e2e_from_schedule", "p99"),
    _throughput("output_tokens_per_s"),
    _throughput("requests_per_s"),
    _throughput("goodput_requests_per_s"),
)
SPECS = {m.key: m for m in METRICS}
# Defaults: 10 % on every latency figure (p50, p99, mean), 5 % on throughput; each counts only
# when the change is also significant. p99s need many samples (MIN_TAIL_SAMPLES), so short CI
# runs are judged mostly on the p50s and the mean TPOT.
DEFAULT_THRESHOLDS: dict[str, float] = {
    **{m.key: 0.10 for m in METRICS if m.metric != "throughput"},
    "output_tokens_per_s": 0.05,
    "goodput_requests_per_s": 0.05,
}
PER_REQUEST = PER_REQUEST_SLOS  # the metrics a request has one value of


# ---------------------------------------------------------------- thresholds


def parse_threshold(text: str, where: str, key: str) -> float:
    """A regression threshold: '10%' or '0.1' -> 0.1 (0 to 1000 %); raises ConfigError naming
    where and key."""
    try:
        v = parse_percent(str(text))
    except ValueError:
        raise ConfigError(
            where, key, f"expected a percentage such as 10% or a fraction such as 0.1, got {text!r}"
        ) from None
    if not 0 <= v < 10:
        raise ConfigError(where, key, f"expected a percentage between 0% and 1000%, got {text!r}")
    return v


def _check_metric(key: str, where: str) -> None:
    if key not in SPECS:
        raise ConfigError(where, key, f"unknown metric; allowed: {', '.join(SPECS)}")


def parse_threshold_flags(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(
                f"--max-regression {item!r}: expected METRIC=PERCENT, e.g. ttft_p99=10%"
            )
        key = key.strip()
        _check_metric(key, "--max-regression")
        out[key] = parse_threshold(value, "--max-regression", key)
    return out


def load_threshold_file(path: str) -> dict[str, float]:
    """A TOML file with a `[max_regression]` table of METRIC = "PERCENT"."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(path, "", f"cannot read: {exc}") from None
    extra = set(doc) - {"max_regression"}
    if extra:
        raise ConfigError(path, sorted(extra)[0], "unknown key; allowed: max_regression")
    table = doc.get("max_regression", {})
    if not isinstance(table, dict):
        raise ConfigError(path, "max_regression", 'expected a table of METRIC = "PERCENT"')
    out = {}
    for key, value in table.items():
        _check_metric(key, path)
        out[key] = parse_threshold(value, path, f"max_regression.{key}")
    return out


# ---------------------------------------------------------------- per-request data


@dataclass
class Side:
    """One side's per-request data, pooled over its results (repeats)."""

    n: int = 0  # requests (clusters)
    values: dict[str, np.ndarray] = field(
        default_factory=dict
    )  # per-request metric, ms, NaN if none
    itl_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    itl_owner: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tokens_in_window: np.ndarray = field(default_factory=lambda: np.zeros(0))
    done_in_window: np.ndarray = field(default_factory=lambda: np.zeros(0))
    good_in_window: np.ndarray = field(default_factory=lambda: np.zeros(0))
    window_s: float = 0.0
    source: str = "journal"  # or "histogram"
    hists: dict[str, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict
    )  # values_ms, counts


def _journal_side(result: dict[str, Any]) -> Side | None:
    from harness.catalogue import SloLimit
    from harness.record.journal import find_journal, read_journal
    from harness.record.metrics import meets_per_request_slos, per_request_values_ns

    path = find_journal(result, Path(result["_path"]) if result.get("_path") else None)
    if path is None:
        return None
    try:
        j = read_journal(Path(path))
    except (OSError, ValueError):
        return None
    measured = [i for i, p in enumerate(result["phases"]) if not p["warmup"]]
    c = j.columns()
    rows = np.isin(c.phase, measured) & ~c.retried
    windows = [
        tuple(int(x * 1e9) for x in result["phases"][i]["window_s"])
        for i in measured
        if result["phases"][i].get("window_s")
    ]
    vals = per_request_values_ns(c)
    slos = [
        SloLimit(s["name"], s["metric"], s["stat"], s["limit_s"]) for s in j.header.get("slo", [])
    ]
    good = meets_per_request_slos(c, [s for s in slos if s.stat is None])

    def inside(t: np.ndarray) -> np.ndarray:
        m = np.zeros(len(t), dtype=bool)
        for s, e in windows:
            m |= (t >= s) & (t < e)
        return m

    owner = c.owner()
    stamp_in = inside(c.stamps)
    tokens_in = np.bincount(owner[stamp_in], weights=c.tokens[stamp_in], minlength=c.n)
    done = c.ok & inside(c.end)
    idx = np.flatnonzero(rows)
    remap = np.full(c.n, -1, dtype=np.int64)
    remap[idx] = np.arange(len(idx))
    # ITL samples per token, owned by their request (same rule as metrics.token_gaps_ns).
    itl, own = np.zeros(0), np.zeros(0, dtype=np.int64)
    if len(c.stamps) >= 2:
        gaps = np.diff(c.stamps).astype(np.float64)
        same = owner[1:] == owner[:-1]
        sel = same & (rows & c.ok)[owner[1:]]
        k = np.maximum(c.tokens[1:][sel], 1)
        itl = np.repeat(gaps[sel] / k, k) / 1e6
        own = remap[np.repeat(owner[1:][sel], k)]
    side = Side(
        n=len(idx),
        itl_ms=itl,
        itl_owner=own,
        tokens_in_window=tokens_in[idx].astype(np.float64),
        done_in_window=done[idx].astype(np.float64),
        good_in_window=(done & good)[idx].astype(np.float64),
        window_s=sum(e - s for s, e in windows) / 1e9,
    )
    side.values = {m: vals[m][idx] / 1e6 for m in PER_REQUEST}
    return side


def _hist_side(result: dict[str, Any]) -> Side:
    side = Side(source="histogram")
    for name, enc in (result.get("histograms", {}).get("summary") or {}).items():
        h = hist.decode(enc)
        v, n = [], []
        for it in h.get_recorded_iterator():
            v.append(it.value_iterated_to / 1e3)
            n.append(it.count_at_value_iterated_to)
        side.hists[name] = (np.asarray(v, dtype=np.float64), np.asarray(n, dtype=np.int64))
    thr = result["summary"]["throughput"]
    side.window_s = thr["window_s"]
    side.n = int(result["summary"]["requests"]["completed"])
    return side


def _concat(sides: list[Side]) -> Side:
    if len(sides) == 1:
        return sides[0]
    out = Side(n=sum(s.n for s in sides), window_s=sum(s.window_s for s in sides))
    offs = np.cumsum([0] + [s.n for s in sides[:-1]])
    out.values = {m: np.concatenate([s.values[m] for s in sides]) for m in PER_REQUEST}
    out.itl_ms = np.concatenate([s.itl_ms for s in sides])
    out.itl_owner = np.concatenate([s.itl_owner + o for s, o in zip(sides, offs, strict=True)])
    for f in ("tokens_in_window", "done_in_window", "good_in_window"):
        setattr(out, f, np.concatenate([getattr(s, f) for s in sides]))
    return out


def load_side(results: list[dict[str, Any]]) -> Side:
    """Per-request data of one side from its journals; HDR histograms when a journal is gone."""
    sides = [_journal_side(r) for r in results]
    if all(s is not None for s in sides):
        return _concat([s for s in sides if s is not None])
    if len(results) == 1:
        return _hist_side(results[0])
    merged = _hist_side(results[0])
    for r in results[1:]:  # pool histograms bucket by bucket
        other = _hist_side(r)
        for k, (v, n) in other.hists.items():
            v0, n0 = merged.hists.get(k, (np.zeros(0), np.zeros(0, dtype=np.int64)))
            allv = np.concatenate([v0, v])
            alln = np.concatenate([n0, n])
            u, inv = np.unique(allv, return_inverse=True)
            merged.hists[k] = (u, np.bincount(inv, weights=alln).astype(np.int64))
        merged.window_s += other.window_s
        merged.n += other.n
    return merged


# ---------------------------------------------------------------- bootstrap


def _weights(n: int, b: int, rng: np.random.Generator) -> np.ndarray:
    """(b+1) x n: how often each of n requests is drawn in each replicate; row 0 is the data.

    Poisson bootstrap: each request's weight is Poisson(1), so the number of requests varies
    from replicate to replicate as the number of arrivals of an open-loop run does; with a
    fixed count, throughput of equal-sized requests would get a zero-width interval."""
    w = np.ones((b + 1, n), dtype=np.float64)
    if n == 0 or b == 0:
        return w
    w[1:] = rng.poisson(1.0, size=(b, n))
    return w


def _weighted_percentile(
    values: np.ndarray, owner: np.ndarray, w: np.ndarray, q: float
) -> np.ndarray:
    """Per replicate (row of w): the smallest value with at least q % of the weight at or below
    it (numpy's inverted_cdf, as the result computes percentiles). NaN where no weight."""
    keep = ~np.isnan(values)
    values, owner = values[keep], owner[keep]
    out = np.full(w.shape[0], np.nan)
    if len(values) == 0:
        return out
    order = np.argsort(values, kind="stable")
    sv, so = values[order], owner[order]
    rows = max(1, _CHUNK_CELLS // max(len(sv), 1))
    for a in range(0, w.shape[0], rows):
        cw = np.cumsum(w[a : a + rows][:, so], axis=1)
        total = cw[:, -1]
        target = total * (q / 100.0)
        pos = np.minimum((cw < target[:, None] - 1e-9).sum(axis=1), len(sv) - 1)
        out[a : a + rows] = np.where(total > 0, sv[pos], np.nan)
    return out


def _hist_replicates(
    v: np.ndarray, n: np.ndarray, b: int, rng: np.random.Generator, stat: str
) -> np.ndarray:
    total = int(n.sum())
    out = np.full(b + 1, np.nan)
    if total == 0:
        return out
    counts = np.vstack([n[None, :], rng.multinomial(total, n / total, size=b)]).astype(np.float64)
    if stat == "mean":
        means: np.ndarray = (counts @ v) / counts.sum(axis=1)
        return means
    q = float(stat[1:]) if stat != "p999" else 99.9
    cw = np.cumsum(counts, axis=1)
    pos = np.minimum((cw < (cw[:, -1] * q / 100.0)[:, None] - 1e-9).sum(axis=1), len(v) - 1)
    quantiles: np.ndarray = v[pos]
    return quantiles


def replicates(side: Side, spec: MetricSpec, b: int, rng: np.random.Generator) -> np.ndarray:
    """The figure on the data (index 0) and on b bootstrap replicates (1..b)."""
    if side.source == "histogram":
        if spec.metric == "throughput":
            return np.full(b + 1, np.nan)
        v, n = side.hists.get(spec.metric, (np.zeros(0), np.zeros(0, dtype=np.int64)))
        return _hist_replicates(v, n, b, rng, spec.stat)
    w = _weights(side.n, b, rng)
    if spec.metric == "throughput":
        col = {
            "output_tokens_per_s": side.tokens_in_window,
            "requests_per_s": side.done_in_window,
            "goodput_requests_per_s": side.good_in_window,
        }[spec.stat]
        return (w @ col) / side.window_s if side.window_s > 0 else np.full(b + 1, np.nan)
    if spec.metric == "itl":
        values, owner = side.itl_ms, side.itl_owner
    else:
        values, owner = side.values[spec.metric], np.arange(side.n)
    if spec.stat == "mean":
        has = ~np.isnan(values)
        sums = np.bincount(owner[has], weights=values[has], minlength=side.n)
        cnt = np.bincount(owner[has], minlength=side.n).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (w @ sums) / (w @ cnt)
    return _weighted_percentile(values, owner, w, float(spec.stat[1:]))


# ---------------------------------------------------------------- compare


def sample_count(side: Side, spec: MetricSpec) -> int:
    """Samples behind a figure (tokens for ITL, requests otherwise)."""
    if spec.metric == "throughput":
        return side.n
    if side.source == "histogram":
        return int(side.hists.get(spec.metric, (None, np.zeros(0)))[1].sum())
    v = side.itl_ms if spec.metric == "itl" else side.values[spec.metric]
    return int((~np.isnan(v)).sum())


def reported(result: dict[str, Any], spec: MetricSpec) -> float | None:
    s = result["summary"]
    block = s["throughput"] if spec.metric == "throughput" else s["latency_ms"][spec.metric]
    value: float | None = block[spec.stat]  # the result document's figure (None: no samples)
    return value


def compare_sides(
    base: Side,
    cand: Side,
    thresholds: dict[str, float],
    b: int = DEFAULT_REPLICATES,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[dict[str, Any]]:
    """One row per metric: values, change, its confidence interval, threshold and verdict."""
    rng = np.random.default_rng(seed)
    rows = []
    lo_q, hi_q = (1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100
    for spec in METRICS:
        rb = replicates(base, spec, b, rng)
        rc = replicates(cand, spec, b, rng)
        bv, cv = rb[0], rc[0]
        row: dict[str, Any] = {
            "metric": spec.key,
            "label": spec.label,
            "better": spec.better,
            "baseline": _num(bv),
            "candidate": _num(cv),
            "change": None,
            "ci_low": None,
            "ci_high": None,
            "significant": None,
            "threshold": thresholds.get(spec.key),
            "verdict": "n/a",
        }
        if np.isnan(bv) or np.isnan(cv) or bv == 0:
            rows.append(row)
            continue
        change = cv / bv - 1
        row["change"] = float(change)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios = rc[1:] / rb[1:] - 1
        ratios = ratios[np.isfinite(ratios)]
        tail = 1.0 if not spec.stat.startswith("p") else 1 - float(spec.stat[1:]) / 100
        few = min(sample_count(base, spec), sample_count(cand, spec)) * tail < MIN_TAIL_SAMPLES
        row["samples"] = [sample_count(base, spec), sample_count(cand, spec)]
        if few:
            row["verdict"] = "too few samples"
            rows.append(row)
            continue
        if len(ratios) >= 20:
            lo, hi = np.percentile(ratios, [lo_q, hi_q])
            row["ci_low"], row["ci_high"] = float(lo), float(hi)
            row["significant"] = bool(lo > 0 or hi < 0)
        worse = change > 0 if spec.better == "lower" else change < 0
        worse_sig = row["significant"] is True and (
            (row["ci_low"] > 0) if spec.better == "lower" else (row["ci_high"] < 0)
        )
        better_sig = row["significant"] is True and not worse_sig
        limit = thresholds.get(spec.key)
        if limit is not None and worse and abs(change) > limit:
            row["verdict"] = "REGRESSION" if worse_sig else "noise (not significant)"
        elif worse_sig:
            row["verdict"] = "worse (within threshold)"
        elif better_sig:
            row["verdict"] = "better"
        else:
            row["verdict"] = "same"
        rows.append(row)
    return rows


def _num(v: float) -> float | None:
    return None if np.isnan(v) else float(v)


# Target kinds whose figures come from the simulator's model, not from hardware: a run against
# the simulator, and a `predict` result (the same model on its virtual clock).
SIMULATED_KINDS = ("simulator", "prediction")


def check_compatible(
    base: dict[str, Any], cand: dict[str, Any], base_name: str, cand_name: str, force: bool
) -> list[str]:
    """Reasons two results may not be compared (raises UsageError unless force); returns notes."""
    problems, notes = [], []
    kb, kc = base["target"].get("kind"), cand["target"].get("kind")
    if (kb in SIMULATED_KINDS) != (kc in SIMULATED_KINDS):
        problems.append(
            f"{base_name} was measured on {kb!r} and {cand_name} on {kc!r}: a simulator's "
            "figures come from its model, not a GPU, so the change would mean nothing"
        )
    if base.get("scenario_name") != cand.get("scenario_name"):
        problems.append(
            f"different scenarios: {base.get('scenario_name')!r} vs {cand.get('scenario_name')!r}"
        )
    else:
        ignore = {"seed", "sim", "description", "target", "name"}
        sb = {k: v for k, v in (base.get("scenario") or {}).items() if k not in ignore}
        sc = {k: v for k, v in (cand.get("scenario") or {}).items() if k not in ignore}
        differ = sorted(k for k in set(sb) | set(sc) if sb.get(k) != sc.get(k))
        if differ:
            problems.append(
                f"scenario {base.get('scenario_name')!r} differs in {', '.join(differ)}: "
                "the two runs did not offer the same load"
            )
    if problems and not force:
        raise UsageError(
            f"cannot compare {base_name} with {cand_name}: "
            + "; ".join(problems)
            + " (use --force to compare anyway)"
        )
    notes += [f"forced: {p}" for p in problems]
    for name, kind in ((base_name, kb), (cand_name, kc)):
        if kind == "prediction":
            notes.append(
                f"{name} is a prediction (the simulator's virtual clock), not a measurement"
            )
    if (base.get("scenario") or {}).get("sim") != (cand.get("scenario") or {}).get("sim"):
        notes.append(
            f"simulator settings differ: {base['scenario'].get('sim')} vs {cand['scenario'].get('sim')}"
        )
    return notes


def overall_status(rows: list[dict[str, Any]]) -> str:
    return "regression" if any(r["verdict"] == "REGRESSION" for r in rows) else "pass"
