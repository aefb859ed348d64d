"""`harness export RESULT.json --format csv|parquet|jsonl|vllm --out FILE`: a run's rows for
pandas, spreadsheets and the scripts people already have for `vllm bench serve` results.

The rows come from harness.analysis.export (pure); this module only finds the journal, picks
the writer and writes. Under a simulator's speedup the rows are in model time, as the report
is, and the printed line says so. parquet needs the optional extra: pip install 'harness[parquet]'.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from harness.errors import ConfigError, UsageError
from harness.safe_write import atomic_file, write_file

FORMATS = ("csv", "parquet", "jsonl", "vllm")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export",
        help="export a run's per-request (or per-token) rows: csv, parquet, jsonl, vllm",
        description="Write a run's per-request rows (every stamp and derived metric), or "
        "per-token rows with --tokens, as CSV, parquet or JSON Lines; or the run as the "
        "JSON `vllm bench serve --save-result --save-detailed` writes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness export results/r.json --format csv --out r.csv\n"
        "  python -m harness export results/r.json --format parquet --tokens --out tokens.parquet\n"
        "  python -m harness export results/r.json --format vllm --out vllm-r.json",
    )
    p.add_argument(
        "result", help="a result .json (its journal is found beside it) or a .journal.jsonl"
    )
    p.add_argument("--format", required=True, choices=FORMATS, help="csv, parquet, jsonl or vllm")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write")
    p.add_argument(
        "--tokens",
        action="store_true",
        help="one row per token-bearing chunk instead of one per request (csv, parquet, jsonl)",
    )
    p.set_defaults(func=_main)


def _main(a: argparse.Namespace) -> int:
    notes: list[str] = []
    n = export_command(a.result, a.format, a.out, a.tokens, notes)
    line = f"{n} rows -> {a.out}" if a.format != "vllm" else f"{n} requests -> {a.out}"
    print("; ".join([line, *notes]))
    return 0


def load_run(path: str) -> tuple[Any, dict[str, Any]]:
    """(journal, result) for a result .json or a journal .jsonl. Raises ConfigError."""
    from harness.analysis.result import load_result, rebuild_result
    from harness.record.journal import JournalError, find_journal, journal_path_for, read_journal

    p = Path(path)
    try:
        if p.name.endswith(".jsonl"):
            return rebuild_result(p)
        result = load_result(p)
        jpath = find_journal(result, p)
        if jpath is None:
            looked = ", ".join(
                dict.fromkeys(
                    [str(journal_path_for(p)), str((result.get("files") or {}).get("journal"))]
                )
            )
            raise ConfigError(
                str(p),
                "files.journal",
                f"its journal is not found (looked at {looked}); "
                "exports read the per-request records from it",
            )
        return read_journal(jpath), result
    except FileNotFoundError:
        raise ConfigError(str(p), "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(str(p), "", "is a folder, not a result or journal file") from None
    except JournalError as exc:  # names the journal, its line and key itself
        raise UsageError(str(exc)) from None


def export_command(
    path: str, fmt: str, out: str, tokens: bool = False, notes: list[str] | None = None
) -> int:
    """Write the export; returns how many rows (requests for `vllm`) were written. `notes`
    gets the time base's label where the run's times are the model's (a simulator's speedup)."""
    from harness.analysis.export import (
        REQUEST_COLUMNS,
        TOKEN_COLUMNS,
        request_rows,
        set_aside,
        set_aside_note,
        time_base,
        token_rows,
        vllm_result,
    )

    if fmt not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "vllm" and tokens:
        raise UsageError(
            "--tokens: the vllm format has its own per-request lists (itls); drop --tokens"
        )
    j, result = load_run(path)
    clock = time_base(j)
    if clock is not None and notes is not None:
        notes.append(str(clock["note"]))
    if (doubt := set_aside_note(j)) is not None and notes is not None:  # the result's records
        notes.append(doubt)
    dest = Path(out)
    try:
        if fmt == "vllm":
            doc = vllm_result(j, result)
            write_file(
                dest, orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), make_folder=False
            )
            return int(doc["num_prompts"])
        rows: list[dict[str, Any]] = list(token_rows(j)) if tokens else request_rows(j)
        columns = TOKEN_COLUMNS if tokens else REQUEST_COLUMNS
        if fmt == "parquet":
            write_parquet(rows, columns, dest, clock, set_aside(j))
        else:
            {"csv": write_csv, "jsonl": write_jsonl}[fmt](rows, columns, dest)
        return len(rows)
    except OSError as exc:
        raise UsageError(f"--out {dest}: cannot write: {exc.strerror or exc}") from None


def write_csv(rows: Iterable[dict[str, Any]], columns: tuple[str, ...], dest: Path) -> None:
    """None is an empty cell; booleans are true/false (pandas reads both back)."""
    with atomic_file(dest, "w", newline="", encoding="utf-8", make_folder=False) as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            w.writerow(
                [
                    ""
                    if (v := r[c]) is None
                    else ("true" if v is True else "false" if v is False else v)
                    for c in columns
                ]
            )


def write_jsonl(rows: Iterable[dict[str, Any]], columns: tuple[str, ...], dest: Path) -> None:
    with atomic_file(dest, make_folder=False) as f:  # harness.safe_write
        for r in rows:
            f.write(orjson.dumps({c: r[c] for c in columns}) + b"\n")


def write_parquet(
    rows: list[dict[str, Any]],
    columns: tuple[str, ...],
    dest: Path,
    clock: dict[str, Any] | None = None,
    impossible: dict[str, Any] | None = None,
) -> None:
    """`clock`: the time base (harness.analysis.export.time_base), kept in the file's schema
    metadata under `harness.clock` (as JSON) where the times are the model's; `impossible`: the
    records set aside (harness.analysis.export.set_aside), under `harness.impossible_records`."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("--format parquet needs pyarrow: pip install 'harness[parquet]'") from None
    table = pa.table({c: [r[c] for r in rows] for c in columns})
    meta = {"harness.clock": clock, "harness.impossible_records": impossible}
    if any(v is not None for v in meta.values()):
        table = table.replace_schema_metadata(
            {k: orjson.dumps(v) for k, v in meta.items() if v is not None}
        )
    with atomic_file(dest, make_folder=False) as f:
        pq.write_table(table, f)
