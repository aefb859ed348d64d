"""The validation's tables: every row, the summary per figure, GPU class and split, each
publisher's medians, the leave-one-publisher-out choice, and what `--write` stores
(`errors.toml`, `intervals.toml` and docs/validation.md's generated sections). Pure apart from
`write`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.orchestrate.validation_points import (
    PLAN_FIGURE,
    SUMMARIZED,
    TARGETS,
    Row,
    gpu_class,
    publishers,
)
from harness.safe_write import write_file

if TYPE_CHECKING:
    from harness.orchestrate.validation_points import Fold


def _group(r: Row) -> tuple[str, str, str]:
    """What the summary groups a row by: figure, GPU class, split."""
    return (summary_figure(r), gpu_class(r.point.gpu), r.point.split)


# `plan`'s capacity at a closed-loop sweep point: a regime of its own (docs/validation.md,
# "Regimes"), summarised apart so that no margin (MARGIN_FIGURES) is sized on it
CLOSED_LOOP_FIGURE = "plan_capacity_closed_loop_per_s"


def summary_figure(r: Row) -> str:
    """The figure a row is summarised under: a capacity check at a closed-loop operating point
    under CLOSED_LOOP_FIGURE, every other row under its own."""
    if r.figure == PLAN_FIGURE and r.point.raw.get("slo_ttft_p99_ms") is None:
        return CLOSED_LOOP_FIGURE
    return r.figure


def summarize(rows: Sequence[Row]) -> dict[tuple[str, str, str], tuple[int, float, float]]:
    """(figure, GPU class, split) -> (points, median |error| %, worst |error| %)."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        if r.error_pct is None or r.figure not in SUMMARIZED or r.point.multi_step:
            continue
        groups.setdefault(_group(r), []).append(abs(r.error_pct))
    return {k: (len(v), statistics.median(v), max(v)) for k, v in sorted(groups.items()) if v}


def unanswered(rows: Sequence[Row]) -> dict[tuple[str, str, str], int]:
    """(figure, GPU class, split) -> capacity checks where no rate met the SLO: the model's
    latency at the lightest load already above the published one (not in `summarize`)."""
    out: dict[tuple[str, str, str], int] = {}
    for r in rows:
        if r.figure == PLAN_FIGURE and r.predicted is None and not r.point.multi_step:
            out[_group(r)] = out.get(_group(r), 0) + 1
    return out


def errors_toml(rows: Sequence[Row], command: str) -> str:
    """`errors.toml` (harness.sim.validation.errors): per GPU class and target figure, the
    points, median and worst |error| % of the held-out and of the fitted points."""
    out = [
        "# The simulator's error against published vLLM measurements, per GPU class (written by",
        f"# `{command}`; docs/validation.md has every point). Read by plan and predict.",
        "",
    ]
    missing = unanswered(rows)
    for (fig, cls, split), (n, med, worst) in summarize(rows).items():
        key = "held_out" if split == "held out" else "fit"
        extra = f", unanswered = {m}" if (m := missing.get((fig, cls, split))) else ""
        out.append(
            f"class.{cls}.{fig}.{key} = {{ points = {n}, median = {med:.1f}, "
            f"worst = {worst:.1f}{extra} }}"
        )
    return "\n".join(out) + "\n"


VALIDATION_DOC = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
# Every figure of every point: too long for the reference page, beside it
VALIDATION_TABLE = VALIDATION_DOC.with_name("validation-table.md")
BEGIN = "<!-- generated: python -m harness.orchestrate.validation --write (begin) -->"
END = "<!-- generated (end) -->"


def generated_section(rows: Sequence[Row], refit: Sequence[Row] = ()) -> str:
    """What docs/validation.md carries between BEGIN and END: the intervals by regime, figure
    and GPU class, the median errors, and the intervals' held-out coverage (`refit`: the fit
    publishers' rows at coefficients refitted without each)."""
    from harness.orchestrate.validation_regimes import comparisons, intervals_markdown

    return intervals_markdown(comparisons(rows, publishers(), refit))


def table_page(rows: Sequence[Row], command: str) -> str:
    """docs/validation-table.md: every figure of every point, and the median and worst |error|
    per figure, GPU class and split."""
    return (
        "# Validation: every figure of every point\n\n"
        f"Written by `{command}` (docs/validation.md explains the columns and the split).\n\n"
        + markdown(rows)
    )


def write(
    rows: Sequence[Row],
    command: str,
    doc: Path = VALIDATION_DOC,
    table: Path = VALIDATION_TABLE,
    refit: Sequence[Row] = (),
) -> None:
    """errors.toml, intervals.toml, the generated section of docs/validation.md (replaced in
    place between BEGIN and END) and docs/validation-table.md; `refit` rows count in the
    intervals only (`generated_section`)."""
    from harness.orchestrate.validation_regimes import comparisons, intervals_toml
    from harness.sim.validation.errors import ERRORS
    from harness.sim.validation.intervals import INTERVALS

    write_file(ERRORS, errors_toml(rows, command))
    write_file(INTERVALS, intervals_toml(comparisons(rows, publishers(), refit), command))
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    write_file(doc, f"{head}{BEGIN}\n\n{generated_section(rows, refit)}\n{END}{tail}")
    write_file(table, table_page(rows, command))


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def markdown(rows: Sequence[Row]) -> str:
    """The table of every row and the summary per figure, GPU class and split."""
    out = [
        "| point | source | GPU | model | TP | figure | published | predicted | ratio | split |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r.point
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        split = p.split + (" (V0 multi-step)" if p.multi_step else "")
        split += " (lengths approximate)" if p.approximate else ""
        pred = _fmt(r.predicted) if r.predicted is not None else f"- ({r.note or 'none'})"
        figure = f"{r.figure} ({r.slo.replace('=', ' <= ')})" if r.slo else r.figure
        out.append(
            f"| {p.id} | {p.source} | {p.gpu} | {p.raw['model']} | {p.raw['tp']} | {figure} | "
            f"{_fmt(r.published)} | {pred} | {ratio} | {split} |"
        )
    return "\n".join(out) + "\n\n" + summary_markdown(rows)


def summary_markdown(rows: Sequence[Row]) -> str:
    """The summary per figure, GPU class and split (median and worst |error|, the target)."""
    out = [
        "| figure | GPU class | split | points | median abs error % | worst abs error % | target % "
        "| no answer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    missing = unanswered(rows)
    for (fig, cls, split), (n, med, worst) in summarize(rows).items():
        target = f"{TARGETS[fig]:g}" if fig in TARGETS else "-"
        none = (
            missing.get((fig, cls, split), 0) if fig in (PLAN_FIGURE, CLOSED_LOOP_FIGURE) else "-"
        )
        out.append(
            f"| {fig} | {cls} | {split} | {n} | {med:.1f} | {worst:.1f} | {target} | {none} |"
        )
    return "\n".join(out) + "\n"


def _median_cells(rows: Sequence[Row], figures: Sequence[str]) -> list[str]:
    """Per figure: the median |error| % of `rows` and how many ("-" for none)."""
    cells = []
    for fig in figures:
        errs = [abs(r.error_pct) for r in rows if r.figure == fig and r.error_pct is not None]
        cells.append(f"{statistics.median(errs):.1f} (n={len(errs)})" if errs else "-")
    return cells


def publisher_markdown(rows: Sequence[Row]) -> str:
    """Per publisher, the target figures' median |error| % (V0 multi-step points apart): where
    a set of coefficients leaves each source."""
    owner = publishers()
    figures = [f for f in TARGETS if f != PLAN_FIGURE]
    out = [
        "| publisher | " + " | ".join(f"{f} median abs error %" for f in figures) + " |",
        "|---" * (1 + len(figures)) + "|",
    ]
    for pub in sorted({owner[r.point.source] for r in rows}):
        mine = [r for r in rows if owner[r.point.source] == pub and not r.point.multi_step]
        if mine:
            out.append(f"| {pub} | " + " | ".join(_median_cells(mine, figures)) + " |")
    return "\n".join(out) + "\n"


def cross_validation_markdown(folds: Sequence[Fold], together: Mapping[str, float]) -> str:
    """Per publisher left out: the values chosen without it, and its target figures' median
    |error| % there."""
    names = list(together)
    figures = [f for f in TARGETS if f != PLAN_FIGURE]
    out = [
        "| left out | "
        + " | ".join(names)
        + " | loss on the others | "
        + " | ".join(f"{f} median abs error %" for f in figures)
        + " |",
        "|---" * (len(names) + 2 + len(figures)) + "|",
    ]
    for fold in folds:
        cells = _median_cells(fold.rows, figures)
        out.append(
            f"| {fold.publisher} | "
            + " | ".join(f"{fold.chosen[n]:g}" for n in names)
            + f" | {fold.train_loss:.4f} | "
            + " | ".join(cells)
            + " |"
        )
    out.append(
        "| (none: all publishers) | "
        + " | ".join(f"{together[n]:g}" for n in names)
        + " | | "
        + " | ".join("" for _ in figures)
        + " |"
    )
    return "\n".join(out) + "\n"
