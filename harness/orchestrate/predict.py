"""`predict`: what a scenario would look like on a given GPU, model and tensor parallel size,
answered on the simulator's virtual clock and written as the same result a run writes, marked
as a prediction.

Theory of operation
-------------------
1. The scenario is loaded as `run` loads it (`--set` included); the prediction's simulator
   settings (`--gpu`, `--model`, `--tp`, `--max-num-seqs`, or any `[sim]` key) then go into its
   `[sim]` table, and the model runs at real speed: `speedup = 1` unless the settings name one.
2. `virtual_run` puts the plan (arrivals, lengths, traces, datasets, prefix caching) through the
   simulator's scheduler on its virtual clock: each request's token stamps as a run over HTTP
   against the same simulator would journal them, from a perfect client.
3. Those become Records, and a journal header and end line like a run's (`journal_header`); the
   result is built from them by `build_result`, the one builder, so every metric, percentile,
   phase and the accounting mean what they mean for a run. The header carries a `prediction`
   block (GPU, model, tensor parallel size, dtypes, the GPU preset's validation, what the
   virtual run leaves out) that the result keeps and every view shows first.

What a virtual run cannot know is zero: network time, the client's CPU and its event loop (each
request is sent at its intended time; send lag is 0). What it leaves out of the scenario (a
phase's client-side `max_concurrency`, the simulator's HTTP-only behaviours: faults, rate
limits, coalesced chunks, a strict gateway) is listed in the result's warnings.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.result import build_result, dump_result
from harness.config.target import Target
from harness.errors import ConfigError, HarnessError, RunAborted, UsageError
from harness.orchestrate.outputs import check_output_file
from harness.orchestrate.run import (
    check_writable,
    default_out_path,
    html_path,
    journal_header,
    write_result_html,
)
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.virtual_probe import VirtualProbe, virtual_run
from harness.record.journal import Journal, JournalWriter, journal_path_for, read_journal
from harness.record.records import ErrorKind, Record, channel_runs_of
from harness.sim.presets import GpuPreset, ModelPreset
from harness.sim.settings import ResolvedSim, SimSettings
from harness.sim.validation.errors import has_published_points, is_validated, validation_line
from harness.termtext import terminal_safe
from harness.workload.plan import build_plan
from harness.workload.scenario import Scenario

TARGET_KIND = "prediction"  # target.kind of a predicted result ("simulator", "http": measured)
TARGET_URL = "virtual-clock"  # target.base_url: no server was started
NOT_VALIDATED = "not validated"
CLIENT_NOTE = (
    "network time and the client's own time are zero: each request is sent at its intended time"
)
# Flags of `predict` -> the [sim] key each sets (errors name the flag).
FLAG_KEYS = {
    "gpu": "--gpu",
    "model": "--model",
    "tensor_parallel_size": "--tp",
    "max_num_seqs": "--max-num-seqs",
}
_DTYPES = {4.0: "fp32", 2.0: "bf16", 1.0: "fp8", 0.5: "int4"}  # bytes per element -> name


@dataclass
class PredictArgs:
    scenario: str | dict[str, Any]  # a scenario file, or a document in memory (the API's)
    gpu: str | None = None
    model: str | None = None
    tp: str | None = None
    max_num_seqs: str | None = None
    sets: list[str] = field(default_factory=list)
    seed: int | None = None
    out: str | None = None
    html: str | None = None  # "" means: next to the result, r.json -> r.html
    quiet: bool = False


@dataclass(frozen=True)
class Prediction:
    """One prediction before it is a result: the journal a run would have written."""

    scenario: Scenario  # with the prediction's [sim] table
    resolved: ResolvedSim
    probe: VirtualProbe
    header: dict[str, Any]
    records: list[Record]
    end: dict[str, Any]

    def journal(self) -> Journal:
        """The journal in memory (what `write_journal` puts on disk)."""
        return Journal(dict(self.header), list(self.records), end=dict(self.end))


def dtype_name(bytes_per_element: float) -> str:
    """'bf16' for 2 bytes, 'fp8' for 1, ...; otherwise the size itself."""
    return _DTYPES.get(float(bytes_per_element), f"{bytes_per_element:g} bytes")


def validation_text(gpu: GpuPreset, model: ModelPreset) -> str:
    """What the GPU preset was validated against (`Calibration.describe()`), or its class's
    held-out error or "not validated" with which coefficients were fitted on which sources and
    which are datasheet figures or defaults; it says so when the validation used another model
    than the one predicted."""
    cal = gpu.calibration
    if cal is None:  # a GPU preset: its class's error on published points, if it has any,
        # and which of its coefficients were fitted on what (sim/provenance.py)
        from harness.sim.provenance import coefficient_sources

        line = validation_line(gpu.name) if has_published_points(gpu.name) else NOT_VALIDATED
        return f"{line}. Preset: {coefficient_sources(gpu)}"
    text = cal.describe()
    if cal.model not in (model.name, model.hf_id):
        text += f"; {model.name} was not in that validation"
    return text


def left_out(scn: Scenario, settings: SimSettings, probe: VirtualProbe) -> list[str]:
    """What of the scenario the virtual run does not model, one sentence each."""
    out = []
    for key in probe.ignored:
        out.append(f"{key}: not modelled on the virtual clock")
    http_only = (
        ("faults", bool(settings.faults), "injected errors, disconnects and stalls"),
        ("rpm_limit", settings.rpm_limit is not None, "the request rate limit (429s)"),
        ("tpm_limit", settings.tpm_limit is not None, "the token rate limit (429s)"),
        ("chunk_tokens", bool(settings.chunk_tokens), "tokens coalesced into chunks"),
        ("api_style", settings.api_style != "vllm", "the strict gateway's request checks"),
    )
    for key, present, what in http_only:
        if present:
            out.append(f"sim.{key}: {what} are the simulator's HTTP face, not modelled here")
    return out


def with_sim(scn: Scenario, sim: Mapping[str, object]) -> Scenario:
    """The scenario with `sim` over its [sim] table (also in the document the result keeps) and
    the model at real speed unless `sim` names a speedup. Raises ConfigError (key `sim.KEY`)."""
    table = {**scn.sim, "speedup": 1.0, **sim}
    SimSettings.from_mapping(table, scn.path)
    return dataclasses.replace(scn, sim=table, resolved={**scn.resolved, "sim": table})


def _records(probe: VirtualProbe, resolved: ResolvedSim) -> list[Record]:
    """The virtual run's columns as the Records a run over HTTP would have journaled."""
    c = probe.columns
    rejected = (
        f"prompt and max_tokens do not fit: the model's context is {resolved.max_model_len} "
        f"tokens, the KV cache {resolved.kv_capacity_tokens} (predicted 400)"
    )
    out = []
    for i in range(c.n):
        at, n = int(c.chunk_start[i]), int(c.n_chunks[i])
        sent = int(c.sent[i])
        ok = bool(c.ok[i])
        out.append(
            Record(
                seq=int(c.seq[i]),
                phase=int(c.phase[i]),
                intended_ns=int(c.intended[i]),
                sent_ns=sent,
                headers_ns=sent,
                chunk_ns=tuple(c.stamps[at : at + n].tolist()),
                chunk_tokens=tuple(c.tokens[at : at + n].tolist()),
                end_ns=int(c.end[i]),
                status=200 if ok else 400,
                error=None if ok else ErrorKind.HTTP_STATUS,
                error_detail="" if ok else rejected,
                prompt_tokens=int(c.prompt_tokens[i]),
                output_tokens=int(c.output_tokens[i]),
                planned_prompt_tokens=int(c.planned_prompt[i]),
                planned_output_tokens=int(c.planned_output[i]),
                usage_per_chunk=bool(c.usage_per_chunk[i]),
                channel_runs=()
                if c.channel is None
                else channel_runs_of(c.channel[at : at + n].tolist()),
                usage_reasoning_tokens=None
                if c.usage_reasoning is None or c.usage_reasoning[i] < 0
                else int(c.usage_reasoning[i]),
            )
        )
    return out


def simulate(scn: Scenario, sim: Mapping[str, object] | None = None) -> Prediction:
    """Predict the scenario with `sim` over its [sim] settings (module docstring). Writes
    nothing. Raises ConfigError (an unknown preset, a model that does not fit) and UsageError
    (a scenario the virtual clock cannot run: a closed loop, a conversation)."""
    scn = with_sim(scn, sim or {})
    settings = SimSettings.from_mapping(scn.sim, scn.path)
    resolved = settings.resolved(scn.path, "sim.")
    probe = virtual_run(scn, resolved)
    plan = build_plan(scn)
    gpu, model = resolved.gpu_preset, resolved.model_preset
    target = Target(
        TARGET_KIND,
        TARGET_URL,
        settings.served_model_name or model.name,
        scn.target.endpoint or "chat",
    )
    started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    server = {
        "engine": "sim (virtual clock)",
        "settings": {k: v for k, v in dataclasses.asdict(settings).items() if v is not None},
    }
    options = {
        "continuous_usage_stats": True,
        "grace_s": 0.0,
        "http_client": None,
        "workers": 1,
        "ray": None,
        "ignore_eos": scn.workload.ignore_eos,
        "max_tokens_key": "max_tokens",
    }
    header = journal_header(scn, plan, target, started, options, server)
    header["request_adaptations"] = []
    header["prediction"] = {
        "gpu": gpu.name,
        "model": model.name,
        "hf_id": model.hf_id,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "weights_dtype": dtype_name(model.bytes_per_param),
        "kv_cache_dtype": dtype_name(model.kv_bytes_per_element),
        "max_num_seqs": resolved.max_num_seqs,
        "max_num_batched_tokens": resolved.max_num_batched_tokens,
        "num_gpu_blocks": resolved.num_gpu_blocks,
        "max_model_len": resolved.max_model_len,
        "speedup": settings.speedup,
        "preset_file": settings.preset_file,
        "validated": gpu.calibration is not None or is_validated(gpu.name),
        "validation": validation_text(gpu, model),
        "left_out": left_out(scn, settings, probe),
        "client": CLIENT_NOTE,
        "steps": probe.steps,
    }
    records = _records(probe, resolved)
    per_phase = np.bincount(probe.columns.phase, minlength=len(plan.phases)).tolist()
    end = {
        "end_ns": probe.end_ns,
        "complete": True,
        "simulator": {
            "steps": probe.steps,
            "model_s": probe.end_ns / 1e9 * settings.speedup,
            "behind_model_s": 0.0,
        },
        "stop_reason": None,
        "phase_starts_ns": [w[0] for w in probe.phase_windows_ns],
        "phase_ends_ns": [w[1] for w in probe.phase_windows_ns],
        "cpu_s": 0.0,
        "loop_lag_ns": [],
        "t0_wall_s": time.time(),
        "t0_ns": 0,
        "request_id_prefix": f"{scn.name}-predict",
        "accounts": [
            {
                "shard": [0, 1],
                "begun": [pp.count for pp in plan.phases],
                "recorded": per_phase,
                "errors": [],
            }
        ],
    }
    return Prediction(scn, resolved, probe, header, records, end)


def predict_result(scn: Scenario, sim: Mapping[str, object] | None = None) -> dict[str, Any]:
    """The result document of a prediction (`simulate`), built in memory: no file is written
    (`files.journal` is null). For tests and tools that recompute predictions."""
    return build_result(simulate(scn, sim).journal(), None)


def write_journal(pred: Prediction, path: Path) -> None:
    """The prediction's journal on disk, as a run leaves one beside its result."""
    journal = JournalWriter(path, pred.header)
    for r in pred.records:
        journal.write_record(r)
    journal.close(pred.end)
    if journal.failed:
        raise RunAborted(journal.failed)


def flag_overrides(args: PredictArgs) -> dict[str, object]:
    """The [sim] values the flags give (an integer flag that is not one is passed on as text,
    for the settings' own check to refuse with the allowed values)."""
    out: dict[str, object] = {}
    for key, value in (
        ("gpu", args.gpu),
        ("model", args.model),
        ("tensor_parallel_size", args.tp),
        ("max_num_seqs", args.max_num_seqs),
    ):
        if value is None:
            continue
        if key in ("tensor_parallel_size", "max_num_seqs"):
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = value
        else:
            out[key] = value
    return out


def _flag_error(exc: ConfigError, given: Mapping[str, object]) -> HarnessError:
    """A settings error on a key a flag set, named by the flag; others as they are. `sim.gpu`
    also names a model that does not fit, which every flag given had a part in."""
    key = exc.key.removeprefix("sim.")
    if exc.key == "sim.gpu" and given:
        flags = " ".join(f"{FLAG_KEYS[k]} {v}" for k, v in given.items())
        return UsageError(f"{flags}: {exc.detail}")
    if exc.key.startswith("sim.") and key in given:
        return UsageError(f"{FLAG_KEYS[key]} {given[key]}: {exc.detail}")
    return exc


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def predict(args: PredictArgs) -> tuple[dict[str, Any], Path]:
    """The prediction written like a run's result: the result at `args.out` (default
    results/<scenario>-predict-<gpu>-<time>.json), its journal beside it. Prints nothing on
    stdout. Raises HarnessError for the user's mistakes (exit 2)."""
    scn = load_scenario(args.scenario, args.sets, args.seed)
    given = flag_overrides(args)
    sim: dict[str, object] = dict(given)
    if any(s.partition("=")[0].strip() == "sim.speedup" for s in args.sets):
        sim["speedup"] = scn.sim["speedup"]  # asked for on the command line: kept
    elif scn.sim.get("speedup", 1.0) != 1.0 and not args.quiet:
        print(
            f"note: {scn.path}: sim.speedup = {scn.sim['speedup']} is not used: a prediction "
            "runs the model at real speed (--set sim.speedup=K keeps K)",
            file=sys.stderr,
        )
    try:
        pred = simulate(scn, sim)
    except ConfigError as exc:
        raise _flag_error(exc, given) from None
    gpu = pred.resolved.gpu_preset.name
    out = Path(args.out) if args.out else default_out_path(f"{scn.name}-predict-{_safe_name(gpu)}")
    check_writable(out)
    if args.html is not None:
        check_output_file("--html", html_path(out, args.html))
    jpath = journal_path_for(out)
    write_journal(pred, jpath)
    result = build_result(read_journal(jpath), str(jpath))
    try:
        dump_result(result, out)
    except OSError as exc:
        raise RunAborted(f"cannot write the result {out}: {exc.strerror or exc}") from None
    return result, out


def predict_command(args: PredictArgs) -> int:
    """`predict`: writes the result, prints its report (unless quiet), writes the HTML when
    asked, and prints the result's path last. Exit status 0."""
    from harness.analysis.report_text import render_text
    from harness.orchestrate.predict_intervals import interval_lines

    result, out = predict(args)
    if not args.quiet:
        print(terminal_safe(render_text(result)))
        scn = load_scenario(args.scenario, args.sets, args.seed)  # the phase's load, for its regime
        print(terminal_safe("\n".join(interval_lines(scn, result))))
    if args.html is not None:
        print(f"HTML report: {write_result_html(result, out, args.html).absolute()}")
    print(out.absolute())
    return 0


__all__ = [
    "NOT_VALIDATED",
    "TARGET_KIND",
    "PredictArgs",
    "Prediction",
    "predict",
    "predict_command",
    "predict_result",
    "simulate",
    "validation_text",
]
