"""`harness compare BASELINE CANDIDATE [more ...]`: fail a build on a significant regression.

A side is one result, a folder of results or a quoted glob (several runs of one setting).
Exit 0: every gated metric passed; 1: a regression; 2: bad input (missing file, incompatible
results); 3: INCONCLUSIVE, a gated metric could not be judged (too few requests, or a result's
health warning). Sweep summaries (`summary.json`) are compared point by point.
"""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path
from typing import Any

import orjson

from harness.analysis import compare as cmp
from harness.analysis.html_trust import untrusted_runs
from harness.analysis.result import check_result, load_result
from harness.analysis.result_file import read_json_file
from harness.analysis.sweep_report import is_summary
from harness.argtable import Option, add_options, opt
from harness.errors import ConfigError, UsageError
from harness.orchestrate.outputs import check_output_file
from harness.orchestrate.stopping import stop_on_signals
from harness.termtext import terminal_safe

COMPARE_TABLE: tuple[Option, ...] = (
    opt(
        "baseline",
        help="baseline: a result JSON, a folder of results, a quoted glob ('base-*.json'), "
        "or a sweep summary.json",
    ),
    opt(
        "candidates",
        nargs="+",
        help="candidate(s), each compared with the baseline: as the baseline",
    ),
    opt(
        "--max-regression",
        action="append",
        default=[],
        metavar="METRIC=PERCENT",
        help="threshold, e.g. ttft_p99=10%% (repeatable); replaces the defaults",
    ),
    opt(
        "--thresholds",
        metavar="FILE.toml",
        help="TOML file with a [max_regression] table; flags override it",
    ),
    opt("--format", choices=("text", "markdown", "json"), default="text"),
    opt(
        "--force",
        action="store_true",
        help="compare even a simulator against a real server, or different scenarios",
    ),
    opt(
        "--replicates",
        type=int,
        default=cmp.DEFAULT_REPLICATES,
        help=f"bootstrap replicates (default {cmp.DEFAULT_REPLICATES})",
    ),
    opt("--seed", type=int, default=0, help="bootstrap seed (default 0)"),
    opt(
        "--confidence",
        type=float,
        default=cmp.DEFAULT_CONFIDENCE,
        help="the confidence all gated metrics hold together (default 0.95; 0.5 to 0.999)",
    ),
    opt("--html", metavar="OUT.html", help="also write an HTML report"),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare results against a baseline; exit 1 on a significant regression, "
        "3 when a gated metric cannot be judged",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare one or more candidates (results, folders or globs of repeated "
        "runs, or sweep summaries) with a baseline. A gated metric regresses when its change "
        "is worse than its threshold and the 95% confidence interval of the change lies "
        "entirely on the worse side; it passes when the interval's worse end stays within the "
        "threshold; otherwise it is INCONCLUSIVE. Exit 0 pass, 1 regression, 2 bad input, "
        "3 inconclusive.",
        epilog="examples:\n"
        "  python -m harness compare base.json cand.json\n"
        "  python -m harness compare 'base-*.json' 'cand-*.json'   # repeats: run --repeat 3\n"
        "  python -m harness compare base/ cand/ --max-regression ttft_p99=10% --format markdown\n"
        "  python -m harness compare results/sweep-A/summary.json results/sweep-B/summary.json\n"
        f"metrics: {', '.join(cmp.SPECS)}",
    )
    add_options(p, COMPARE_TABLE)
    p.set_defaults(func=_main)


def _load(path: str) -> dict[str, Any]:
    p = Path(path)
    doc = read_json_file(p)  # bounded: size, regular file and first byte checked before parsing
    if is_summary(doc):
        doc["_dir"] = str(p.parent)
        return doc
    doc = check_result(doc, str(p))
    doc["_path"] = str(p)
    return doc


def side_paths(arg: str) -> list[str]:
    """The results of one side: a file, every result JSON in a folder (not summary.json), or
    the files a glob matches (quoted, so the shell leaves it alone), sorted."""
    p = Path(arg)
    if p.is_dir():
        found = sorted(str(f) for f in p.glob("*.json") if f.name != "summary.json" and f.is_file())
        if not found:
            raise ConfigError(arg, "", "a folder with no result JSON in it")
        return found
    if not p.exists() and any(ch in arg for ch in "*?["):
        found = sorted(f for f in glob.glob(arg) if f.endswith(".json"))
        if not found:
            raise ConfigError(arg, "", "no result JSON matches this pattern")
        return found
    return [arg]


def load_sides(arg: str) -> list[dict[str, Any]]:
    """The documents of one side; a sweep summary only alone."""
    docs = [_load(x) for x in side_paths(arg)]
    if len(docs) > 1 and any(is_summary(d) for d in docs):
        raise UsageError(
            f"{arg}: a side is either one sweep summary.json or one or more results, not both"
        )
    return docs


def thresholds_from(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, float] = {}
    source = []
    if args.thresholds:
        values.update(cmp.load_threshold_file(args.thresholds))
        source.append(args.thresholds)
    if args.max_regression:
        values.update(cmp.parse_threshold_flags(args.max_regression))
        source.append("--max-regression")
    if not source:
        return {"source": "defaults", "values": dict(cmp.DEFAULT_THRESHOLDS)}
    return {"source": " + ".join(source), "values": values}


def _compare_results(
    base: list[dict[str, Any]],
    cand: list[dict[str, Any]],
    bname: str,
    cname: str,
    th: dict[str, float],
    args: argparse.Namespace,
    point: str | None = None,
) -> dict[str, Any]:
    return cmp.compare_results(
        base,
        cand,
        bname,
        cname,
        th,
        replicates=args.replicates,
        seed=args.seed,
        force=args.force,
        point=point,
        confidence=args.confidence,
        slo_gates=getattr(args, "slo_gates", False),
    )


def _point_results(summary: dict[str, Any], point: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for rep in point.get("runs", []):
        p = Path(summary["_dir"]) / rep["result"]
        out.append({**load_result(p), "_path": str(p)})
    return out


def _compare_summaries(
    base: dict[str, Any],
    cand: dict[str, Any],
    bname: str,
    cname: str,
    th: dict[str, float],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    bp = {p["id"]: p for p in base.get("points", []) if p.get("status") == "done"}
    cp = {p["id"]: p for p in cand.get("points", []) if p.get("status") == "done"}
    if not set(bp) & set(cp):
        raise UsageError(
            f"cannot compare {bname} with {cname}: the sweeps share no finished point "
            f"(baseline: {', '.join(sorted(bp)) or 'none'}; candidate: {', '.join(sorted(cp)) or 'none'})"
        )
    out = []
    for pid in list(bp) + [k for k in cp if k not in bp]:
        if pid not in bp or pid not in cp:
            side = "baseline" if pid not in bp else "candidate"
            out.append(
                {
                    "baseline": bname,
                    "candidate": cname,
                    "point": pid,
                    "rows": [],
                    "notes": [],
                    "data": "-",
                    "status": "pass",
                    "missing": f"not in the {side}: skipped",
                }
            )
            continue
        out.append(
            _compare_results(
                _point_results(base, bp[pid]),
                _point_results(cand, cp[pid]),
                bname,
                cname,
                th,
                args,
                point=pid,
            )
        )
    return out


def run_compare(args: argparse.Namespace) -> dict[str, Any]:
    if args.replicates < 0 or args.replicates > 100_000:
        raise UsageError(f"--replicates {args.replicates}: expected 0..100000")
    cmp.check_confidence(args.confidence, "--confidence")
    th = thresholds_from(args)
    args.slo_gates = th["source"] == "defaults"  # a scenario's SLO metrics are gated by default
    base = load_sides(args.baseline)
    comparisons = []
    for c in args.candidates:
        cand = load_sides(c)
        if is_summary(base[0]) != is_summary(cand[0]):
            raise UsageError(
                f"cannot compare {args.baseline} with {c}: one is a sweep summary, the other "
                "results; compare summary with summary, results with results"
            )
        if is_summary(base[0]):
            comparisons += _compare_summaries(
                base[0], cand[0], args.baseline, c, th["values"], args
            )
        else:
            comparisons.append(_compare_results(base, cand, args.baseline, c, th["values"], args))
    report = cmp.build_report(comparisons, th, args.replicates, args.confidence)
    report["untrusted_runs"] = untrusted_runs(report)  # runs not trustworthy or incomplete
    return report


def _main(args: argparse.Namespace) -> int:
    if args.html:  # written after the comparison: checked now
        check_output_file("--html", Path(args.html))
    with stop_on_signals():  # a large folder takes a while: SIGINT/SIGTERM stop it (130/143)
        report = run_compare(args)
    if args.format == "json":
        text = orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()
        sys.stdout.write(terminal_safe(text) + "\n")  # its escapes are JSON's: still valid JSON
    else:
        print(terminal_safe(cmp.render(report, args.format)))
    if args.html:
        from harness.analysis.html import write_html
        from harness.analysis.html_compare import render_compare_html

        write_html(Path(args.html), render_compare_html(report))
        print(args.html, file=sys.stderr)
    return cmp.EXIT_CODES[report["status"]]
