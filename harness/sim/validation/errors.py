"""How far the simulator's presets are from published measurements, per GPU class: what `plan`
and `predict` say next to their answers, and what `plan --margin` turns into headroom.

`errors.toml` is written by `python -m harness.orchestrate.validation --write` from the
validation table (docs/validation.md): for each GPU class and figure (output tokens/s, TPOT
p50, TTFT p50, and `plan`'s capacity at published operating points), the points, median and
worst |error| in %, over the points held out of the fit and over the fitted ones apart; for the
capacity, also the checks where no rate met the SLO (`unanswered`). Only held-out points
validate; a GPU class with none is "not validated", and where it has points the coefficients
were fitted on, its line gives their error too, named as no validation. A preset that names
`errors_from` (a validated class, presets/builtin.toml says why that one) states that class's
held-out error as borrowed and sizes its margin on it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.units import parse_percent

ERRORS = Path(__file__).with_name("errors.toml")
# The figures whose error sizes a capacity margin: `plan`'s capacity itself, checked at published
# operating points, and the decode side (throughput, TPOT) that a replica's capacity under a
# latency SLO follows; the largest the class has. TTFT's error is stated, not used for it.
CAPACITY_FIGURE = "plan_capacity_per_s"
MARGIN_FIGURES = (CAPACITY_FIGURE, "output_tokens_per_s", "tpot_p50_ms")
MARGIN_CHOICES = ("none", "median", "worst")
# What a validation line states, where the class has them (else whatever it has: E2E)
LINE_FIGURES = ("output_tokens_per_s", "tpot_p50_ms", "ttft_p50_ms", CAPACITY_FIGURE)
NOT_VALIDATED = "not validated against published measurements"


def gpu_class(gpu: str) -> str:
    """ "H100-SXM" -> "H100", "A100-80GB" -> "A100", "L40S" -> "L40S"."""
    return gpu.split("-")[0]


def load_errors(path: Path = ERRORS) -> dict[str, Any]:
    """{class: {figure: {"held_out": {...}, "fit": {...}}}}, and "meta"; {} without the file."""
    if not path.exists():
        return {}
    return tomllib.loads(path.read_text())


def _split(errors: Mapping[str, Any], cls: str, split: str) -> dict[str, Mapping[str, float]]:
    figures = errors.get("class", {}).get(cls, {})
    return {f: v[split] for f, v in figures.items() if split in v}


def _held(errors: Mapping[str, Any], cls: str) -> dict[str, Mapping[str, float]]:
    return _split(errors, cls, "held_out")


def is_validated(gpu: str, errors: Mapping[str, Any] | None = None) -> bool:
    """Whether the GPU's class has held-out published points."""
    return bool(_held(load_errors() if errors is None else errors, gpu_class(gpu)))


def has_published_points(gpu: str, errors: Mapping[str, Any] | None = None) -> bool:
    """Whether the GPU's class has published points at all, held out or fitted on."""
    errors = load_errors() if errors is None else errors
    return bool(errors.get("class", {}).get(gpu_class(gpu)))


def borrowed_class(gpu: str) -> str | None:
    """The validated class a built-in GPU preset borrows its error from (`errors_from`)."""
    from harness.errors import ConfigError
    from harness.sim.presets import load_presets

    try:
        preset = load_presets().gpus.get(gpu)
    except ConfigError:
        return None
    return None if preset is None else preset.errors_from


def _borrowed(errors: Mapping[str, Any], gpu: str) -> tuple[str, dict[str, Mapping[str, float]]]:
    """(the class, its held-out figures) an unvalidated GPU borrows; ("", {}) if none."""
    cls = borrowed_class(gpu)
    held = _held(errors, cls) if cls else {}
    return (cls, held) if cls and held else ("", {})


def validation_line(gpu: str, errors: Mapping[str, Any] | None = None) -> str:
    """One line: the held-out error of the preset's GPU class, or that it has none (and then,
    where the class has points the coefficients were fitted on, their error, named as such: how
    well the model reproduces what it was fitted to, not a validation)."""
    errors = load_errors() if errors is None else errors
    cls = gpu_class(gpu)
    held = _held(errors, cls)
    if held:
        return f"{gpu} ({cls} class), error on held-out published points: " + _figures(held)
    fitted = _split(errors, cls, "fit")
    lender, lent = _borrowed(errors, gpu)
    if lender:
        line = (
            f"{gpu}: not validated; errors borrowed from {lender} (its held-out published points): "
        )
        line += _figures(lent)
        if fitted:
            line += f"; on the {cls} points the coefficients were fitted on (not a validation): "
            line += _figures(fitted)
        return line
    if not fitted:
        return f"{gpu}: {NOT_VALIDATED}"
    return (
        f"{gpu}: not validated (no {cls} point is held out of the fit); error on the {cls} points "
        "the coefficients were fitted on, which is not a validation: " + _figures(fitted)
    )


def _figures(split: Mapping[str, Mapping[str, float]]) -> str:
    shown = [f for f in LINE_FIGURES if f in split] or list(split)
    return "; ".join(
        f"{fig} median {split[fig]['median']:.0f}% / worst {split[fig]['worst']:.0f}% "
        f"(n={int(split[fig]['points'])}{_unanswered(split[fig])})"
        for fig in shown
    )


def _unanswered(figure: Mapping[str, float]) -> str:
    n = int(figure.get("unanswered", 0))
    return f"; {n} more where no rate met the SLO" if n else ""


def margin_for(gpu: str, how: str, errors: Mapping[str, Any] | None = None) -> tuple[float, str]:
    """The capacity margin (a fraction: capacity is divided by 1 + it) for `how` = none,
    median, worst, pNN (`confidence_margin`) or a percentage, and what it came from. A class
    without held-out points takes the largest error of any class (and says so)."""
    if how == "none":
        return 0.0, "no margin"
    if how.lower().startswith("p"):
        return confidence_margin(how)
    if how not in MARGIN_CHOICES:
        value = parse_percent(how)
        return value, f"{value:.0%} as given"
    errors = load_errors() if errors is None else errors
    cls = gpu_class(gpu)

    def of(c: str) -> float:
        held = _held(errors, c)
        return max((held[f][how] for f in MARGIN_FIGURES if f in held), default=0.0) / 100.0

    own = of(cls)
    if own > 0:
        return own, f"{how} held-out error of {cls} ({own:.0%})"
    lender, _ = _borrowed(errors, gpu)
    if lender and of(lender) > 0:
        lent = of(lender)
        return lent, f"{gpu} not validated; {how} error borrowed from {lender} ({lent:.0%})"
    classes = list(errors.get("class", {}))
    worst = max((of(c) for c in classes), default=0.0)
    return worst, f"{cls} not validated: the largest {how} error of any class ({worst:.0%})"


def confidence_margin(how: str) -> tuple[float, str]:
    """`--margin pNN` / `--confidence`: capacity divided by the NN-th percentile q of
    predicted / published for a publisher not among those of the held-out capacity checks under
    an SLO in open load (every GPU class: too few per class; `intervals.PublisherSpread`), so
    that NN % of such cases would meet their SLO at the rate sized for; the margin is q - 1 (negative where the model under-predicts). Closed-loop operating
    points are a regime of their own and take no part. ValueError for a share outside 0.5..0.95
    or a table without enough checks."""
    from harness.sim.validation import intervals as iv

    share = iv.parse_confidence(how)
    got = iv.ratio_quantile(iv.CAPACITY_SLO, CAPACITY_FIGURE, share)
    if got is None:
        raise ValueError(f"fewer than {iv.MIN_POINTS} held-out capacity checks under an SLO")
    q, n = got
    return q - 1.0, (
        f"capacity / {q:.2f}: the p{share * 100:.0f} of predicted/published for a new "
        f"publisher, from the spread between and within publishers over {n} held-out capacity "
        f"checks under an SLO in open load (every GPU class), so {share:.0%} of such cases "
        "would meet the SLO at the rate sized for"
    )
