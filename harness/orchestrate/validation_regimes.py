"""The validation's comparisons by regime: each row classified (`harness.sim.validation.intervals`
holds the rule), the 80 % prediction intervals of predicted / published over the held-out rows,
and how many held-out comparisons those intervals contain when each publisher's own rows are
left out of the interval that judges them.

Held out means: no coefficient the presets use was fitted on the row's publisher (GPUStack's and
Lambda's rows are the fit split's and take no part). Every held-out publisher is then left out
of the coefficients at once, which is stricter than leaving one out at a time; the fit split's
own publishers would need a refit each (~10 min a fit on two cores) and are not included.
Pure: rows in, tables and text out; `validation --write` stores `intervals.toml` from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.orchestrate.validation_points import Point, gpu_class
from harness.sim.validation import intervals as iv
from harness.sim.validation.errors import CAPACITY_FIGURE

# The figures the bar names (the interval must contain >= 70 % of held-out comparisons)
BAR_FIGURES = ("output_tokens_per_s", "tpot_p50_ms", "ttft_p50_ms")
BAR_SHARE = 0.70
# The figures intervals are stated for, in order
INTERVAL_FIGURES = (
    "output_tokens_per_s",
    "request_throughput_per_s",
    "tpot_p50_ms",
    "tpot_mean_ms",
    "ttft_p50_ms",
    "ttft_mean_ms",
    "itl_p50_ms",
    "e2e_p50_ms",
    CAPACITY_FIGURE,
)


@dataclass(frozen=True)
class Comparison:
    """One held-out ratio: its publisher, regime, figure, GPU class and predicted / published."""

    publisher: str
    regime: str
    figure: str
    gpu_class: str
    ratio: float


def _number(raw: Mapping[str, object], *keys: str) -> float | None:
    for k in keys:
        v = raw.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _e2e_s(raw: Mapping[str, object]) -> float | None:
    """The published E2E (p50, else mean), or TTFT + TPOT x (answer - 1), in seconds."""
    e2e = _number(raw, "e2e_p50_ms", "e2e_mean_ms")
    if e2e is None:
        ttft = _number(raw, "ttft_p50_ms", "ttft_mean_ms")
        tpot = _number(raw, "tpot_p50_ms", "tpot_mean_ms", "itl_p50_ms")
        out = _number(raw, "output_len", "output_len_mean")
        if ttft is None or tpot is None or out is None:
            return None
        e2e = ttft + tpot * (out - 1)
    return e2e / 1e3


def point_regime(point: Point) -> str:
    """The regime of a published point (one replica's share of its load)."""
    r = point.raw
    users = r.get("max_concurrency")
    rate = r.get("request_rate")
    batch = r.get("batch_size")
    if batch is None and (rate in (None, "inf")) and users is None:
        batch = r.get("num_prompts")
    served = _number(r, "request_throughput_per_s")
    return iv.regime_of(
        users=None if users is None else int(users),
        rate_per_s=None if rate in (None, "inf") else float(rate) / point.replicas,
        served_per_s=None if served is None else served / point.replicas,
        e2e_s=_e2e_s(r),
        max_num_seqs=_number_int(r.get("max_num_seqs")),
        batch=None if batch is None else int(batch),
    )


def _number_int(x: object) -> int | None:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) else None


# Which side of a comparison gives its regime: "prediction" (the load as predicted, the rule
# `predict` reads its interval by: predict_intervals.result_regime) or "published" (the load as
# published, `point_regime`; the rule until 2026-12-06, kept to show what the choice does).
BY_PREDICTION, BY_PUBLISHED = "prediction", "published"
CLASSIFY_BY = BY_PREDICTION


def row_regime(point: Point, figure: str, predicted: str = "") -> str:
    """A capacity check's regime (open load held to SLOs, or a closed-loop sweep point), else
    the regime of the prediction (`predicted`, the Row's) where given, else the point's."""
    if figure == CAPACITY_FIGURE:
        held = point.raw.get("slo_ttft_p99_ms") is not None
        return iv.CAPACITY_SLO if held else iv.CAPACITY_CLOSED
    return predicted or point_regime(point)


def comparisons(
    rows: Sequence[object],
    owner: Mapping[str, str],
    refit: Sequence[object] = (),
    by: str = CLASSIFY_BY,
) -> list[Comparison]:
    """The held-out rows with a ratio (V0 multi-step apart), classified by the regime of the
    prediction (`by` BY_PREDICTION: what `predict` knows when it picks an interval) or of the
    published run (BY_PUBLISHED). `rows`: validation Rows at the presets' coefficients (their
    held-out split counts); `refit`: a fit publisher's rows at coefficients refitted without it
    (`validation_fit.refit_rows`), which count whatever their split; `owner`: source ->
    publisher."""
    if by not in (BY_PREDICTION, BY_PUBLISHED):
        raise ValueError(f"by: expected {BY_PREDICTION!r} or {BY_PUBLISHED!r}, got {by!r}")
    out = []
    refitted = {id(x) for x in refit}
    for r in [*rows, *refit]:
        p: Point = r.point  # type: ignore[attr-defined]
        ratio = r.ratio  # type: ignore[attr-defined]
        counts = p.split == "held out" or id(r) in refitted
        if not counts or p.multi_step or ratio is None or ratio <= 0:
            continue
        fig: str = r.figure  # type: ignore[attr-defined]
        predicted: str = r.regime if by == BY_PREDICTION else ""  # type: ignore[attr-defined]
        regime = row_regime(p, fig, predicted)
        out.append(Comparison(owner[p.source], regime, fig, gpu_class(p.gpu), ratio))
    return out


def _by_publisher(comps: Sequence[Comparison]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in comps:
        out.setdefault(c.publisher, []).append(c.ratio)
    return out


@dataclass(frozen=True)
class Group:
    """One regime and figure: its ratios, and the interval for a new publisher over every GPU
    class and per class (`iv.publisher_spread`; None under two publishers)."""

    ratios: list[float]  # sorted
    spread: iv.PublisherSpread | None
    classes: dict[str, tuple[int, iv.PublisherSpread | None]]  # class -> (n, its spread)

    @property
    def band(self) -> iv.Interval | None:
        return _band(self.spread)


def _band(s: iv.PublisherSpread | None) -> iv.Interval | None:
    if s is None:
        return None
    return iv.Interval(
        s.n, s.quantile(0.1), math.exp(s.center), s.quantile(0.9), publishers=s.publishers
    )


def interval_table(comps: Sequence[Comparison]) -> dict[tuple[str, str], Group]:
    """(regime, figure) -> its Group: the interval a publisher not among its comparisons'
    would be judged by, over every GPU class and per class."""
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in comps:
        groups.setdefault((c.regime, c.figure), []).append(c)
    out = {}
    for key in sorted(groups, key=_order):
        cs = groups[key]
        classes: dict[str, list[Comparison]] = {}
        for c in cs:
            classes.setdefault(c.gpu_class, []).append(c)
        per = {
            k: (len(v), iv.publisher_spread(_by_publisher(v))) for k, v in sorted(classes.items())
        }
        spread = iv.publisher_spread(_by_publisher(cs))
        out[key] = Group(sorted(c.ratio for c in cs), spread, per)
    return out


def _order(key: tuple[str, str]) -> tuple[int, int]:
    regime, figure = key
    fig = INTERVAL_FIGURES.index(figure) if figure in INTERVAL_FIGURES else len(INTERVAL_FIGURES)
    return iv.REGIMES.index(regime), fig


def coverage(comps: Sequence[Comparison]) -> dict[str, tuple[int, int]]:
    """figure (`coverage_key`) -> (inside, judged): each held-out comparison against the 80 %
    interval of its regime and figure built, by the same rule as the stated ones, from the
    *other* publishers' comparisons (judged only where those number `MIN_POINTS` or more from
    two publishers or more): how often a stated interval holds on a publisher it never saw."""
    out: dict[str, tuple[int, int]] = {}
    for c in comps:
        others = [
            o
            for o in comps
            if o.publisher != c.publisher and o.regime == c.regime and o.figure == c.figure
        ]
        band = _band(iv.publisher_spread(_by_publisher(others)))
        if len(others) < iv.MIN_POINTS or band is None:
            continue
        key = coverage_key(c)
        inside, judged = out.get(key, (0, 0))
        out[key] = (inside + int(band.p10 <= c.ratio <= band.p90), judged + 1)
    return out


def coverage_key(c: Comparison) -> str:
    """The figure, and for `plan`'s capacity its regime too (the two are never pooled)."""
    return f"{c.figure} ({c.regime})" if c.figure == CAPACITY_FIGURE else c.figure


def intervals_toml(comps: Sequence[Comparison], command: str) -> str:
    """`intervals.toml`: per regime and figure, n, publishers, the ratios and (from two
    publishers) the new-publisher interval: p10/p50/p90 and the log-scale center, sd, between-
    and within-publisher sd it came from; the same per GPU class; and the leave-one-publisher-
    out coverage per figure."""
    out = [
        "# The simulator's 80 % prediction intervals by regime and figure (predicted / published",
        f"# over held-out comparisons), written by `{command}`;",
        "# harness/sim/validation/intervals.py reads it. Not to be edited by hand.",
        "",
    ]
    for (regime, fig), g in interval_table(comps).items():
        out.append(f'[regime."{regime}".{fig}]')
        out.append(
            _fields(len(g.ratios), g.spread)
            + f"ratios = [{', '.join(f'{x:.4g}' for x in g.ratios)}]"
        )
        for cls, (n, spread) in g.classes.items():
            out.append(f'[regime."{regime}".{fig}.class.{cls}]')
            out.append(_fields(n, spread).rstrip("\n"))
        out.append("")
    for fig, (inside, judged) in sorted(coverage(comps).items()):
        out.append(f'[coverage."{fig}"]\ninside = {inside}\njudged = {judged}\n')
    return "\n".join(out).rstrip("\n") + "\n"


def _fields(n: int, s: iv.PublisherSpread | None) -> str:
    if s is None:
        return f"n = {n}\npublishers = 1\n"
    return (
        f"n = {n}\npublishers = {s.publishers}\np10 = {s.quantile(0.1):.4g}\n"
        f"p50 = {math.exp(s.center):.4g}\np90 = {s.quantile(0.9):.4g}\n"
        f"log_center = {s.center:.4g}\nlog_sd = {s.sd:.4g}\n"
        f"between_sd = {s.between_sd:.4g}\nwithin_sd = {s.within_sd:.4g}\n"
    )


def intervals_markdown(comps: Sequence[Comparison]) -> str:
    """The interval table (regime, figure, n, publishers, p10, center, p90, the width p90 / p10,
    the between- and within-publisher sd on the log scale, and per GPU class), the median
    errors, then the coverage. One publisher states no interval for another: "-"."""
    out = [
        "| regime | figure | n | publishers | p10 ratio | center | p90 ratio | p90 / p10 "
        "| sd between, within (log) | per GPU class: n, p10..p90 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (regime, fig), g in interval_table(comps).items():
        classes = "; ".join(
            f"{cls} {n}: " + (f"{s.quantile(0.1):.2f}..{s.quantile(0.9):.2f}" if s else "-")
            for cls, (n, s) in g.classes.items()
        )
        s = g.spread
        cells = (
            f"{s.publishers} | {s.quantile(0.1):.2f} | {math.exp(s.center):.2f} | "
            f"{s.quantile(0.9):.2f} | {s.quantile(0.9) / s.quantile(0.1):.1f} | "
            f"{s.between_sd:.2f}, {s.within_sd:.2f}"
            if s
            else f"1 | - | {iv.quantile(g.ratios, 0.5):.2f} | - | - | -"
        )
        out.append(f"| {regime} | {fig} | {len(g.ratios)} | {cells} | {classes} |")
    out += ["", median_errors_line(comps)]
    out += [
        "",
        "| figure | held-out comparisons inside the others' 80 % interval | judged | share |",
        "|---|---|---|---|",
    ]
    for fig, (inside, judged) in sorted(coverage(comps).items(), key=lambda kv: _fig_order(kv[0])):
        mark = " (bar: >= 70 %)" if fig in BAR_FIGURES else ""
        out.append(f"| {fig}{mark} | {inside} | {judged} | {inside / judged:.0%} |")
    return "\n".join(out) + "\n"


def median_errors(comps: Sequence[Comparison]) -> dict[str, tuple[float, int]]:
    """Per figure of the bar: the median |predicted / published - 1| in %, over every held-out
    comparison of every regime, and n."""
    out = {}
    for fig in BAR_FIGURES:
        errs = sorted(abs(c.ratio - 1.0) * 100 for c in comps if c.figure == fig)
        if errs:
            out[fig] = (iv.quantile(errs, 0.5), len(errs))
    return out


def median_errors_line(comps: Sequence[Comparison]) -> str:
    return "Median |error| over every held-out comparison: " + "; ".join(
        f"{fig} {med:.1f} % (n={n})" for fig, (med, n) in median_errors(comps).items()
    )


def _fig_order(key: str) -> int:
    fig = key.split(" ", 1)[0]
    return INTERVAL_FIGURES.index(fig) if fig in INTERVAL_FIGURES else len(INTERVAL_FIGURES)
