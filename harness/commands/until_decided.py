"""`run SCENARIO --repeat N --until-decided BASELINE`: run again until compare's gate against
BASELINE can decide, or the budget of N runs (`--repeat auto`: 10) ends.

After each run from the third on (fewer when N is smaller), the runs so far are compared with
the baseline exactly as `compare BASELINE RUNS [--max-regression ...]` would. A PASS or a
REGRESSION ends the loop with compare's exit status (0 or 1); INCONCLUSIVE goes on, unless the
gate says it needs more runs per side than the budget holds (then it stops at once, saying how
many). A budget spent on an undecided gate exits 3, with compare's report and what would decide
it. A run that fails (no result) ends the loop with its status. A shared runner then spends as
many runs as the decision needs, not a fixed count that is too few or too many.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

AUTO_BUDGET = 10  # --repeat auto with --until-decided
MIN_RUNS = 3  # the fewest that measure the spread between runs


def _result(out: str) -> dict[str, Any] | None:
    from harness.analysis.result import load_result
    from harness.errors import ConfigError

    if not Path(out).is_file():
        return None
    try:
        doc = load_result(out)
    except ConfigError:
        return None
    doc["_path"] = out
    return doc


def _line(k: int, comp: dict[str, Any]) -> str:
    status = str(comp["status"]).upper()
    decide = comp.get("decide") or {}
    more = decide.get("runs_per_side")
    held = decide.get("held_back") or []
    tail = ""
    if more:
        tail = f"; about {more} runs per side would decide it"
    if held:
        tail += f"; held back by a health warning on {', '.join(held)}"
    return f"after {k} run{'s' if k > 1 else ''}: {status}{tail}"


def run_until_decided(
    args: Any,
    budget: int,
    baseline: str,
    gates: list[str],
    out_for: Callable[[str | None, int, Path], str],
) -> int:
    """The loop (module docstring); `args`: the run's RunArgs; `gates`: --max-regression items
    (none: compare's defaults and the scenario's SLO metrics); `out_for`: the k-th run's
    result path (`run --repeat`'s naming)."""
    from datetime import UTC, datetime

    from harness.analysis import compare as cmp
    from harness.commands.compare import load_sides
    from harness.orchestrate.run import RESULTS_DIR, run_command
    from harness.orchestrate.stopping import stop_on_signals

    base = load_sides(baseline)  # bad input fails before any run
    values = cmp.parse_threshold_flags(gates) if gates else dict(cmp.DEFAULT_THRESHOLDS)
    th = {"source": "--max-regression" if gates else "defaults", "values": values}
    folder = (Path(args.result_dir) if args.result_dir else RESULTS_DIR) / (
        f"repeat-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    )
    runs: list[dict[str, Any]] = []
    comp: dict[str, Any] | None = None
    with stop_on_signals() as signals, signals.deferred(check=False):
        for k in range(1, budget + 1):
            if signals.is_set():
                break
            print(f"run {k} of at most {budget}", file=sys.stderr, flush=True)
            out = out_for(args.out, k, folder)
            html = None if args.html is None else ""
            rc = run_command(replace(args, out=out, result_dir=None, html=html), stop=signals)
            doc = _result(out)
            if doc is None:
                print(f"run {k}: no result (exit {rc}); stopped", file=sys.stderr)
                return rc or 1
            runs.append(doc)
            if k < min(MIN_RUNS, budget) or signals.is_set():
                continue
            comp = cmp.compare_results(
                base, runs, baseline, "these runs", values, slo_gates=not gates
            )
            print(_line(k, comp), file=sys.stderr, flush=True)
            decide = comp.get("decide") or {}
            if comp["status"] != "inconclusive":
                break
            if (decide.get("runs_per_side") or 0) > budget and not decide.get("held_back"):
                print(
                    f"cannot be decided within --repeat {budget}: about "
                    f"{decide['runs_per_side']} runs per side would decide it",
                    file=sys.stderr,
                )
                break
        if signals.is_set():
            print(f"run --until-decided: {signals.reason} after {len(runs)} runs", file=sys.stderr)
            return signals.status
    if comp is None:
        return 3
    print(cmp.render(cmp.build_report([comp], th, cmp.DEFAULT_REPLICATES)))
    return cmp.EXIT_CODES[comp["status"]]


__all__ = ["AUTO_BUDGET", "run_until_decided"]
