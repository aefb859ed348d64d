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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.analysis import compare_health as health
from harness.analysis import compare_stats as stats
from harness.analysis import compare_verdict as verdicts
from harness.analysis.compare_compat import SIMULATED_KINDS as SIMULATED_KINDS
from harness.analysis.compare_compat import check_compatible as check_compatible
from harness.analysis.compare_health import Suspect as Suspect
from harness.analysis.compare_health import health_problems as health_problems

# the report, re-exported (`X as X`: an explicit re-export for type checkers)
from harness.analysis.compare_report import HEAD as HEAD
from harness.analysis.compare_report import render as render
from harness.analysis.compare_report import table_rows as table_rows
from harness.catalogue import BY_NAME, PER_REQUEST_SLOS, stat_label
from harness.config.validate import load_toml_file
from harness.errors import ConfigError, UsageError
from harness.record import hist
from harness.units import parse_percent

if TYPE_CHECKING:
    from harness.record.journal import Journal
    from harness.record.metrics import Columns

DEFAULT_REPLICATES = 1000  # percentile intervals settle to ~1 % with 1000 draws
DEFAULT_CONFIDENCE = 0.95
MIN_TAIL_SAMPLES = 5  # a bootstrapped percentile needs this many samples above it
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
# The channel rows (issue 25): shown where either side streamed reasoning or tool tokens, or
# where a threshold names one (`--max-regression ttfo_p99=10%`); without channels TTFO is TTFT
# and ITL answer is ITL, so a run that has none gets none of them unless asked. Not gated by
# default: the default gates are the same for every pair of runs.
CHANNEL_METRICS: tuple[MetricSpec, ...] = (
    _latency("ttfo", "p50"),
    _latency("ttfo", "p99"),
    _latency("ttft_tool", "p99"),
    _latency("itl_answer", "p99"),
    _latency("itl_reasoning", "p99"),
    _latency("itl_tool", "p99"),
)
# Every row in report order: a channel row after the row it refines.
ALL_METRICS: tuple[MetricSpec, ...] = (
    *METRICS[:3],
    *CHANNEL_METRICS[:3],
    *METRICS[3:5],
    *CHANNEL_METRICS[3:],
    *METRICS[5:],
)
SPECS = {m.key: m for m in ALL_METRICS}
CHANNEL_KEYS = frozenset(m.key for m in CHANNEL_METRICS)
TOKEN_METRICS = ("itl", "itl_answer", "itl_reasoning", "itl_tool")  # samples per token
# Defaults: 10 % on every latency figure (p50, p99, mean), 5 % on throughput; each counts only
# when the change is also significant. A p99 of a short run is judged only when it changed a
# lot; otherwise it is INCONCLUSIVE, with the requests it needs.
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
    doc = load_toml_file(Path(path))  # the one TOML loader: bounded size and nesting
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
    # per channel (`itl_answer`, ...): (samples ms, owner), as itl_ms / itl_owner
    channel_itl: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # time block per request (harness.analysis.compare.time_blocks): the bootstrap draws blocks
    block: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tokens_in_window: np.ndarray = field(default_factory=lambda: np.zeros(0))
    done_in_window: np.ndarray = field(default_factory=lambda: np.zeros(0))
    good_in_window: np.ndarray = field(default_factory=lambda: np.zeros(0))
    window_s: float = 0.0
    source: str = "journal"  # or "histogram"
    hists: dict[str, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict
    )  # values_ms, counts
    # health, sample by sample (compare_health.refined): the side with the time its simulator
    # lost taken out of every stamp (None: not known), its client's event-loop lag probes (wall
    # ms), the speedup, and the share of its requests that changed places by a late send
    fixed: Side | None = None
    loop_lag_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    speedup: float = 1.0
    overtaken: float = 0.0
    send_lag_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per request, model ms

    def token_samples(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(samples ms, owner) of a per-token metric: ITL, or ITL of one channel."""
        if metric == "itl":
            return self.itl_ms, self.itl_owner
        return self.channel_itl.get(metric, (np.zeros(0), np.zeros(0, dtype=np.int64)))


def _journal_side(result: dict[str, Any]) -> Side | None:
    from harness.record.journal import find_journal, read_journal

    path = find_journal(result, Path(result["_path"]) if result.get("_path") else None)
    if path is None:
        return None
    try:
        j = read_journal(Path(path))
    except (OSError, ValueError):
        return None
    return side_from_journal(result, j)


def side_from_journal(result: dict[str, Any], j: Journal) -> Side:
    """One run's per-request data from its result and its journal (read, or in memory)."""
    from harness.analysis.clock import model_columns, sim_speedup
    from harness.catalogue import SloLimit
    from harness.record.metrics import meets_per_request_slos, per_request_values_ns

    measured = [i for i, p in enumerate(result["phases"]) if not p["warmup"]]
    c = model_columns(j)  # the result's (model) time, as its phases' windows are
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

    stamp_in = inside(c.stamps)
    tokens_in = np.bincount(c.owner()[stamp_in], weights=c.tokens[stamp_in], minlength=c.n)
    done = c.ok & inside(c.end)
    idx = np.flatnonzero(rows)
    itl, own, per_channel = _itl_samples(c, rows, idx)
    side = Side(
        n=len(idx),
        block=time_blocks(c.sent[idx], c.intended[idx], c.end[idx]),
        itl_ms=itl,
        itl_owner=own,
        channel_itl=per_channel,
        tokens_in_window=tokens_in[idx].astype(np.float64),
        done_in_window=done[idx].astype(np.float64),
        good_in_window=(done & good)[idx].astype(np.float64),
        window_s=sum(e - s for s, e in windows) / 1e9,
    )
    side.values = {m: vals[m][idx] / 1e6 for m in PER_REQUEST}
    end = j.end or {}
    side.speedup = float(sim_speedup(j.header))
    side.loop_lag_ms = np.asarray(end.get("loop_lag_ns") or [], dtype=np.float64) / 1e6
    side.overtaken = health.overtaken_share(c.intended[idx], c.sent[idx])
    side.send_lag_ms = vals["send_lag"][idx] / 1e6
    gaps = (end.get("simulator") or {}).get("lost_gaps_ns")
    if isinstance(gaps, list) and isinstance(end.get("t0_ns"), int):
        c2 = health.fixed_columns(c, health.lost_clock(gaps, end["t0_ns"], side.speedup))
        vals2 = per_request_values_ns(c2)
        itl2, own2, chan2 = _itl_samples(c2, rows, idx)
        side.fixed = dataclasses.replace(
            side, itl_ms=itl2, itl_owner=own2, channel_itl=chan2, fixed=None
        )
        side.fixed.values = {m: vals2[m][idx] / 1e6 for m in PER_REQUEST}
    return side


def _itl_samples(
    c: Columns, rows: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """ITL samples per token (ms) and their owners (the request's place among `idx`), by the
    rule of metrics.token_gaps_ns; per channel, the gaps between two events of the channel
    (metrics.channel_gaps_ns)."""
    from harness.record.records import CHANNEL_NAMES, Channel

    owner = c.owner()
    chan = c.channel if c.channel is not None else np.zeros(len(c.stamps), dtype=np.int8)
    remap = np.full(c.n, -1, dtype=np.int64)
    remap[idx] = np.arange(len(idx))
    itl, own = np.zeros(0), np.zeros(0, dtype=np.int64)
    per_channel: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if len(c.stamps) >= 2:
        gaps = np.diff(c.stamps).astype(np.float64)
        same = owner[1:] == owner[:-1]
        base_sel = same & (rows & c.ok)[owner[1:]]

        def per_token(sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            k = np.maximum(c.tokens[1:][sel], 1)
            return np.repeat(gaps[sel] / k, k) / 1e6, remap[np.repeat(owner[1:][sel], k)]

        itl, own = per_token(base_sel)
        for ch, name in zip(Channel, CHANNEL_NAMES, strict=True):
            in_ch = (chan[1:] == ch) & (chan[:-1] == ch)
            per_channel[f"itl_{name}"] = per_token(base_sel & in_ch)
    return itl, own, per_channel


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
    block_offs = np.cumsum([0] + [int(s.block.max(initial=-1)) + 1 for s in sides[:-1]])
    out.block = np.concatenate([s.block + o for s, o in zip(sides, block_offs, strict=True)])
    out.itl_ms = np.concatenate([s.itl_ms for s in sides])
    out.itl_owner = np.concatenate([s.itl_owner + o for s, o in zip(sides, offs, strict=True)])
    for name in TOKEN_METRICS[1:]:
        parts = [(s.token_samples(name), o) for s, o in zip(sides, offs, strict=True)]
        out.channel_itl[name] = (
            np.concatenate([v for (v, _), _ in parts]),
            np.concatenate([w + o for (_, w), o in parts]),
        )
    for f in ("tokens_in_window", "done_in_window", "good_in_window"):
        setattr(out, f, np.concatenate([getattr(s, f) for s in sides]))
    out.loop_lag_ms = np.concatenate([s.loop_lag_ms for s in sides])
    out.send_lag_ms = np.concatenate([s.send_lag_ms for s in sides])
    out.speedup = sides[0].speedup
    out.overtaken = float(
        np.average([s.overtaken for s in sides], weights=[s.n + 1e-9 for s in sides])
    )
    if all(s.fixed is not None for s in sides):
        out.fixed = _concat([s.fixed for s in sides if s.fixed is not None])
    return out


def load_runs(results: list[dict[str, Any]]) -> list[Side]:
    """Each result's per-request data from its journal; every run's HDR histograms when a
    journal is gone (one side is read one way)."""
    sides = [_journal_side(r) for r in results]
    if all(s is not None for s in sides):
        return [s for s in sides if s is not None]
    return [_hist_side(r) for r in results]


def pool(runs: list[Side]) -> Side:
    """One side's runs pooled: requests concatenated, or histograms merged bucket by bucket."""
    if runs[0].source == "journal":
        return _concat(runs)
    merged = Side(source="histogram", n=runs[0].n, window_s=runs[0].window_s)
    merged.hists = dict(runs[0].hists)
    for other in runs[1:]:
        for k, (v, n) in other.hists.items():
            v0, n0 = merged.hists.get(k, (np.zeros(0), np.zeros(0, dtype=np.int64)))
            allv = np.concatenate([v0, v])
            alln = np.concatenate([n0, n])
            u, inv = np.unique(allv, return_inverse=True)
            merged.hists[k] = (u, np.bincount(inv, weights=alln).astype(np.int64))
        merged.window_s += other.window_s
        merged.n += other.n
    return merged


def load_side(results: list[dict[str, Any]]) -> Side:
    """Per-request data of one side, pooled over its results (`load_runs`, `pool`)."""
    return pool(load_runs(results))


# ---------------------------------------------------------------- bootstrap


BLOCK_LIFETIMES = 1.0  # a time block spans this many mean request lifetimes ...
MIN_BLOCKS = 10  # ... or less, so that a run has at least this many blocks to draw


def time_blocks(sent: np.ndarray, intended: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Block id (0, 1, ...) per request: its send time's block of the run, in blocks of
    BLOCK_LIFETIMES mean lifetimes (send to end) of the requests that ended, or shorter where
    the run would have fewer than MIN_BLOCKS (a short run whose requests queued: blocks that
    still share some steps with their neighbours, better than one per request).

    Requests that were in flight together share the server's steps: one slow step, one queue
    that built up, shows in all of them at once, so a run's requests are not independent draws
    and a bootstrap over single requests gives intervals too narrow (issue 26: same-setting
    runs judged REGRESSION). Drawn by blocks of time, requests that shared steps are drawn or
    left out together; blocks a few lifetimes long share little with each other."""
    t = np.where(sent >= 0, sent, intended).astype(np.float64)
    if len(t) == 0:
        return np.zeros(0, dtype=np.int64)
    done = (end >= 0) & (sent >= 0)
    life = float(np.mean(end[done] - sent[done])) if done.any() else 0.0
    if life <= 0:
        return np.arange(len(t), dtype=np.int64)  # no lifetime known: each request alone
    span = float(t.max() - t.min())
    length = min(BLOCK_LIFETIMES * life, span / MIN_BLOCKS) if span > 0 else life
    raw = np.floor((t - t.min()) / length).astype(np.int64)
    _, ids = np.unique(raw, return_inverse=True)  # numbered 0.. without empty blocks
    return ids.astype(np.int64)


def _weights(block: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    """(b+1) x n: how often each of n requests is drawn in each replicate; row 0 is the data.

    A Poisson bootstrap over time blocks (`time_blocks`): each block's weight is Poisson(1),
    and its requests take it. The number of requests varies from replicate to replicate as
    the number of arrivals of an open-loop run does; with a fixed count, throughput of
    equal-sized requests would get a zero-width interval."""
    n = len(block)
    w = np.ones((b + 1, n), dtype=np.float64)
    if n == 0 or b == 0:
        return w
    k = int(block.max()) + 1
    w[1:] = rng.poisson(1.0, size=(b, k))[:, block]
    return w


def _weighted_percentile(
    values: np.ndarray, owner: np.ndarray, w: np.ndarray, q: float, window: bool = True
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
    # Fast path: the replicates' percentiles lie near the data's, so the cumulative weight is
    # summed in a window of sorted positions (its start by one product); rows whose answer
    # falls outside the window take the full sum below, so the result is the same.
    n, m = len(sv), max(1.0, len(sv) / max(1, w.shape[1]))
    half = int(5 * np.sqrt(n * m * (q / 100) * (1 - q / 100))) + 64
    center = int(np.ceil(q / 100 * n)) - 1
    lo, hi = max(0, center - half), min(n, center + half)
    todo = np.arange(w.shape[0])
    if window and hi - lo < n // 2:
        below = np.bincount(so[:lo], minlength=w.shape[1]).astype(np.float64)
        every = np.bincount(so, minlength=w.shape[1]).astype(np.float64)
        left = []
        step = max(1, _CHUNK_CELLS // (hi - lo))
        for a in range(0, w.shape[0], step):
            wa = w[a : a + step]
            before, total = wa @ below, wa @ every
            cw = before[:, None] + np.cumsum(wa[:, so[lo:hi]], axis=1)
            target = total * (q / 100.0) - 1e-9
            inside = (total > 0) & (before < target) & (cw[:, -1] >= target)
            pos = lo + (cw < target[:, None]).sum(axis=1)
            out[a : a + step][inside] = sv[np.minimum(pos[inside], n - 1)]
            left.append(a + np.flatnonzero(~inside & (total > 0)))
        todo = np.concatenate(left)
    rows = max(1, _CHUNK_CELLS // max(len(sv), 1))
    for a in range(0, len(todo), rows):
        idx = todo[a : a + rows]
        cw = np.cumsum(w[idx][:, so], axis=1)
        total = cw[:, -1]
        target = total * (q / 100.0)
        pos = np.minimum((cw < target[:, None] - 1e-9).sum(axis=1), len(sv) - 1)
        out[idx] = np.where(total > 0, sv[pos], np.nan)
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


def replicates(
    side: Side, spec: MetricSpec, b: int, rng: np.random.Generator, blocks: bool = True
) -> np.ndarray:
    """The figure on the data (index 0) and on b bootstrap replicates (1..b): drawn by time
    blocks, or (`blocks` False) request by request."""
    if side.source == "histogram":
        if spec.metric == "throughput":
            return np.full(b + 1, np.nan)
        v, n = side.hists.get(spec.metric, (np.zeros(0), np.zeros(0, dtype=np.int64)))
        return _hist_replicates(v, n, b, rng, spec.stat)
    by_block = blocks and len(side.block) == side.n
    w = _weights(side.block if by_block else np.arange(side.n), b, rng)
    if spec.metric == "throughput":
        col = {
            "output_tokens_per_s": side.tokens_in_window,
            "requests_per_s": side.done_in_window,
            "goodput_requests_per_s": side.good_in_window,
        }[spec.stat]
        return (w @ col) / side.window_s if side.window_s > 0 else np.full(b + 1, np.nan)
    if spec.metric in TOKEN_METRICS:
        values, owner = side.token_samples(spec.metric)
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
    v = (
        side.token_samples(spec.metric)[0]
        if spec.metric in TOKEN_METRICS
        else side.values[spec.metric]
    )
    return int((~np.isnan(v)).sum())


def reported(result: dict[str, Any], spec: MetricSpec) -> float | None:
    s = result["summary"]
    block = s["throughput"] if spec.metric == "throughput" else s["latency_ms"][spec.metric]
    value: float | None = block[spec.stat]  # the result document's figure (None: no samples)
    return value


def _order_statistics_apply(side: Side, spec: MetricSpec) -> bool:
    """Percentiles of samples that are one per request (TTFT, TPOT, E2E), or of histogram
    samples (whose owners are unknown anyway), get order-statistic intervals (exact for
    independent requests); ITL's per-token gaps, clustered within requests, means and
    throughput get the bootstrap over time blocks only."""
    if not spec.stat.startswith("p") or spec.metric == "throughput":
        return False
    return spec.metric in PER_REQUEST or side.source == "histogram"


def _samples(side: Side, spec: MetricSpec) -> np.ndarray:
    if side.source == "histogram":
        v, n = side.hists.get(spec.metric, (np.zeros(0), np.zeros(0, dtype=np.int64)))
        return np.repeat(v, n)
    return (
        side.token_samples(spec.metric)[0]
        if spec.metric in TOKEN_METRICS
        else side.values[spec.metric]
    )


BOOTSTRAP = "bootstrap over time blocks"


def _bootstrap_interval(
    rb: np.ndarray, rc: np.ndarray, base: Side, cand: Side, spec: MetricSpec, confidence: float
) -> tuple[float, float] | None:
    """The change's interval from the replicates; None where they cannot give one (too few
    samples in the percentile's tail, or too few usable replicates)."""
    tail = 1.0 if not spec.stat.startswith("p") else 1 - float(spec.stat[1:]) / 100
    if min(sample_count(base, spec), sample_count(cand, spec)) * tail < MIN_TAIL_SAMPLES:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = rc[1:] / rb[1:] - 1
    ratios = ratios[np.isfinite(ratios)]
    if len(ratios) < 20:
        return None
    lo_q, hi_q = (1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [lo_q, hi_q])
    return float(lo), float(hi)


def _within_interval(
    base: Side, cand: Side, spec: MetricSpec, b: int, rng: np.random.Generator, confidence: float
) -> tuple[float, float, float, float, str]:
    """(baseline figure, candidate figure, low, high) of the change within runs, and the method.
    high = inf where the data bound it on one side only; NaN bounds where there is no figure.

    A per-request percentile takes the wider of the order-statistic interval (exact when
    requests are independent) and the bootstrap over time blocks (which sees requests that
    shared the server's steps move together), the latter where its tail has samples enough."""
    order = _order_statistics_apply(base, spec)
    boot = base.source == "journal" and cand.source == "journal"
    rb = replicates(base, spec, b if boot else 0, rng)
    rc = replicates(cand, spec, b if boot else 0, rng)
    bv, cv = float(rb[0]), float(rc[0])
    if np.isnan(bv) or np.isnan(cv) or bv == 0:
        return (bv, cv, math.nan, math.nan, "")
    by_blocks = _bootstrap_interval(rb, rc, base, cand, spec, confidence) if boot else None
    if not order:
        if by_blocks is None:
            return (bv, cv, -1.0, math.inf, BOOTSTRAP)
        return (bv, cv, by_blocks[0], by_blocks[1], BOOTSTRAP)
    ci = stats.percentile_ratio_interval(
        _samples(base, spec), _samples(cand, spec), float(spec.stat[1:]) / 100, confidence
    )
    if ci is None:
        return (bv, cv, -1.0, math.inf, "order statistics")
    lo, hi = ci[0] - 1, ci[1] - 1
    if by_blocks is not None:
        return (
            bv,
            cv,
            min(lo, by_blocks[0]),
            max(hi, by_blocks[1]),
            f"order statistics, {BOOTSTRAP}",
        )
    if not boot:
        return (bv, cv, lo, hi, "order statistics")
    # Too few samples in the tail for the bootstrap: the order-statistic interval, widened by
    # the clustering the bootstrap sees nearer the middle (`_clustering`).
    k = _clustering(base, cand, spec, b, rng, confidence)
    if k == 1.0:
        return (bv, cv, lo, hi, "order statistics")
    change = cv / bv

    def widen(x: float) -> float:
        return change * ((1 + x) / change) ** k - 1 if math.isfinite(x) else x

    return (bv, cv, widen(lo), widen(hi), f"order statistics, widened x{k:.2f} for clustering")


def _clustering(
    base: Side, cand: Side, spec: MetricSpec, b: int, rng: np.random.Generator, confidence: float
) -> float:
    """How much wider the change's interval is when drawn by time blocks than request by
    request (>= 1), measured at the metric's p90 (its median where p90's tail is too thin),
    the nearest to the tail where both have samples enough: the design effect that
    independent-request intervals miss. 1 where it cannot be measured."""
    if len(base.block) != base.n or len(cand.block) != cand.n:
        return 1.0  # no time blocks: the same draws either way
    near = "p90" if min(base.n, cand.n) * 0.1 >= 2 * MIN_TAIL_SAMPLES else "p50"
    nearer = MetricSpec(spec.key, spec.label, spec.better, spec.metric, near)
    widths = []
    for blocks in (True, False):
        rb = replicates(base, nearer, b, rng, blocks)
        rc = replicates(cand, nearer, b, rng, blocks)
        ci = _bootstrap_interval(rb, rc, base, cand, nearer, confidence)
        if ci is None or ci[0] <= -1:  # no interval, or one reaching a zero figure (no log)
            return 1.0
        widths.append(math.log1p(ci[1]) - math.log1p(ci[0]))
    return max(1.0, widths[0] / widths[1]) if widths[1] > 0 else 1.0


def _bounded_at(spec: MetricSpec, n: int, confidence: float) -> int:
    """Requests per side from which an interval unbounded now is bounded: where order
    statistics bound a per-request percentile, 5 samples above a bootstrapped one."""
    if not spec.stat.startswith("p"):
        return n + 1
    q = float(spec.stat[1:]) / 100
    if spec.metric in PER_REQUEST:
        return max(n + 1, stats.bounded_requests(q, confidence))
    return max(n + 1, math.ceil(MIN_TAIL_SAMPLES / (1 - q)))


def check_confidence(value: float, where: str) -> None:
    """A family confidence: 0.5 to 0.999 (UsageError naming `where` otherwise)."""
    if not 0.5 <= value <= 0.999:
        raise UsageError(f"{where} {value!r}: expected a confidence from 0.5 to 0.999, e.g. 0.95")


def family_confidence(thresholds: dict[str, float], confidence: float) -> float:
    """Each interval's confidence so that all gated metrics together hold `confidence`
    (Bonferroni): the verdict fails on any one of them, so a same-setting pair must pass all,
    and m intervals at 1 - alpha/m miss together at most alpha of the time."""
    gated = sum(1 for k in thresholds if k in SPECS)
    return 1 - (1 - confidence) / max(1, gated)


def reference_threshold(key: str) -> float:
    """The threshold an ungated metric's `same` is held to: its default (10 % on latency
    figures, 5 % on throughput)."""
    if key in DEFAULT_THRESHOLDS:
        return DEFAULT_THRESHOLDS[key]
    return 0.05 if SPECS[key].metric == "throughput" else 0.10


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
    thresholds = dict(thresholds)
    if slo_gates:
        added = {k: v for k, v in slo_thresholds(base + cand).items() if k not in thresholds}
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
