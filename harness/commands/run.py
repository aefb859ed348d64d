"""`harness run SCENARIO.toml`: measure a target (the built-in simulator when none is given)."""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.analysis.report_brief import check_brief_percentiles
from harness.argtable import add_options
from harness.commands.run_flags import RUN_TABLE
from harness.commands.run_options import fold_repeat, report_repeat, run_endpoint
from harness.config.quick import QuickArgs, flag_error, quick_scenario
from harness.config.scenario import apply_overrides
from harness.config.toml_dump import dump_toml
from harness.config.vllm_flags import (
    goodput_sets,
    metric_percentiles,
    percentile_metrics,
    tokenizer_file,
)
from harness.errors import ConfigError, UsageError
from harness.orchestrate.run import RunArgs, run_command
from harness.safe_write import write_file


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run a scenario and write a result JSON",
        description="Run a scenario against a target and write a result JSON. With no target "
        "anywhere, the built-in simulator is started on 127.0.0.1.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness run scenarios/burst.toml\n"
        "  python -m harness run scenarios/steady.toml --target http://127.0.0.1:8000 --model Qwen2.5-7B-Instruct\n"
        "  python -m harness run scenarios/steady.toml --set phases.0.duration=5s --out r.json\n"
        "  python -m harness run --rate 8 --num-requests 200 --input-len 512 --output-len 128\n"
        "  python -m harness run --rate 4 --duration 60s --input-len lognormal:512:0.5 "
        "--save-scenario mine.toml\n"
        "  python -m harness report r.json",
    )
    add_options(p, RUN_TABLE)
    p.set_defaults(func=_main)


def check_quick(doc: dict[str, Any], sets: list[str] | None = None) -> None:
    """Validate a quick-run document now, with its --set overrides (as a file is, [sim]
    included), so a bad flag is one line naming the flag (exit 2)."""
    from harness.orchestrate.scenario import load_scenario

    try:
        load_scenario(doc, sets)
    except ConfigError as exc:
        if exc.where == "--set":  # a --set value's own error, named as such already
            raise
        raise flag_error(exc) from None


def quick_args(a: argparse.Namespace) -> QuickArgs:
    return QuickArgs(
        rate=a.rate,
        num_requests=a.num_requests,
        duration=a.duration,
        concurrency=a.concurrency,
        process=a.process,
        burstiness=a.burstiness,
        input_len=a.input_len,
        output_len=a.output_len,
        range_ratio=a.range_ratio,
        dataset_name=a.dataset_name,
        dataset_path=a.dataset_path,
    )


def scenario_from_args(a: argparse.Namespace) -> str | dict[str, Any]:
    """The scenario file, or the document the quick-run flags build (written to --save-scenario)."""
    quick = quick_args(a)
    if a.scenario is not None:
        if quick.given() or a.save_scenario:
            raise UsageError(
                f"{a.scenario}: the quick-run flags (--rate, --num-requests, --duration, "
                "--concurrency, --process, --burstiness, --input-len, --output-len, "
                "--random-range-ratio, --dataset-name, --dataset-path, --save-scenario) build "
                "a scenario of their own; with a file, change it with --set KEY=VALUE"
            )
        return str(a.scenario)
    if not quick.given():
        raise UsageError(
            "give a scenario file (python -m harness run scenarios/steady.toml) or the "
            "quick-run flags (python -m harness run --rate 8 --num-requests 200)"
        )
    doc = quick_scenario(quick)
    check_quick(doc, a.sets)
    if a.save_scenario:
        # The file holds what the run will run: the flags' document with --set and --seed applied.
        saved = copy.deepcopy(doc)
        apply_overrides(saved, a.sets or [])
        if a.seed is not None:
            saved["seed"] = a.seed
        path = Path(a.save_scenario)
        try:
            write_file(  # harness.safe_write: exclusive tmp, no link followed
                path,
                "# written by: python -m harness "
                + " ".join(sys.argv[1:])
                + "\n"
                + dump_toml(saved),
            )
        except OSError as exc:
            raise UsageError(
                f"--save-scenario {path}: cannot write: {exc.strerror or exc}"
            ) from None
        print(f"scenario written to {path.absolute()}", file=sys.stderr)
    return doc


def slo_sets(items: list[str]) -> list[str]:
    """`--slo ttfo_p99=2s` -> `--set slo.ttfo_p99=2s` (the scenario's [slo] checks the name and
    the limit, naming both)."""
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or "." in name or not value.strip():
            raise UsageError(
                f"--slo {item!r}: expected NAME=LIMIT such as ttfo_p99=2s (a statistic of the "
                "run) or ttfo=2s (a per-request limit, counted by goodput)"
            )
        out.append(f"slo.{name.strip()}={value.strip()}")
    return out


def vllm_sets(a: argparse.Namespace) -> list[str]:
    """The `--set` overrides vllm bench serve's scenario flags amount to (appended to --set, so
    a quick run's --save-scenario and a scenario file see them alike)."""
    sets = goodput_sets(a.goodput) if a.goodput else []
    sets += slo_sets(a.slo)
    if a.tokenizer is not None:
        sets.append(f"workload.tokenizer={tokenizer_file(a.tokenizer)}")
    if a.ignore_eos:
        sets.append("workload.ignore_eos=true")
    return sets


def _main(a: argparse.Namespace) -> int:
    if a.prometheus_port is not None and not 0 <= a.prometheus_port <= 65535:
        raise UsageError(
            f"--prometheus-port: expected a port 0..65535 (0: any free one), got {a.prometheus_port}"
        )
    a.sets = list(a.sets) + vllm_sets(a)
    metrics = percentile_metrics(a.percentile_metrics) if a.percentile_metrics else None
    percentiles = metric_percentiles(a.metric_percentiles) if a.metric_percentiles else None
    if percentiles is not None:
        check_brief_percentiles(percentiles)
    if a.repeat == 0 and not a.until_decided:
        raise UsageError("--repeat auto: only with --until-decided BASELINE")
    if a.repeat < 0:
        raise UsageError(f"--repeat {a.repeat}: expected a number of runs >= 1, or auto")
    if a.max_regression and not a.until_decided:
        raise UsageError("--max-regression: only with --until-decided (else use compare)")
    if a.repeat > 1 and a.explain:
        raise UsageError("--repeat with --explain: --explain runs nothing; drop --repeat")
    args = RunArgs(
        scenario=scenario_from_args(a),
        target=a.target,
        model=a.model,
        endpoint=run_endpoint(a),
        out=a.out,
        sets=a.sets,
        seed=a.seed,
        quiet=a.quiet,
        grace_s=a.grace,
        probe=a.probe,
        settings=a.settings,
        config=a.config,
        insecure=a.insecure,
        explain=a.explain,
        api_key_env=a.api_key_env,
        http_client=a.http_client,
        workers=a.workers,
        ray=a.ray,
        html=a.html,
        strict_request=a.strict_request,
        prometheus_port=a.prometheus_port,
        prometheus_host=a.prometheus_host,
        result_dir=a.result_dir,
        save_result=a.save_result or a.result_filename is not None,
        save_detailed=a.save_detailed,
        result_filename=a.result_filename,
        brief=a.brief or metrics is not None or percentiles is not None,
        percentile_metrics=metrics,
        metric_percentiles=percentiles,
        prometheus_linger_s=a.prometheus_linger,
        slo_exit=a.slo_exit,
    )
    if a.until_decided:
        from harness.commands.until_decided import AUTO_BUDGET, run_until_decided

        budget = a.repeat or AUTO_BUDGET
        return run_until_decided(args, budget, a.until_decided, a.max_regression, repeat_out)
    if a.repeat == 1:
        return run_command(args)
    return run_repeated(args, a.repeat)


def repeat_out(out: str | None, k: int, folder: Path) -> str:
    """The k-th result of `--repeat`: OUT-k.json beside --out, or FOLDER/run-k.json (one folder
    for the N runs, which `compare` takes as one side)."""
    if out is None:
        return str(folder / f"run-{k}.json")
    p = Path(out)
    return str(p.with_name(f"{p.stem}-{k}{p.suffix or '.json'}"))


def run_repeated(args: RunArgs, n: int) -> int:
    """`run --repeat N`: N runs of one plan one after the other, each its own result (and HTML
    next to it when asked), each run's SLO verdict on a line; the most serious status
    (harness.analysis.slo_verdict: 1 when any run failed, else 99 when any missed its SLO)."""
    from datetime import UTC, datetime

    from harness.orchestrate.run import RESULTS_DIR
    from harness.orchestrate.stopping import stop_on_signals

    base = Path(args.result_dir) if args.result_dir else RESULTS_DIR
    folder = base / f"repeat-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    statuses = []
    # SIGINT/SIGTERM: the run in progress stops at once, marked incomplete (harness.orchestrate.stopping)
    with stop_on_signals() as signals, signals.deferred(check=False):
        for k in range(1, n + 1):
            if signals.is_set():
                break
            if not args.quiet:
                print(f"run {k} of {n}", file=sys.stderr, flush=True)
            html = None if args.html is None else ""  # next to each result: one page per run
            out = repeat_out(args.out, k, folder)
            rc = run_command(replace(args, out=out, result_dir=None, html=html), stop=signals)
            statuses.append(report_repeat(args, k, n, rc, out))
        if signals.is_set():
            print(
                f"run --repeat: {signals.reason} after run {len(statuses)} of {n} (a run cut short "
                "is marked incomplete; the others are kept); no resume: run the rest again",
                file=sys.stderr,
            )
            return signals.status
    return fold_repeat(args, statuses)
