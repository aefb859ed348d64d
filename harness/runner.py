"""`run` lives in `harness.orchestrate.run`; this module re-exports it for code that imports
`harness.runner` (scripts, the benchmarks of earlier sessions)."""

from harness.orchestrate.report import report_command
from harness.orchestrate.run import (
    RunArgs,
    check_writable,
    default_out_path,
    resolve_run,
    resolve_target,
    run_command,
)
from harness.record.journal import journal_path_for

__all__ = [
    "RunArgs",
    "check_writable",
    "default_out_path",
    "journal_path_for",
    "report_command",
    "resolve_run",
    "resolve_target",
    "run_command",
]
