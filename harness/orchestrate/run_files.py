"""Where a run's result goes and the files written beside it: the result's path (`--out`,
`--result-dir`, config.toml's `[output] dir`), the checks before a run that it can be written,
the HTML report (`--html`) and vllm bench serve's JSON (`--save-result`)."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.config.resolve import Resolution
from harness.errors import RunAborted, UsageError
from harness.orchestrate.outputs import check_output_file
from harness.orchestrate.run_args import RunArgs
from harness.record.journal import journal_path_for, read_journal
from harness.safe_write import write_file

RESULTS_DIR = Path("results")
MIN_FREE_BYTES = 64 * 1024 * 1024  # refuse to start a run that could not journal its records


def default_out_path(name: str, now: datetime | None = None, folder: Path = RESULTS_DIR) -> Path:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return folder / f"{name}-{stamp}.json"


def out_path(args: RunArgs, res: Resolution, name: str) -> tuple[Path, str]:
    """(where the result goes, the flag or key that decided it): `--out FILE`, else
    `<folder>/<name>-<UTC time>.json` in `--result-dir`, config.toml's `[output] dir` or
    results/ (relative folders: to the working directory)."""
    result_dir = getattr(args, "result_dir", None)
    if args.out:
        if result_dir:
            raise UsageError(
                f"--out {args.out} names the result file and --result-dir {result_dir} its "
                "folder: give one (--out DIR/NAME.json, or --result-dir DIR)"
            )
        return Path(args.out), "--out"
    if result_dir:
        folder, why = result_dir, "--result-dir"
    elif res.output_dir:
        folder, why = res.output_dir, "config.toml [output] dir"
    else:
        folder, why = str(RESULTS_DIR), "--out"
    return default_out_path(name, folder=Path(os.path.expanduser(folder))), why


def check_writable(out: Path, flag: str = "--out") -> None:
    """Fail before the run if the results folder cannot take the result and the journal."""
    folder = out.parent if str(out.parent) else Path(".")
    check_output_file(flag, out)
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise UsageError(
            f"{flag} {out}: only {free // (1024 * 1024)} MiB free in {folder}; "
            f"a run needs at least {MIN_FREE_BYTES // (1024 * 1024)} MiB for its journal"
        )


def vllm_result_path(args: RunArgs, out: Path, doc: dict[str, Any]) -> Path:
    """Where `--save-result` writes: beside the result, as `--result-filename` or vLLM's
    default name."""
    from harness.config.vllm_flags import result_filename

    return out.parent / (args.result_filename or result_filename(doc))


def write_vllm_result(args: RunArgs, result: dict[str, Any], out: Path) -> Path:
    """`--save-result`: the run as vllm bench serve's JSON (harness.analysis.export), with
    `--percentile-metrics` / `--metric-percentiles` (vLLM's defaults when not given)."""
    import json

    from harness.analysis.export import vllm_result
    from harness.config.vllm_flags import VLLM_DEFAULT_METRICS, VLLM_DEFAULT_PERCENTILES

    doc = vllm_result(
        read_journal(journal_path_for(out)),
        result,
        args.percentile_metrics or VLLM_DEFAULT_METRICS,
        args.metric_percentiles or VLLM_DEFAULT_PERCENTILES,
        detailed=args.save_detailed,
    )
    dest = vllm_result_path(args, out, doc)
    try:
        write_file(dest, json.dumps(doc, indent=2) + "\n")  # harness.safe_write
    except OSError as exc:
        raise RunAborted(
            f"cannot write --save-result {dest}: {exc.strerror or exc}; the run's result is "
            f"{out.absolute()} (python -m harness export {out} --format vllm --out FILE)"
        ) from None
    return dest


def write_result_html(result: dict[str, Any], out: Path, html: str) -> Path:
    """The HTML report of a result at `html` ("": next to the result, r.json -> r.html)."""
    from harness.analysis.html import render_result_html, write_html

    dest = html_path(out, html)
    write_html(dest, render_result_html(result, out))
    return dest


def html_path(out: Path, html: str) -> Path:
    """Where `--html` writes: the path given, or ("") next to the result, r.json -> r.html."""
    return Path(html) if html else out.with_suffix(".html")
