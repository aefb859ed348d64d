"""compare's health rule: a result's own health warnings, how much each can move each metric,
and whether that bound could explain a verdict (then the verdict is held back as INCONCLUSIVE).

Every warning a result carries (harness.analysis.result) bounds how far it can have moved a
figure, in the result's own (model) time; a speedup of K makes a wall millisecond K model ms:

- send lag p99 L (the client sent late): each request's arrival moved by at most L, and in a
  work-conserving server a departure moves by no more than the arrivals before it, so a latency
  from sent or from schedule moves by at most L, a throughput by at most L / measured window.
  A late client offered less load: figures from sent look better; ITL and TPOT are timed
  between tokens of one stream and are not touched.
- event-loop lag p99 L: a token stamp is late by at most L: every latency (and each gap)
  moves by at most L, either way; a throughput by at most L / window.
- a client short of CPU: what it does to the figures shows as its loop and send lag; the
  larger of the two p99s bounds it, either way (unbounded when the result has neither).
- the simulator behind its model by B s: every stamp is late by at most B (x K), so a latency
  grows by at most B and a throughput shrinks by at most B / run; it only makes its side worse.

`widened` applies the bounds to a row's interval; a warning holds a verdict back only when the
verdict on the widened interval differs (`compare.compare_sides`).

Sample by sample (both sides read from journals: `refined`)
-----------------------------------------------------------
The bounds above are worst cases over a whole run: a stamp late by the run's p99 lag, or by all
the time the simulator lost. A loaded runner's warnings bound every latency by more than a 10 %
gate that way, although what they measured moved the figures far less. Where both sides have
their journals, what each warning measured is set against the samples the figure is made of,
and a figure moves only by what could move *that* figure:

- the simulator behind its model: its model's clock lags the wall clock by L(t) without
  pausing the model, a request enters the model at its wall-clock send, and it logs L
  (`lag_ns`: CLOCK_MONOTONIC points, in the journal; harness.sim.engine). A token stamped at
  t was made at model time t - L(t), so a request's model latency is (t - L(t)) - sent, a
  TPOT takes out the lag's change between its first and last token: exact, sample by sample
  (`fixed_columns`). The figure of those samples is the model's; the side's figure moves to
  it (a correction, not a range), and the spread between runs is taken on it.
- the client's event-loop lag: a token stamp is late by the loop's lag when its bytes came;
  the rule assumes that is a draw from the lag the loop's probe measured, whatever the latency
  was (a stall hits what arrives; the probe fires every 50 ms). A side's samples then have the law of (latency + e), e its lag (e' - e between two
  tokens; (e' - e) / (tokens - 1) for TPOT). Give each side's samples one more draw of the
  other side's lag: both then have the law of (latency + e_b + e_c), the same noise on both
  sides, and the change left is not the lag's. Each side's figure moves to its figure with the
  other's lag added (a correction, averaged over LAG_DRAWS draws); lag both sides share cannot
  explain a difference between them, lag only one side had moves the other side as much.
- the client sent late: a latency from sent starts at the request's actual send, so its own
  lateness is not in it; it moves only through the load the server saw. A request that others
  overtook (sent after a request planned later) can change places with them in the server's
  queue: a share s of such requests moves a q-quantile by at most its (q - s .. q + s) spread.
  The rest of the load is shifted by at most L (send lag p99): at any moment at most the
  requests planned in the last L are missing from the server, a share L / (mean E2E) of those
  in flight, and a step's time grows no more than in proportion to the tokens in it (the
  roofline), so a latency moves by at most that share more.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from harness.record.metrics import Columns

# (key in the warning, sentence, which metrics it touches, which way it moves its side)
_NOT_BETWEEN_TOKENS = ("itl", "tpot")
HEALTH: tuple[tuple[str, str, str], ...] = (
    ("send lag", "the client sent late", "better"),
    ("event-loop lag", "the client's event loop lagged (token stamps late)", "either"),
    ("of a CPU core", "the client was short of CPU", "either"),
    ("behind its own model", "the simulator fell behind its model (short of CPU)", "worse"),
)


def touches(text: str, metric_key: str) -> bool:
    """Whether the warning (its sentence) can move this metric at all."""
    if text.startswith("the client sent late"):
        return not metric_key.startswith(_NOT_BETWEEN_TOKENS)
    return True


@dataclass(frozen=True, slots=True)
class Suspect:
    """A health warning of one result, as it bears on one metric, with its bound."""

    text: str  # the sentence: the warning, its bound and the file
    side: str  # "baseline" or "candidate"
    bias: str  # the way it moves its side's figure: "worse", "better", "either"
    bound_ms: float | None = None  # the most it moves a latency (model ms); None: unbounded
    bound_share: float | None = None  # the most it moves a throughput (share of the figure)

    source: str = ""  # the result it came from: one run's warnings add up, runs do not
    # (down, up) measured on this figure's samples (`refined`): the side's true figure lies in
    # shown x (1 - down .. 1 + up); a correction has up = -down
    measured: tuple[float, float] | None = None

    def moves(self, row: dict[str, Any]) -> tuple[float, float]:
        """(down, up): the side's true figure lies within shown x (1 - down .. 1 + up), in
        the directions the warning's bias allows (inf: unbounded)."""
        if self.measured is not None:
            return self.measured
        latency = row["better"] == "lower"
        value = row[self.side]
        if latency:  # the side's figure may move by d of itself
            d = self.bound_ms / value if self.bound_ms is not None and value else math.inf
        else:
            d = self.bound_share if self.bound_share is not None else math.inf
        looks_worse = self.bias in ("worse", "either")
        looks_better = self.bias in ("better", "either")
        # a latency that looks worse (higher) is truly lower; a throughput, truly higher
        down = d if (looks_worse if latency else looks_better) else 0.0
        up = d if (looks_better if latency else looks_worse) else 0.0
        return down, up


def widened(
    row: dict[str, Any], lo: float, hi: float, suspects: list[Suspect]
) -> tuple[float, float, float, float]:
    """(lowest change, highest change, low, high) of the row once every suspect's bound is
    allowed for: the change and its interval, in ratio - 1. One run's warnings add up (a late
    send and late stamps move the same figures); a side pooled over runs moves by no more than
    its worst run's sum (each request belongs to one run)."""
    per_run: dict[tuple[str, str], list[float]] = {}
    side_moves = {"baseline": [0.0, 0.0], "candidate": [0.0, 0.0]}
    measured = {"baseline": [0.0, 0.0], "candidate": [0.0, 0.0]}
    for s in suspects:
        down, up = s.moves(row)
        # measured on the pooled samples: they add up (a correction may be negative)
        acc = (
            measured[s.side]
            if s.measured is not None
            else per_run.setdefault((s.side, s.source), [0.0, 0.0])
        )
        acc[0] += down
        acc[1] += up
    for (side, _), (down, up) in per_run.items():
        m = side_moves[side]
        m[0], m[1] = max(m[0], down), max(m[1], up)
    for side, (down, up) in measured.items():
        m = side_moves[side]
        m[0], m[1] = m[0] + down, m[1] + up
    c_down, c_up = side_moves["candidate"]
    b_down, b_up = side_moves["baseline"]
    f_lo = max(1 - c_down, 0.0) / (1 + b_up) if b_up > -1 else math.inf  # candidate / baseline
    f_hi = max(1 + c_up, 0.0) / (1 - b_down) if b_down < 1 else math.inf
    change = row["change"]

    def scale(x: float, f: float) -> float:
        return (1 + x) * f - 1 if math.isfinite(x) and math.isfinite(f) else math.inf

    return scale(change, f_lo), scale(change, f_hi), (1 + lo) * f_lo - 1, scale(hi, f_hi)


def _speedup(result: dict[str, Any]) -> float:
    from harness.analysis.clock import sim_speedup

    k = (result.get("clock") or {}).get("speedup")
    return float(k) if isinstance(k, int | float) and k > 0 else sim_speedup(result)


def _p99(stats: Any) -> float | None:
    v = stats.get("p99") if isinstance(stats, dict) else None
    return float(v) if isinstance(v, int | float) else None


def send_lag_p99_ms(result: dict[str, Any]) -> float | None:
    """The client's send lag p99 in wall ms: the worst of the run's and its phases'."""
    k = _speedup(result)
    found = [_p99((result.get("client") or {}).get("send_lag_ms"))]
    for ph in result.get("phases") or []:
        v = _p99((ph.get("latency_ms") or {}).get("send_lag"))
        found.append(v / k if v is not None else None)
    values = [v for v in found if v is not None]
    return max(values) if values else None


def _bounds(text: str, result: dict[str, Any]) -> tuple[float | None, float | None, str]:
    """(bound in model ms, throughput share, what the bound is) of one warning in one result."""
    k = _speedup(result)
    window = ((result.get("summary") or {}).get("throughput") or {}).get("window_s")
    window = float(window) if isinstance(window, int | float) and window > 0 else None
    loop = _p99((result.get("client") or {}).get("loop_lag_ms"))
    send = send_lag_p99_ms(result)
    wall_ms: float | None
    if text.startswith("the client sent late"):
        wall_ms, what = send, "send lag p99"
    elif text.startswith("the client's event loop"):
        wall_ms, what = loop, "loop lag p99"
    elif text.startswith("the client was short"):
        both = [v for v in (loop, send) if v is not None]
        wall_ms, what = (max(both) if both else None), "loop or send lag p99"
    else:
        behind = ((result.get("target") or {}).get("simulator") or {}).get("behind_model_s")
        wall_ms = float(behind) * 1000 if isinstance(behind, int | float) else None
        what = "behind by"
        if wall_ms is not None:
            run_s = result.get("duration_s")
            share = wall_ms * k / 1000 / run_s if isinstance(run_s, int | float) and run_s else None
            return wall_ms * k, share, what
    if wall_ms is None:
        return None, None, what
    return wall_ms * k, (wall_ms * k / 1000 / window if window else None), what


def _describe(what: str, bound_ms: float | None, share: float | None, k: float) -> str:
    if bound_ms is None:
        return "no figure bounds it"
    model = f" ({bound_ms:,.1f} ms of model time)" if k != 1 else ""
    thr = f", a throughput by at most {share:.2%}" if share is not None else ""
    return (
        f"{what} {bound_ms / k:,.1f} ms: moves a latency by at most {bound_ms:,.1f} ms{model}{thr}"
    )


def health_problems(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The result's own health warnings that fired: (sentence, bias, what bounds it)."""
    out = []
    k = _speedup(result)
    for warning in (result.get("client") or {}).get("warnings") or []:
        for key, text, bias in HEALTH:
            if key in str(warning):
                bound_ms, share, what = _bounds(text, result)
                out.append((text, bias, _describe(what, bound_ms, share, k)))
                break
    return out


def suspect_metrics(
    baseline: list[tuple[str, dict[str, Any]]],
    candidate: list[tuple[str, dict[str, Any]]],
    keys: list[str],
) -> dict[str, list[Suspect]]:
    """metric -> the (file, warning)s that can move it, with their side, bias and bound."""
    out: dict[str, list[Suspect]] = {}
    for side, named in (("baseline", baseline), ("candidate", candidate)):
        for name, result in named:
            for warning in (result.get("client") or {}).get("warnings") or []:
                found = next((h for h in HEALTH if h[0] in str(warning)), None)
                if found is None:
                    continue
                _, text, bias = found
                bound_ms, share, what = _bounds(text, result)
                bound = _describe(what, bound_ms, share, _speedup(result))
                for m in keys:
                    if not touches(text, m):
                        continue
                    item = Suspect(f"{text} in {name} ({bound})", side, bias, bound_ms, share, name)
                    if item not in out.setdefault(m, []):
                        out[m].append(item)
    return out


def health_notes(
    baseline: list[tuple[str, dict[str, Any]]], candidate: list[tuple[str, dict[str, Any]]]
) -> list[str]:
    """One sentence per warning that fired, with its bound: what compare allowed for."""
    notes = []
    for name, result in baseline + candidate:
        for text, _, bound in health_problems(result):
            note = (
                f"Health: {text} in {name}: {bound}; it holds a verdict back only where that "
                "could explain it (with both sides' journals, where what it measured in the "
                "figure's own samples could: the row names it)."
            )
            if note not in notes:
                notes.append(note)
    return notes


# ---------------------------------------------------------------- sample by sample

SIM = HEALTH[3][1]
LOOP = HEALTH[1][1]
SEND = HEALTH[0][1]
CPU = HEALTH[2][1]


def lag_clock(
    points_ns: list[list[int]], t0_ns: int, k: float
) -> Callable[[np.ndarray], np.ndarray]:
    """lag(t): how far the simulator's model lagged the wall clock at each stamp t (model ns
    from the run's t0, as the columns are), from its log ([perf_counter_ns, lag ns] points,
    the client's clock on one machine; linear between points, 0 before the first, the last
    after it)."""
    p = np.asarray(points_ns, dtype=np.float64).reshape(-1, 2)
    at, lag = p[:, 0] - float(t0_ns), p[:, 1]
    order = np.argsort(at, kind="stable")
    at, lag = at[order], lag[order]

    def lagged(t: np.ndarray) -> np.ndarray:
        if len(at) == 0:
            return np.zeros(np.shape(t))
        wall = np.asarray(t, dtype=np.float64) / k
        return np.interp(wall, at, lag, left=0.0, right=float(lag[-1])) * k

    return lagged


def fixed_columns(c: Columns, lost: Callable[[np.ndarray], np.ndarray]) -> Columns:
    """The columns as the simulator's model timed them: the time it had lost taken out of each
    stamp it caused (tokens, the end: t - L(t)); a send and its plan time stay (a request
    enters the model at its wall-clock send); the markers of a stamp never taken (< 0) stay."""
    import dataclasses

    def fix(t: np.ndarray) -> np.ndarray:
        return np.where(t >= 0, t - np.rint(lost(np.maximum(t, 0))).astype(t.dtype), t)

    return dataclasses.replace(c, end=fix(c.end), stamps=fix(c.stamps))


def overtaken_share(intended: np.ndarray, sent: np.ndarray) -> float:
    """The share of requests that changed places in the server's queue: each one sent after a
    request planned later, and (at most) as many that overtook them."""
    ok = sent >= 0
    if ok.sum() < 2:
        return 0.0
    order = np.argsort(intended[ok], kind="stable")
    s = sent[ok][order].astype(np.float64)
    later_min = np.minimum.accumulate(s[::-1])[::-1]  # the earliest send of those planned later
    overtaken = s[:-1] > later_min[1:]
    return min(1.0, 2 * float(overtaken.sum()) / len(s))


def _spread(values: np.ndarray, q: float, share: float) -> tuple[float, float, float]:
    """(q - share, q, q + share) quantiles of the samples (inverted cdf, as the figures)."""
    v = values[~np.isnan(values)]
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    at = [min(max(x, 0.0), 1.0) for x in (q - share, q, q + share)]
    lo, mid, hi = np.quantile(v, at, method="inverted_cdf")
    return float(lo), float(mid), float(hi)


def _kind(text: str) -> str:
    return next((t for _, t, _ in HEALTH if text.startswith(t)), text)


def refined(
    spec: Any,
    sides: tuple[Any, Any],
    suspects: list[Suspect],
    figure: Callable[[Any], float],
    samples: Callable[[Any], np.ndarray],
) -> list[Suspect]:
    """The suspects of one latency row, their bounds measured on the samples of its figure
    where both sides are journals (module docstring, "Sample by sample"); the others as
    they were. `figure(side)`: the row's figure of a side; `samples(side)`: its samples."""
    pb, pc = sides
    if spec.metric == "throughput" or pb.source != "journal" or pc.source != "journal":
        return suspects
    by_side = {"baseline": pb, "candidate": pc}
    kinds = {(x.side, _kind(x.text)) for x in suspects}
    names = {
        side: ", ".join(dict.fromkeys(x.source for x in suspects if x.side == side))
        for side in by_side
    }
    shown = {side: figure(x) for side, x in by_side.items()}
    if not all(v > 0 for v in shown.values()):
        return suspects
    use = dict(by_side)  # the samples the next bounds stand on: the simulator's time out
    out: list[Suspect] = []
    done: set[tuple[str, str]] = set()
    for side, x in by_side.items():
        if (side, SIM) in kinds and x.fixed is not None:
            f1 = figure(x.fixed)
            c = 1 - f1 / shown[side]
            text = (
                f"{SIM} in {names[side]} (the time it lost inside these samples: "
                f"{shown[side]:,.1f} ms of which {shown[side] - f1:,.1f} ms, {c:+.1%})"
            )
            out.append(Suspect(text, side, "worse", source="samples", measured=(c, -c)))
            use[side] = x.fixed
            done.add((side, SIM))
    q = float(spec.stat[1:]) / 100 if spec.stat.startswith("p") else None
    fired = [side for side, k in kinds if k in (LOOP, CPU)]
    if fired and len(pb.loop_lag_ms) and len(pc.loop_lag_ms):
        who = ", ".join(dict.fromkeys(names[s] for s in fired))
        out += _lag_suspects(spec, use, (pb, pc), figure, who)
        done |= {(s, LOOP) for s in by_side} | {(s, CPU) for s in by_side}
    for side, x in by_side.items():
        late = (side, SEND) in kinds or (side, CPU) in kinds
        if late and q is not None and touches(SEND, spec.key):
            found = _send_suspect(side, x, samples(use[side]), shown[side], q, names[side])
            if found is not None:
                out.append(found)
                done.add((side, SEND))
    return out + [x for x in suspects if (x.side, _kind(x.text)) not in done]


LAG_DRAWS = 8  # draws of the other side's lag averaged per figure


def _lag_suspects(
    spec: Any, use: dict[str, Any], sides: tuple[Any, Any], figure: Callable[[Any], float], who: str
) -> list[Suspect]:
    """Each side's figure with a draw of the other side's lag added to its samples (averaged
    over LAG_DRAWS draws): both then carry the same noise (x + e_b + e_c in law), so what
    remains of the change is not the lag's."""
    pb, pc = sides
    rng = np.random.default_rng(0)
    out = []
    for side, other in (("baseline", pc), ("candidate", pb)):
        base = figure(use[side])
        draws = [
            figure(_lagged(use[side], spec, other.loop_lag_ms * other.speedup, rng))
            for _ in range(LAG_DRAWS)
        ]
        f = float(np.mean(draws)) / base if base > 0 else math.nan
        text = (
            f"{LOOP} in {who} (given the other side's lag too, the same noise on both sides: "
            f"this figure x{f:.4f} on the {side})"
        )
        out.append(Suspect(text, side, "either", source="samples", measured=(1 - f, f - 1)))
    return out


def _send_suspect(
    side: str, x: Any, values: np.ndarray, shown: float, q: float, name: str
) -> Suspect | None:
    """A late send's bound on a side's q-quantile from sent: the (q - s .. q + s) spread of
    its samples, s the share of requests that changed places, plus the share of the load its
    send lag p99 held back (p99 / mean E2E). None without send lags or E2E."""
    send = x.send_lag_ms[~np.isnan(x.send_lag_ms)]
    life = x.values.get("e2e", np.zeros(0))
    life_ms = float(np.nanmean(life)) if np.isfinite(life).any() else math.nan
    if not (len(send) and life_ms > 0):
        return None
    big = float(np.quantile(send, 0.99, method="inverted_cdf"))
    share = big / life_ms
    lo, mid, hi = _spread(values, q, x.overtaken)
    down = (mid - lo) / shown + share
    up = (hi - mid) / shown + share
    text = (
        f"{SEND} in {name} ({x.overtaken:.1%} of requests changed places: "
        f"p{100 * max(q - x.overtaken, 0):.4g}..p{100 * min(q + x.overtaken, 1):.4g}; send "
        f"lag p99 {big:,.1f} ms of a {life_ms:,.0f} ms mean E2E: {share:.2%} of the load; "
        f"-{down:.1%}/+{up:.1%} of this figure)"
    )
    return Suspect(text, side, "either", source="samples", measured=(down, up))


def _lagged(side: Any, spec: Any, lag_ms: np.ndarray, rng: np.random.Generator) -> Any:
    """A copy of the side with one more draw of `lag_ms` (model ms) on each loop-stamped end of
    the metric's samples: + e for a latency from sent (its one token stamp), + e' - e between
    two tokens (ITL), and (e' - e) / (tokens - 1) for TPOT."""
    import dataclasses

    def draw(n: int) -> np.ndarray:
        return rng.choice(lag_ms, size=n)

    if spec.metric == "itl" or spec.metric.startswith("itl_"):
        v, owner = side.token_samples(spec.metric)
        moved = v + draw(len(v)) - draw(len(v))
        if spec.metric == "itl":
            return dataclasses.replace(side, itl_ms=moved)
        return dataclasses.replace(
            side, channel_itl={**side.channel_itl, spec.metric: (moved, owner)}
        )
    v = side.values[spec.metric]
    if spec.metric == "tpot":
        with np.errstate(invalid="ignore", divide="ignore"):
            per = side.values["tpot"] / (side.values["e2e"] - side.values["ttft"])
        moved = v + (draw(len(v)) - draw(len(v))) * np.nan_to_num(per)
    else:
        moved = v + draw(len(v))
    return dataclasses.replace(side, values={**side.values, spec.metric: moved})


__all__ = [
    "HEALTH",
    "Suspect",
    "fixed_columns",
    "health_notes",
    "health_problems",
    "lag_clock",
    "overtaken_share",
    "refined",
    "suspect_metrics",
    "widened",
]
