"""A run's SLO verdict as an exit status: k6's convention (a failed threshold fails the
process with a code of its own), so a CI job fails on a missed SLO without parsing text.

Pure: results (or a sweep's points) in, a verdict, its one-line text and the status out. Only
an aggregate SLO (`ttfo_p99 = "2s"`: a statistic of the run against a limit) has a verdict; a
per-request limit (`ttfo = "2s"`) is counted by goodput and judges nothing. A verdict that
could not be judged (no value: no request had the metric) is not a failure.

The exit statuses of `run`, `run --repeat` and `sweep`, most serious first:
130/143 (interrupted by SIGINT/SIGTERM), 2 (bad input), 1 (an error: a run that did not
finish, every request failed), SLO_FAIL_EXIT (every run finished and some SLO failed), 0.
A sweep exits SLO_FAIL_EXIT when it finished and any point missed an aggregate SLO in any of
its runs (`sweep_slo_status`; a sweep of rates that looks for the knee expects some to miss:
`--no-slo-exit`).

Not judged (health). The built-in simulator, short of CPU, falls behind its model: its
model's clock lags the wall clock and every token is delivered late by the lag, which it logs
(harness.sim.engine, harness.analysis.compare_health). A run that missed an SLO only because
of that lag is no miss of the model: where the run's simulator warning fired and its journal
has the lag's log, `health_explained` takes the lag out of each token stamp (as compare does)
and a failed SLO whose model figure meets the limit is "not judged (health)": the run exits 0
and says so on stderr (the result keeps the measured verdict). A miss the lag cannot explain
stays a miss; the client's own lag is not excused (it bounds a figure, it does not give the
figure without it). This is the one place that reads beyond the result: the journal beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from harness.analysis.numbers import fmt_number

SLO_FAIL_EXIT = 99  # k6's code for a failed threshold; distinct from 1, 2, 3, 130 and 143
# how serious each status is when several runs are folded into one (unknown codes: as 1)
_RANK = {0: 0, SLO_FAIL_EXIT: 1, 3: 1, 1: 2, 2: 3, 143: 4, 130: 5}


def aggregate_verdicts(slo: Iterable[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The verdicts that judge (aggregate SLOs), from a result's or a sweep point's `slo`."""
    return [v for v in slo or [] if v.get("kind") == "aggregate"]


def failed(slo: Iterable[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The aggregate SLOs that failed (`pass` false)."""
    return [v for v in aggregate_verdicts(slo) if v.get("pass") is False]


def result_slo(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A result's SLO verdicts over its measured phases (the summary's `slo`)."""
    return list((result.get("summary") or {}).get("slo") or [])


def verdict_word(slo: Iterable[Mapping[str, Any]] | None) -> str | None:
    """PASS, FAIL or NOT JUDGED (some SLO had no value) over the aggregate SLOs; None: none."""
    judged = aggregate_verdicts(slo)
    if not judged:
        return None
    if any(v.get("pass") is False for v in judged):
        return "FAIL"
    return "NOT JUDGED" if any(v.get("pass") is None for v in judged) else "PASS"


def _one(v: Mapping[str, Any]) -> str:
    value = v.get("value_ms")
    shown = "no value" if value is None else f"{fmt_number(value)} ms"
    verdict = v.get("pass")
    sign = "<=" if verdict is True else (">" if verdict is False else "vs")
    return f"{v.get('name')} {shown} {sign} {fmt_number(v.get('limit_ms'))} ms"


def verdict_line(slo: Iterable[Mapping[str, Any]] | None) -> str | None:
    """`SLO FAIL: ttfo_p99 2,695 ms > 2,000 ms; ttft_p99 310 ms <= 1,000 ms` (failures first);
    None when there is no aggregate SLO."""
    judged = aggregate_verdicts(slo)
    word = verdict_word(judged)
    if word is None:
        return None
    order = sorted(judged, key=lambda v: {False: 0, None: 1, True: 2}[v.get("pass")])
    return f"SLO {word}: " + "; ".join(_one(v) for v in order)


def slo_lines(slo: Iterable[Mapping[str, Any]]) -> list[str]:
    """Each SLO's verdict, one line each (the full report's and `--brief`'s)."""
    lines = []
    for v in slo:
        if v["kind"] == "aggregate":
            verdict = "n/a" if v["pass"] is None else ("PASS" if v["pass"] else "FAIL")
            lines.append(
                f"SLO {v['name']} <= {fmt_number(v['limit_ms'])} ms: {fmt_number(v['value_ms'])} ms {verdict}"
            )
        else:
            att = "-" if v["attainment"] is None else f"{v['attainment']:.1%}"
            lines.append(
                f"SLO {v['name']} <= {fmt_number(v['limit_ms'])} ms per request: met by {att}"
            )
    return lines


SIM_BEHIND = "behind its own model"  # the simulator's warning (harness.analysis.result)


def _figure(values: Any, stat: str) -> float | None:
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return None
    if stat == "mean":
        return float(v.mean())
    if stat == "max":
        return float(v.max())
    if stat.startswith("p"):
        return float(np.quantile(v, float(stat[1:]) / 100, method="inverted_cdf"))
    return None


def health_explained(result: Mapping[str, Any], side: Any = None) -> dict[str, float]:
    """Failed aggregate SLO name -> its model figure (ms), for each one that the simulator's
    lag explains: the figure with the lag taken out of each token stamp meets the limit
    (module docstring). `side`: the run's compare.Side (read from the journal beside the
    result when None). Empty when the simulator's warning did not fire or the journal has no
    log of its lag."""
    misses = failed(result_slo(result))
    warnings = (result.get("client") or {}).get("warnings") or []
    if not misses or not any(SIM_BEHIND in str(w) for w in warnings):
        return {}
    if side is None:
        from harness.analysis.compare_sides import _journal_side

        side = _journal_side(dict(result))
    if side is None or side.fixed is None:
        return {}
    out = {}
    for v in misses:
        metric, _, stat = str(v.get("name")).rpartition("_")
        if metric.startswith("itl"):
            shown = _figure(side.token_samples(metric)[0], stat)
            model = _figure(side.fixed.token_samples(metric)[0], stat)
        elif metric in side.values:
            shown = _figure(side.values[metric], stat)
            model = _figure(side.fixed.values[metric], stat)
        else:
            continue
        value, limit = v.get("value_ms"), v.get("limit_ms")
        if not (shown and model is not None and isinstance(value, int | float)):
            continue
        figure = float(value) * model / shown  # the result's figure, less the lag's part
        if isinstance(limit, int | float) and figure <= limit:
            out[str(v.get("name"))] = figure
    return out


def run_status(
    status: int,
    result: Mapping[str, Any],
    slo_exit: bool,
    explained: Mapping[str, float] | None = None,
) -> int:
    """A finished run's status: `status` (0 or an error) unless it is 0 and an SLO failed,
    which is SLO_FAIL_EXIT where `slo_exit` (run's default; --no-slo-exit turns it off) and
    the simulator's lag does not explain every miss (`health_explained`, computed here
    when not given)."""
    misses = failed(result_slo(result))
    if status == 0 and slo_exit and misses:
        if explained is None:
            explained = health_explained(result)
        if any(str(v.get("name")) not in explained for v in misses):
            return SLO_FAIL_EXIT
    return status


def health_note(result: Mapping[str, Any], explained: Mapping[str, float]) -> str:
    """The stderr line of a run whose missed SLOs the simulator's lag explains."""
    parts = []
    for v in failed(result_slo(result)):
        name = str(v.get("name"))
        if name in explained:
            parts.append(
                f"{name} {fmt_number(v.get('value_ms'))} ms measured, "
                f"{fmt_number(explained[name])} ms without the simulator's lag "
                f"(limit {fmt_number(v.get('limit_ms'))} ms)"
            )
    return (
        "SLO not judged (health): "
        + "; ".join(parts)
        + ": the simulator was short of CPU; exit 0 (rerun where it is quiet to judge it)"
    )


def slo_exit_status(
    status: int,
    result: Mapping[str, Any],
    slo_exit: bool,
    say: Callable[[str], None] | None = None,
) -> int:
    """`run_status`, and `say` the line that explains SLO_FAIL_EXIT when that is the status,
    or that a miss is not judged (health)."""
    explained = health_explained(result) if status == 0 and slo_exit else {}
    out = run_status(status, result, slo_exit, explained)
    if say is not None:
        if out == SLO_FAIL_EXIT:
            say(exit_note(result_slo(result)))
        elif explained and failed(result_slo(result)):
            say(health_note(result, explained))
    return out


def fold_statuses(statuses: Sequence[int]) -> int:
    """One status for several runs (`run --repeat`, a sweep): the most serious (module
    docstring's order), 0 for none."""
    return max(statuses, key=lambda s: _RANK.get(s, 2), default=0)


def sweep_slo_status(summary: Mapping[str, Any], slo_exit: bool) -> tuple[int, str | None]:
    """A finished sweep's status and the line that explains it: SLO_FAIL_EXIT (where
    `slo_exit`) when any finished point missed an aggregate SLO in any of its runs, else 0."""
    missed = [
        str(p.get("id"))
        for p in summary.get("points") or []
        if p.get("status") == "done"
        and (failed(p.get("slo")) or any(failed(r.get("slo")) for r in p.get("runs") or []))
    ]
    if not missed:
        return 0, None
    note = f"{len(missed)} sweep points missed the SLO: {', '.join(missed)}"
    if not slo_exit:
        return 0, note
    return SLO_FAIL_EXIT, f"{note}: exit {SLO_FAIL_EXIT} (--no-slo-exit: exit 0)"


def exit_note(slo: Iterable[Mapping[str, Any]] | None, what: str = "the run") -> str:
    """The stderr line that says why the process exits SLO_FAIL_EXIT."""
    names = ", ".join(str(v.get("name")) for v in failed(slo))
    return (
        f"{what} missed its SLO ({names}): exit {SLO_FAIL_EXIT} "
        "(--no-slo-exit: exit 0 on a missed SLO)"
    )


__all__ = [
    "SLO_FAIL_EXIT",
    "aggregate_verdicts",
    "exit_note",
    "failed",
    "fold_statuses",
    "health_explained",
    "health_note",
    "result_slo",
    "run_status",
    "slo_exit_status",
    "slo_lines",
    "sweep_slo_status",
    "verdict_line",
    "verdict_word",
]
