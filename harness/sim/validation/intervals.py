"""The simulator's error as 80 % prediction intervals, by regime and figure: what `predict` and
`plan` print beside each figure, and what `plan --confidence` sizes replicas with.

A *regime* is how loaded the server was, decided from the load and the figures by one rule,
`regime_of`; a validation comparison takes its prediction's regime, the one `predict` reads its
interval by (harness/orchestrate/validation_regimes.py, `comparisons`):

- one user: a closed loop of one user, or a batch of one;
- saturated or offline: everything at once (a burst, an offline batch), a closed loop of at
  least `max_num_seqs` users, an open load the server served less than 90 % of, or one that
  keeps `max_num_seqs` or more in flight on average (Little's law, below);
- light load: at most `LIGHT_IN_FLIGHT` requests in flight on average (a closed loop: its
  users; an open load: rate x mean E2E by Little's law, the median standing in for the mean);
- loaded below saturation: the rest;
- capacity under an SLO in open load (MLPerf's server runs held to p99 limits) and capacity at
  a closed-loop operating point (a sweep point read as an SLO) are `plan`'s capacity checks,
  in regimes of their own: the second is never used to size replicas.

`intervals.toml` is written by `python -m harness.orchestrate.validation --write` from the
comparisons whose publisher no coefficient was fitted on (docs/validation.md says which): per
regime and figure (and per GPU class), n, publishers, and the 10th, 50th and 90th percentile of
predicted / published *for a publisher not among them* (`publisher_spread`: publishers differ
from each other more than one publisher's runs differ among themselves, so the interval carries
the spread between publishers, not only the pooled ratios'). A predicted figure x then reads
"published between x / p90 and x / p10 in 80 % of cases".
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INTERVALS = Path(__file__).with_name("intervals.toml")

ONE_USER = "one user"
LIGHT = "light load"
LOADED = "loaded below saturation"
SATURATED = "saturated or offline"
CAPACITY_SLO = "capacity under an SLO (open load)"
CAPACITY_CLOSED = "capacity at a closed-loop operating point"
REGIMES = (ONE_USER, LIGHT, LOADED, SATURATED, CAPACITY_SLO, CAPACITY_CLOSED)

# At most this many requests in flight on average is a light load: a decode batch this small
# reads the weights once a step, as one user does, so a step costs about what one user's does.
LIGHT_IN_FLIGHT = 4.0
SERVED_SHARE = 0.9  # an open load served below this share of its rate is past saturation
MIN_POINTS = 3  # fewer held-out comparisons than this state no interval
# `plan --margin pNN` / `--confidence`: the shares it accepts
MIN_CONFIDENCE, MAX_CONFIDENCE = 0.5, 0.95


def regime_of(
    users: int | None = None,
    rate_per_s: float | None = None,
    served_per_s: float | None = None,
    e2e_s: float | None = None,
    max_num_seqs: int | None = None,
    batch: int | None = None,
) -> str:
    """The regime of one server's load. `users`: a closed loop's; `rate_per_s`: an open load's
    (math.inf or None with `batch`: everything at once); `served_per_s`: requests/s completed;
    `e2e_s`: the mean (or median) E2E; `batch`: requests sent at once."""
    if users is not None:
        if users <= 1:
            return ONE_USER
        if max_num_seqs is not None and users >= max_num_seqs:
            return SATURATED
        return LIGHT if users <= LIGHT_IN_FLIGHT else LOADED
    if batch is not None and batch <= 1:
        return ONE_USER
    if rate_per_s is None or math.isinf(rate_per_s):
        return SATURATED
    if served_per_s is not None and served_per_s < SERVED_SHARE * rate_per_s:
        return SATURATED
    in_flight = None if e2e_s is None else rate_per_s * e2e_s
    if in_flight is not None and max_num_seqs is not None and in_flight >= max_num_seqs:
        return SATURATED  # the running set is full on average: requests queue
    if in_flight is not None and in_flight <= LIGHT_IN_FLIGHT:
        return LIGHT
    return LOADED


@dataclass(frozen=True)
class Interval:
    """n held-out comparisons and the 10th, 50th and 90th percentile of predicted / published."""

    n: int
    p10: float
    p50: float
    p90: float
    scope: str = "every GPU class"  # whose comparisons: "every GPU class" or "the H100 class"
    publishers: int = 0  # how many publishers they came from

    def published_range(self, predicted: float) -> tuple[float, float]:
        """Where the published figure lay for 80 % of held-out cases: predicted / p90 ..
        predicted / p10."""
        return predicted / self.p90, predicted / self.p10

    def describe(self, predicted: float, fmt: str = "{:.3g}") -> str:
        lo, hi = self.published_range(predicted)
        return (
            f"80% interval {fmt.format(lo)}..{fmt.format(hi)} "
            f"(predicted/published {self.p10:.2f}..{self.p90:.2f}, n={self.n} held out from "
            f"{self.publishers} publishers, {self.scope})"
        )


def load_intervals(path: Path = INTERVALS) -> dict[str, Any]:
    """The stored table ({} without the file)."""
    if not path.exists():
        return {}
    return tomllib.loads(path.read_text())


def interval(
    regime: str, figure: str, gpu_class: str | None = None, table: Mapping[str, Any] | None = None
) -> Interval | None:
    """The stored interval of `regime` and `figure` (that GPU class's where it has
    `MIN_POINTS` from two publishers or more, else every class's); None where fewer
    comparisons than that, or one publisher's."""
    table = load_intervals() if table is None else table
    entry = table.get("regime", {}).get(regime, {}).get(figure)
    if not entry:
        return None
    own = entry.get("class", {}).get(gpu_class) if gpu_class else None
    mine = own is not None and int(own["n"]) >= MIN_POINTS and "p10" in own
    chosen: Mapping[str, Any] = own if own is not None and mine else entry
    if int(chosen["n"]) < MIN_POINTS or "p10" not in chosen:
        return None
    return Interval(
        int(chosen["n"]),
        float(chosen["p10"]),
        float(chosen["p50"]),
        float(chosen["p90"]),
        f"the {gpu_class} class" if mine else "every GPU class",
        int(chosen["publishers"]),
    )


def ratio_quantile(
    regime: str, figure: str, share: float, table: Mapping[str, Any] | None = None
) -> tuple[float, int] | None:
    """The `share` quantile of predicted / published for a publisher not among the stored
    held-out comparisons of `regime` and `figure` (every GPU class; `PublisherSpread`), and n;
    None where fewer than `MIN_POINTS` or one publisher's. Dividing a predicted capacity by it
    gives one that `share` of such cases would meet."""
    table = load_intervals() if table is None else table
    entry = table.get("regime", {}).get(regime, {}).get(figure) or {}
    n = int(entry.get("n", 0))
    if n < MIN_POINTS or "log_sd" not in entry:
        return None
    spread = PublisherSpread(
        int(entry["publishers"]), n, float(entry["log_center"]), 0.0, 0.0, float(entry["log_sd"])
    )
    return spread.quantile(share), n


def quantile(sorted_values: list[float], share: float) -> float:
    """The `share` quantile by linear interpolation between order statistics (numpy's
    default), of values sorted ascending."""
    pos = share * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def t_quantile(share: float, df: float) -> float:
    """The `share` quantile of Student's t with `df` degrees of freedom (df >= 1), by
    bisection on its CDF (Simpson's rule on the density): no scipy in the project."""
    if share == 0.5:
        return 0.0
    if share < 0.5:
        return -t_quantile(1.0 - share, df)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float, steps: int = 400) -> float:
        h = t / steps
        f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(steps + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    lo, hi = 0.0, 1.0
    while cdf(hi) < share:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < share else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class PublisherSpread:
    """A prediction interval for a publisher not among those it was built from, on the log
    scale: each publisher's mean log-ratio counts once (`center`: their mean), and a new
    publisher's comparison varies by the between-publisher variance plus the within-publisher
    one plus the center's own uncertainty (`sd`), read with Student's t at `df` = publishers - 1."""

    publishers: int
    n: int
    center: float  # mean over publishers of each one's mean log(predicted / published)
    between_sd: float
    within_sd: float
    sd: float  # of a new publisher's comparison about `center`

    def quantile(self, share: float) -> float:
        """The `share` quantile of predicted / published for a new publisher."""
        return math.exp(self.center + t_quantile(share, self.publishers - 1) * self.sd)


def publisher_spread(by_publisher: Mapping[str, list[float]]) -> PublisherSpread | None:
    """The new-publisher interval from each publisher's ratios (None under two publishers:
    one publisher says nothing of how the next differs from it). Method of moments: within
    variance pooled over publishers (N - J degrees of freedom); between = the variance of the
    publishers' means less the within variance they carry (at least 0); the center's variance
    = the variance of the publishers' means / J."""
    logs = {k: [math.log(r) for r in v] for k, v in by_publisher.items() if v}
    j = len(logs)
    if j < 2:
        return None
    n = sum(len(v) for v in logs.values())
    means = [sum(v) / len(v) for v in logs.values()]
    center = sum(means) / j
    sq = sum((x - m) ** 2 for v, m in zip(logs.values(), means, strict=True) for x in v)
    within = sq / (n - j) if n > j else 0.0
    var_means = sum((m - center) ** 2 for m in means) / (j - 1)
    between = max(0.0, var_means - within * sum(1 / len(v) for v in logs.values()) / j)
    sd = math.sqrt(between + within + var_means / j)
    return PublisherSpread(j, n, center, math.sqrt(between), math.sqrt(within), sd)


def parse_confidence(text: str) -> float:
    """'0.8', '80%' or 'p80' -> 0.8; ValueError outside MIN_CONFIDENCE..MAX_CONFIDENCE."""
    t = text.strip().lower()
    if t.startswith("p"):
        value = float(t[1:]) / 100
    elif t.endswith("%"):
        value = float(t[:-1]) / 100
    else:
        value = float(t)
    if not MIN_CONFIDENCE <= value <= MAX_CONFIDENCE:
        raise ValueError(f"expected {MIN_CONFIDENCE:g}..{MAX_CONFIDENCE:g}, got {text}")
    return value
