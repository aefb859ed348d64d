"""`python -m harness.orchestrate.validation`: the simulator against published vLLM
measurements (docs/validation.md). The command is `validation_cli`'s; the prediction of every
point `validation_engine`'s, whose names (and those it imports: `Point`, `Row`, the tables)
this module re-exports for the code and tests that know them by this name.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.orchestrate.validation_cli import main as _run
from harness.orchestrate.validation_engine import (
    API_SERVER_COEFFICIENTS,
    PLAN_HEADROOM,
    V0_COEFFICIENTS,
    OperatingPoint,
    PresetFiles,
    operating_points,
    plan_rows,
    predict_point,
    validate,
)
from harness.orchestrate.validation_points import (
    FIGURES,
    FIT_SOURCES,
    PLAN_FIGURE,
    PLAN_PROBE_S,
    PUBLISHED,
    REPEAT_UNCACHED_TOKENS,
    SUMMARIZED,
    SUMMED,
    TARGETS,
    Point,
    Row,
    capped,
    clipped_mean,
    gpu_class,
    load_points,
    publishers,
    scenario_doc,
    sim_settings,
)
from harness.orchestrate.validation_report import (
    cross_validation_markdown,
    errors_toml,
    markdown,
    publisher_markdown,
    summarize,
    summary_markdown,
    unanswered,
    write,
)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m harness.orchestrate.validation` (harness.orchestrate.validation_cli)."""
    return _run(argv)


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = [
    "API_SERVER_COEFFICIENTS",
    "FIGURES",
    "FIT_SOURCES",
    "OperatingPoint",
    "PLAN_FIGURE",
    "PLAN_HEADROOM",
    "PLAN_PROBE_S",
    "PUBLISHED",
    "Point",
    "PresetFiles",
    "REPEAT_UNCACHED_TOKENS",
    "Row",
    "SUMMARIZED",
    "SUMMED",
    "TARGETS",
    "V0_COEFFICIENTS",
    "capped",
    "clipped_mean",
    "cross_validation_markdown",
    "errors_toml",
    "gpu_class",
    "load_points",
    "markdown",
    "operating_points",
    "plan_rows",
    "predict_point",
    "publisher_markdown",
    "publishers",
    "scenario_doc",
    "sim_settings",
    "summarize",
    "summary_markdown",
    "unanswered",
    "validate",
    "write",
    "main",
]
