"""compare's per-request data: one side's requests, from each run's journal (or its HDR
histograms when a journal is gone), pooled over its runs, with the time blocks the bootstrap
draws and what the health rule needs sample by sample (harness.analysis.compare_health)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.analysis import compare_health as health
from harness.analysis.compare_specs import PER_REQUEST, TOKEN_METRICS
from harness.record import hist

if TYPE_CHECKING:
    from harness.record.journal import Journal
    from harness.record.metrics import Columns


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
    lag = (end.get("simulator") or {}).get("lag_ns")
    if isinstance(lag, list) and isinstance(end.get("t0_ns"), int):
        c2 = health.fixed_columns(c, health.lag_clock(lag, end["t0_ns"], side.speedup))
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
