"""The command line: `python -m harness <command> ...`.

Errors in the user's input (HarnessError) print one line, `error: ...`, and exit 2; a run that
had to stop (RunAborted) exits 1; anything else is our bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from harness import __version__
from harness.commands.flags import separate_optional_paths
from harness.errors import HarnessError, RunAborted
from harness.orchestrate.stopping import Interrupted
from harness.termtext import terminal_safe

COMMANDS = (
    "run",
    "report",
    "compare",
    "check",
    "serve",
    "sweep",
    "capacity",
    "plan",
    "predict",
    "export",
)
USAGE_EXAMPLES = """\
examples:
  python -m harness run scenarios/burst.toml                  # against the built-in simulator
  python -m harness run scenarios/steady.toml --target http://127.0.0.1:8000 --out r.json
  python -m harness run --rate 8 --num-requests 200 --input-len 512 --output-len 128   # no file
  python -m harness report r.json
  python -m harness predict scenarios/steady.toml --gpu H100-SXM --tp 2   # virtual clock, seconds
  python -m harness export r.json --format csv --out r.csv
  python -m harness sim --port 8000 --max-num-seqs 64         # a simulated vLLM server
"""


class _Parser(argparse.ArgumentParser):
    def parse_known_args(  # type: ignore[override]  # argparse's overloads; same call shape
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # A subcommand's parser is called with its own words: `--html` takes only a path that
        # looks like one (harness.commands.flags.OptionalPath).
        words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(separate_optional_paths(self, words), namespace)

    def error(self, message: str) -> NoReturn:
        # Two lines at most: what is wrong, then where the usage is (not a 10-line usage dump).
        print(f"error: {terminal_safe(message)}", file=sys.stderr)
        print(f"see: {self.prog} --help", file=sys.stderr)
        sys.exit(2)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (`command`: one of COMMANDS) only that command's part: each
    command's module imports what it runs, and a `run` need not pay for `plan` (a quarter of
    the start-up's 1.1 CPU-s, measured by importing the modules: docs/history/testing-log.md)."""
    parser = _Parser(
        prog="python -m harness",
        description="Load generator for OpenAI-compatible LLM servers.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=USAGE_EXAMPLES,
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.add_parser(
        "sim", help="serve the built-in simulated vLLM server (see: sim --help)", add_help=False
    )
    for name in COMMANDS if command is None else (command,):
        importlib.import_module(f"harness.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:2] == ["sim", "calibrate"]:
            from harness.commands.calibrate import main as calibrate_main

            return calibrate_main(argv[2:])
        if argv and argv[0] == "sim":
            from harness.sim.cli import main as sim_main

            return sim_main(argv[1:])
        parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args))
    except HarnessError as exc:
        print(f"error: {terminal_safe(str(exc))}", file=sys.stderr)
        return exc.exit_status
    except RunAborted as exc:  # may quote a server (a probe's answer)
        print(f"error: {terminal_safe(str(exc))}", file=sys.stderr)
        return 1
    except Interrupted as exc:  # a long command's signal where it kept nothing more to write
        print(exc.stop.reason, file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
