"""`run`'s flags beyond the measurement itself -- vllm bench serve's `--backend` (the endpoint
it names) and `--no-slo-exit` -- and `run --repeat`'s line per run with its SLO verdict and
the one status of the N runs (harness.analysis.slo_verdict says which status wins)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.analysis.slo_verdict import (
    SLO_FAIL_EXIT,
    fold_statuses,
    result_slo,
    run_status,
    verdict_line,
)
from harness.argtable import opt
from harness.config.vllm_flags import VLLM_BACKENDS, backend_endpoint
from harness.errors import ConfigError
from harness.termtext import terminal_safe

# --backend and --no-slo-exit.
RUN_OPTIONS = (
    opt(
        "--backend",
        metavar="NAME",
        help="vllm bench serve's backend, as the endpoint it posts to: "
        f"{', '.join(VLLM_BACKENDS)}; audio, rerank, multimodal embeddings, tgi, "
        "tensorrt-llm and deepspeed-mii are refused",
    ),
    opt(
        "--no-slo-exit",
        dest="slo_exit",
        action="store_false",
        help=f"exit 0 when the run completed but missed an SLO (default: exit {SLO_FAIL_EXIT}, "
        "as k6 does for a failed threshold)",
    ),
)


def run_endpoint(a: argparse.Namespace) -> str | None:
    """The endpoint `--endpoint` and `--backend` name together (exit 2 when they disagree)."""
    endpoint: str | None = backend_endpoint(a.backend, a.endpoint)
    return endpoint


def _read(out: str) -> dict[str, Any] | None:
    from harness.analysis.result import load_result

    if not Path(out).is_file():
        return None
    try:
        return load_result(out)
    except ConfigError:
        return None


def report_repeat(args: Any, k: int, n: int, rc: int, out: str) -> int:
    """Print run k of n's SLO verdict (or that it failed) on one line; return its status:
    `rc`, or SLO_FAIL_EXIT where it completed, missed an SLO and `args.slo_exit`."""
    result = _read(out)
    if result is None:
        line = f"run {k} of {n}: no result (exit {rc})"
        status = rc or 1
    else:
        status = run_status(rc, result, args.slo_exit)
        verdict = verdict_line(result_slo(result)) or "no SLO"
        done = "" if rc in (0, SLO_FAIL_EXIT) else f" (run exit {rc})"
        line = f"run {k} of {n}: {verdict}{done}"
    if not args.quiet:
        print(terminal_safe(line), file=sys.stderr, flush=True)
    return status


def fold_repeat(args: Any, statuses: list[int]) -> int:
    """The status of `run --repeat`: the most serious of its runs'."""
    status = fold_statuses(statuses)
    missed = sum(1 for s in statuses if s == SLO_FAIL_EXIT)
    if missed and not args.quiet:
        print(
            f"{missed} of {len(statuses)} runs missed their SLO"
            + (
                f": exit {SLO_FAIL_EXIT} (--no-slo-exit: exit 0)" if status == SLO_FAIL_EXIT else ""
            ),
            file=sys.stderr,
            flush=True,
        )
    return status


__all__ = ["RUN_OPTIONS", "fold_repeat", "report_repeat", "run_endpoint"]
