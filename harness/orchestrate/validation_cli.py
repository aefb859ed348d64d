"""`python -m harness.orchestrate.validation`: one mode per run -- the table (default), `--write`
(every stored table), `--intervals`, `--set`/`--set-v0` (coefficients tried), `--fit` and
`--cross-validate` -- each a named step over `harness.orchestrate.validation`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.orchestrate import validation_engine as v
from harness.orchestrate import validation_fit as vf
from harness.orchestrate.validation_points import (
    PLAN_FIGURE,
    Point,
    capped,
    load_points,
    publishers,
)
from harness.orchestrate.validation_report import (
    cross_validation_markdown,
    markdown,
    publisher_markdown,
    write,
)

WRITE_COMMAND = "python -m harness.orchestrate.validation --write"


def _parser() -> Any:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m harness.orchestrate.validation")
    ap.add_argument("--fit", action="store_true", help="fit FIT_COEFFICIENTS on the fit split")
    ap.add_argument("--rounds", type=int, help="Nelder-Mead rounds (--fit 60, --refit 40)")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME",
        help="with --fit: fit this GpuPreset coefficient too, beside FIT_COEFFICIENTS (the joint "
        "refit: --also tp_sequence_overhead_s)",
    )
    ap.add_argument(
        "--in-sample",
        action="store_true",
        help="with --fit: fit on every point, nothing held out (how far one set of coefficients "
        "can go; the errors it leaves are a floor for any split)",
    )
    ap.add_argument(
        "--cap-s",
        type=float,
        metavar="S",
        help="with --fit: replay each long open-loop run for about S seconds of model time "
        "(capped(); what makes --in-sample affordable: 120 s, ~17 s a validation)",
    )
    ap.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --fit: start the search from this value instead of the presets' (a fitted "
        "coefficient, SI units)",
    )
    ap.add_argument(
        "--cross-validate",
        action="store_true",
        help="leave one publisher out over CROSS_GRID (the API server's request latency and "
        "intake): what each publisher's points give when those are chosen without them",
    )
    ap.add_argument(
        "--write",
        action="store_true",
        help="write errors.toml, intervals.toml and docs/validation.md's generated sections",
    )
    ap.add_argument(
        "--refit-publishers",
        action="store_true",
        help="refit FIT_COEFFICIENTS without each publisher of the fit split (--rounds; "
        "default 40 here) and store them in refits.toml, which --write and --intervals use to "
        "predict that publisher's points held out",
    )
    ap.add_argument(
        "--intervals",
        action="store_true",
        help="print the 80%% intervals by regime and figure (what --write stores), unwritten",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="try a coefficient (a GpuPreset field, SI units) on every point: the table, unwritten",
    )
    ap.add_argument(
        "--set-v0",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="try a coefficient on the V0 points only (beside V0_COEFFICIENTS)",
    )
    return ap


def _check_modes(ap: Any, a: Any) -> None:
    """argparse's error for flags that need --fit without it, and for two modes at once."""
    if a.also and not a.fit:
        ap.error("--also: only with --fit")
    for flag, given in (("--start", a.start), ("--in-sample", a.in_sample), ("--cap-s", a.cap_s)):
        if given and not a.fit:
            ap.error(f"{flag}: only with --fit")
    if a.cap_s is not None and a.cap_s <= 0:
        ap.error(f"--cap-s {a.cap_s:g}: expected seconds > 0")
    modes = [
        flag
        for flag, on in (
            ("--set/--set-v0", bool(a.set or a.set_v0)),
            ("--fit", a.fit),
            ("--cross-validate", a.cross_validate),
            ("--write", a.write),
            ("--intervals", a.intervals),
            ("--refit-publishers", a.refit_publishers),
        )
        if on
    ]
    if len(modes) > 1:  # each would ignore the others: say so rather than drop one
        ap.error(f"{' and '.join(modes)}: give one of them (each is its own run)")


def _try_coefficients(
    points: Sequence[Point], tried: dict[str, float], v0: dict[str, float]
) -> int:
    """--set/--set-v0: the table at those coefficients, and both losses `fit` minimises."""
    from harness.orchestrate.validation_fit import fit_loss

    rows = v.validate(points, tried, v0) + v.plan_rows(points, tried)
    # the rows `fit` minimises over: validated figures, V0 multi-step apart
    every = [r for r in rows if not r.point.multi_step and r.figure != PLAN_FIGURE]
    fitted = [r for r in every if r.point.split == "fit"]
    print(f"# fit-split loss {fit_loss(fitted):.4f}; over every point {fit_loss(every):.4f}")
    print(markdown(rows))
    print(publisher_markdown(rows), end="")
    return 0


REFIT_COMMAND = "python -m harness.orchestrate.validation --refit-publishers"


def _refit(points: Sequence[Point], rounds: int) -> int:
    """--refit-publishers: refits.toml, and what each refit gave."""
    from harness.safe_write import write_file

    refits = vf.refit_publishers(points, rounds)
    write_file(vf.REFITS, vf.refits_toml(refits, REFIT_COMMAND, rounds))
    for pub, (coefficients, loss) in sorted(refits.items()):
        print(f"# without {pub}: loss {loss:.4f} on the others' fit points")
        for name, value in coefficients.items():
            print(f"{name} = {value:.6g}")
    return 0


def _fit(ap: Any, a: Any, points: Sequence[Point]) -> int:
    """--fit: the coefficients and their loss."""
    also = [_coefficient_name(ap, name) for name in a.also]
    start = _coefficient_args(ap, a.start)
    names = vf.FIT_COEFFICIENTS + tuple(n for n in also if n not in vf.FIT_COEFFICIENTS)
    if set(start) - set(names):
        ap.error(f"--start {sorted(set(start) - set(names))[0]}: not a fitted coefficient")
    if a.cap_s:
        points = [capped(p, a.cap_s) for p in points]
    rounds = a.rounds or 60
    coefficients, loss = vf.fit(points, names, rounds=rounds, start=start, in_sample=a.in_sample)
    print(f"# loss {loss:.4f}")
    for name, value in coefficients.items():
        print(f"{name} = {value:.6g}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    tried = _coefficient_args(ap, a.set)
    tried_v0 = {**v.V0_COEFFICIENTS, **_coefficient_args(ap, a.set_v0)}
    for name in a.also:
        _coefficient_name(ap, name)
    _check_modes(ap, a)
    points, _ = load_points()
    if tried or a.set_v0:
        return _try_coefficients(points, tried, tried_v0)
    if a.cross_validate:
        from harness.orchestrate.validation_fit import cross_validate

        folds, together = cross_validate(points)
        print(cross_validation_markdown(folds, together), end="")
        return 0
    if a.fit:
        return _fit(ap, a, points)
    if a.refit_publishers:
        return _refit(points, a.rounds or vf.REFIT_ROUNDS)
    rows = v.validate(points) + v.plan_rows(points)
    refit = vf.refit_rows(points, vf.load_refits())
    if a.intervals:
        from harness.orchestrate.validation_regimes import comparisons, intervals_markdown

        print(intervals_markdown(comparisons(rows, publishers(), refit)), end="")
        return 0
    if a.write:
        write(rows, WRITE_COMMAND, refit=refit)
    print(markdown(rows), end="")
    return 0


def _coefficient_name(ap: Any, name: str, item: str | None = None) -> str:
    """`name` if it is a GpuPreset float coefficient; argparse's error (naming `item`, the
    argument as given, or `name`) if not."""
    from harness.sim.presets import GpuPreset

    field = GpuPreset.__dataclass_fields__.get(name)
    if field is None or field.type not in ("float", float):
        ap.error(f"{item or name!r}: expected a GpuPreset coefficient (a float field of GpuPreset)")
    return name


def _coefficient_args(ap: Any, items: Sequence[str]) -> dict[str, float]:
    """`NAME=VALUE` arguments as GpuPreset float coefficients; argparse's error otherwise."""
    out: dict[str, float] = {}
    for item in items:
        name, _, value = item.partition("=")
        _coefficient_name(ap, name, item)
        try:
            out[name] = float(value)
        except ValueError:
            ap.error(f"{item!r}: VALUE must be a number (SI units: seconds, not ms)")
    return out
