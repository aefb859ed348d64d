"""`harness sweep SWEEP.toml`: run a grid of server settings x load points, then report it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.analysis.slo_verdict import SLO_FAIL_EXIT
from harness.argtable import Option, add_options, opt
from harness.config.sources import FILE_OPTIONS, load_sources
from harness.orchestrate.outputs import check_output_file
from harness.orchestrate.stopping import Interrupted, stop_on_signals
from harness.termtext import terminal_safe

SWEEP_TABLE: tuple[Option, ...] = (
    opt("sweep", help="sweep TOML file"),
    opt(
        "--out",
        metavar="DIR",
        help="folder for results and summary.json "
        "(default results/<name>-<UTC time>; with --resume, the latest such folder)",
    ),
    opt("--resume", action="store_true", help="continue an interrupted sweep in --out DIR"),
    opt("--repeat", type=int, help="runs per point (mean and 95%% CI); overrides the file"),
    opt("--html", metavar="OUT.html", help="also write the HTML sweep report"),
    opt(
        "--point",
        metavar="ID",
        help="point whose server time series the HTML report plots "
        "(default: the highest offered load)",
    ),
    opt("--quiet", action="store_true", help="print only the table"),
    opt(
        "--reset-prefix-cache",
        action="store_true",
        help="empty the server's prefix cache before each run (vLLM's POST /reset_prefix_cache; "
        "a vLLM the sweep starts gets VLLM_SERVER_DEV_MODE=1 for it); where the target has no "
        "such route the warm-up phase decides what each point finds cached",
    ),
    opt(
        "--no-slo-exit",
        dest="slo_exit",
        action="store_false",
        help=f"exit 0 when points missed the scenario's SLO (default: exit {SLO_FAIL_EXIT} when "
        "any finished point missed an aggregate SLO in any run)",
    ),
    *FILE_OPTIONS,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a scenario over server settings x load points (summary.json)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="For each server setting, start the server (the simulator by default), "
        "run every load point through the same path as `run`, stop the server; write one "
        "result per point and a summary.json in a folder under results/.",
        epilog="examples:\n"
        "  python -m harness sweep scenarios/sweep_max_num_seqs.toml --html sweep.html\n"
        "  python -m harness sweep scenarios/sweep_max_num_seqs.toml --resume   # the latest folder\n"
        "  python -m harness sweep scenarios/sweep_max_num_seqs.toml --repeat 3 --out results/s3\n"
        "  python -m harness report results/s3/summary.json --html s3.html",
    )
    add_options(p, SWEEP_TABLE)
    p.set_defaults(func=_main)


def _main(a: argparse.Namespace) -> int:
    from harness.analysis.slo_verdict import sweep_slo_status
    from harness.orchestrate.report import report_summary
    from harness.orchestrate.sweep import default_out_dir, load_sweep, run_sweep

    spec = load_sweep(a.sweep, a.repeat)
    load_sources(a.settings, a.config)  # bad files are refused before any server starts
    out = Path(a.out) if a.out else default_out_dir(spec, a.resume)
    if a.html:  # written after every point has run: checked now
        check_output_file("--html", Path(a.html))
    if not a.quiet:
        print(
            f"sweep {spec.name}: {len(spec.points)} points x {spec.repeat} runs -> {out}",
            file=sys.stderr,
        )
    with stop_on_signals() as signals:  # SIGINT/SIGTERM: what finished is kept, exit 130/143
        try:
            summary = run_sweep(
                spec,
                out,
                resume=a.resume,
                quiet=a.quiet,
                settings_path=a.settings,
                config_path=a.config,
                reset_prefix_cache=a.reset_prefix_cache,
                signals=signals,
            )
        except Interrupted as exc:  # between runs: the summary written so far, marked
            from harness.orchestrate.sweep_interrupt import mark_interrupted

            marked = mark_interrupted(out, exc.stop.reason)
            if marked is None:
                print(f"sweep stopped: {exc.stop.reason}; nothing ran yet", file=sys.stderr)
                return exc.status
            summary = marked
        report_summary(out / "summary.json", summary, a.html, a.point)
        print(out / "summary.json")
        if summary["sweep"].get("stop_reason"):
            print(
                terminal_safe(
                    f"sweep stopped: {summary['sweep']['stop_reason']}; "
                    f"continue with --resume --out {out}"
                ),
                file=sys.stderr,
            )
            return signals.status or 1
    if not summary["sweep"]["finished"]:
        return 1
    status, note = sweep_slo_status(summary, a.slo_exit)
    if note and not a.quiet:
        print(terminal_safe(note), file=sys.stderr)
    return status
