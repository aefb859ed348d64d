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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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

    def moves(self, row: dict[str, Any]) -> tuple[float, float]:
        """(down, up): the side's true figure lies within shown x (1 - down .. 1 + up), in
        the directions the warning's bias allows (inf: unbounded)."""
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
    for s in suspects:
        down, up = s.moves(row)
        acc = per_run.setdefault((s.side, s.source), [0.0, 0.0])
        acc[0] += down
        acc[1] += up
    side_moves = {"baseline": [0.0, 0.0], "candidate": [0.0, 0.0]}
    for (side, _), (down, up) in per_run.items():
        m = side_moves[side]
        m[0], m[1] = max(m[0], down), max(m[1], up)
    c_down, c_up = side_moves["candidate"]
    b_down, b_up = side_moves["baseline"]
    f_lo = max(1 - c_down, 0.0) / (1 + b_up)  # the ratio candidate / baseline
    f_hi = (1 + c_up) / (1 - b_down) if b_down < 1 else math.inf
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
                "could explain it."
            )
            if note not in notes:
                notes.append(note)
    return notes


__all__ = ["HEALTH", "Suspect", "health_notes", "health_problems", "suspect_metrics", "widened"]
