"""`python -m harness sim calibrate RESULT...`: fit the simulator to measured runs.

The fitting itself is the `harness.calibrate` package (it reads results and journals, so it
sits above both the record and the simulator packages, like `harness.orchestrate`); this module
is its command line. `harness.cli` routes `sim calibrate` here.
"""

from __future__ import annotations

import argparse
import sys

from harness.argtable import Option, add_options, opt
from harness.errors import HarnessError, UsageError
from harness.safe_write import write_file
from harness.sim.cli import _number, _Parser

CALIBRATE_EPILOG = """examples:
  python -m harness sim calibrate sweep/p*.json --gpu cpu-2core-avx512 \\
      --model gemma-3-270m-q4_k_m --fit-on parallel=1,4 --out cpu.toml
  python -m harness sim --preset-file cpu.toml --gpu cpu-2core-avx512 \\
      --model gemma-3-270m-q4_k_m --max-num-seqs 8
"""


CALIBRATE_TABLE: tuple[Option, ...] = (
    opt("results", nargs="+", metavar="RESULT", help="result JSON or journal"),
    opt("--gpu", required=True, help="hardware preset to start from"),
    opt("--model", required=True, help="model preset"),
    opt("--out", required=True, help="preset TOML to write"),
    opt("--fit-on", help="parallel=1,4: fit on these max_num_seqs, predict the rest"),
    opt("--name", help="name of the fitted hardware preset (default: --gpu's)"),
    opt("--preset-file", help="extra presets to start from"),
    opt("--coefficients", help="comma-separated coefficients to fit (default: all that apply)"),
    opt("--max-model-len", default="2048", help="context per slot (KV pool sizing)"),
    opt(
        "--first-token-steps",
        default="1",
        help="extra steps before the first token (llama.cpp: 1, vLLM and the simulator: 0)",
    ),
    opt(
        "--engine",
        help="what was measured, with its version, for the preset's "
        "calibration record (default: the engine the runs' results name)",
    ),
    opt(
        "--reference",
        default="",
        help="where the tables are, for the calibration record (e.g. docs/calibration.md)",
    ),
)


def build_calibrate_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="harness sim calibrate",
        description="Fit the simulator's step-time coefficients to measured runs (results or "
        "journals) and report how well it then predicts the runs it was not fitted on.",
        epilog=CALIBRATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(p, CALIBRATE_TABLE)
    return p


def _fit_on(raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    key, sep, values = raw.partition("=")
    if not sep or key.strip() not in ("parallel", "max_num_seqs"):
        raise UsageError(f"--fit-on: expected parallel=N,N,... (or max_num_seqs=...), got {raw!r}")
    try:
        out = [int(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--fit-on: expected integers >= 1, got {values!r}") from None
    if not out or min(out) < 1:
        raise UsageError(f"--fit-on: expected integers >= 1, got {values!r}")
    return out


def main(argv: list[str]) -> int:
    """`python -m harness sim calibrate ...`. Returns the exit status."""
    from harness.calibrate import (
        calibrate,
        calibrated_gpu,
        calibration_record,
        error_table,
        load_run,
        preset_text,
    )
    from harness.sim.presets import load_presets
    from harness.sim.roofline import TUNABLE, Roofline

    try:
        ns = build_calibrate_parser().parse_args(argv)
        fit_on = _fit_on(ns.fit_on)
        max_model_len = _number("max_model_len", ns.max_model_len, int)
        lag = _number("first_token_steps", ns.first_token_steps, int)
        if not isinstance(max_model_len, int) or max_model_len < 16:
            raise UsageError(f"--max-model-len: expected an integer >= 16, got {ns.max_model_len}")
        if not isinstance(lag, int) or lag < 0:
            raise UsageError(f"--first-token-steps: expected 0 or more, got {ns.first_token_steps}")
        names = None
        if ns.coefficients:
            names = [c.strip() for c in ns.coefficients.split(",") if c.strip()]
            bad = [c for c in names if c not in TUNABLE]
            if bad or not names:
                raise UsageError(
                    f"--coefficients: unknown {bad[0] if bad else ns.coefficients!r}; "
                    f"allowed: {', '.join(TUNABLE)}"
                )
        presets = load_presets(ns.preset_file)
        gpu = presets.gpu(ns.gpu, "command line", "gpu")
        model = presets.model(ns.model, "command line", "model")
        runs = [load_run(path) for path in ns.results]
        base = Roofline.build(gpu, model, 1)
        cal = calibrate(runs, base, fit_on, names, max_model_len, lag)
        record = calibration_record(
            cal,
            ns.engine or _engine_of(ns.results),
            model.name,
            ns.reference,
            _measured_on(ns.results),
        )
        out_gpu = calibrated_gpu(gpu, cal.roofline, ns.name or gpu.name, record)
        command = "python -m harness sim calibrate " + " ".join(argv)
        text = preset_text(out_gpu, model, cal, command)
        try:
            write_file(ns.out, text)  # harness.safe_write: exclusive tmp, no link followed
        except OSError as e:
            raise UsageError(f"--out: cannot write {ns.out}: {e.strerror}") from None
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for r in runs:
        print(f"{r.name}: max_num_seqs {r.max_num_seqs} ({r.setting_source})")
    print(
        "fitted: "
        + ", ".join(f"{k} = {v:.4g}" for k, v in cal.fitted.items())
        + f"; contention factor {cal.contention_factor:.3f}; {cal.steps_used} steps"
    )
    print(error_table(cal))
    print(f"calibration record: {record.describe()}")
    print(f"wrote {ns.out} (use: --preset-file {ns.out} --gpu {out_gpu.name} --model {model.name})")
    return 0


def _result_docs(paths: list[str]) -> list[dict[str, object]]:
    """The runs' result JSONs (journals: their header), for the record's defaults."""
    import orjson

    out = []
    for path in paths:
        try:
            if path.endswith(".jsonl"):
                with open(path, "rb") as f:
                    out.append(orjson.loads(f.readline()))
            else:
                with open(path, "rb") as f:
                    out.append(orjson.loads(f.read()))
        except (OSError, ValueError):
            continue
    return out


def _engine_of(paths: list[str]) -> str:
    """The engine the runs were measured on, as their results name it (the server a sweep
    started), else the target kind."""
    names = set()
    for doc in _result_docs(paths):
        t = doc.get("target")
        target: dict[str, object] = t if isinstance(t, dict) else {}
        s = target.get("server")
        server: dict[str, object] = s if isinstance(s, dict) else {}
        names.add(str(server.get("engine") or target.get("kind") or "unknown"))
    return ", ".join(sorted(names)) or "unknown"


def _measured_on(paths: list[str]) -> str:
    """ISO date of the earliest run."""
    dates = sorted(str(d["started_at"])[:10] for d in _result_docs(paths) if d.get("started_at"))
    return dates[0] if dates else ""
