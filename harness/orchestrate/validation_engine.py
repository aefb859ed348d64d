"""The simulator against published vLLM measurements: every point of `published.toml` replayed
through `predict` (the scenario's plan on the simulator's virtual clock) and its figures set
beside the published ones.

Theory of operation
-------------------
A point is a published benchmark run: a GPU, a model, a tensor-parallel size, dtypes, engine
limits where stated, a workload (fixed lengths, a dataset's mean lengths, or the per-request
lengths of `lengths/*.csv`) and a load (a request rate, "inf" for everything at once, or a
concurrency: a closed loop of that many users). `scenario_of` writes that as a harness scenario;
`predict_point` runs it through `harness.orchestrate.predict.predict_result` with the point's
`[sim]` settings (and any coefficients being tried) and reads back the figures the point
publishes, under the same definitions (vLLM's `benchmark_serving`: TTFT, TPOT per request with
its median over requests, ITL per gap, output tokens/s over the run).

The split is by publisher (`SPLIT`): coefficients are fitted on some sources only; the error on
the others is the honest one. Dataset points without per-request lengths use a lognormal of the
published means (`DATASET_SIGMA`) and are marked approximate; the offline latency points (no
API server) run with no intake; V0 points with multi-step scheduling are reported apart.

`python -m harness.orchestrate.validation` prints every figure of every point
(docs/validation-table.md). The data model is `validation_points`, the tables
`validation_report`, the intervals by regime `validation_regimes`, the slow fits
`validation_fit`, the command `validation_cli` (run as `harness.orchestrate.validation`, which
also re-exports this module's names); this module predicts.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.orchestrate.validation_points import (
    FIGURES,
    PLAN_FIGURE,
    PLAN_PROBE_S,
    SUMMED,
    TARGETS,
    Point,
    Row,
    scenario_doc,
    sim_settings,
)
from harness.safe_write import write_file

# vLLM's V0 engine (0.5.4, 0.6.0 here) differs from the V1 the simulator models in a way the
# published TP points show: every step, V0's driver broadcast the whole scheduler output to the
# other TP workers, where V1 keeps request state on each worker and sends only what changed. So
# a V0 point runs with its own per-step TP overhead (fitted on Lambda's V0 TP 2 and 4 points,
# `--fit`); the presets' own value is V1's. Used only to read the older points.
V0_COEFFICIENTS: dict[str, float] = {"tp_step_overhead_s": 2.25e-3, "tp_sequence_overhead_s": 0.0}

# The API server's costs (GpuPreset fields): zero for a point measured without one: vLLM's
# offline LLM class ("offline") or its engine driven in-process with no HTTP server in front
# ("in-process": AsyncLLMEngine.generate, AccelMark's runner)
NO_API_SERVER = ("offline", "in-process")
API_SERVER_COEFFICIENTS = (
    "intake_s_per_request",
    "intake_s_per_prompt_token",
    "stream_s_per_token",
    "request_latency_s",
)


def _own_value(gpu: object, name: str) -> bool:
    """Whether a GPU preset sets `name` to other than the shared default."""
    from harness.sim.presets import GpuPreset

    return bool(getattr(gpu, name) != GpuPreset.__dataclass_fields__[name].default)


class PresetFiles:
    """Preset files that give a GPU preset other coefficients (what a fit tries), one per GPU,
    API-server setting and engine generation, written once into `folder`. `v0_coefficients`
    replace those of a point measured on vLLM's V0 engine (`V0_COEFFICIENTS`: a V0-only
    behaviour, used only to read the older points)."""

    def __init__(
        self,
        folder: Path,
        coefficients: Mapping[str, float],
        v0_coefficients: Mapping[str, float] | None = None,
    ) -> None:
        self.folder = folder
        self.coefficients = dict(coefficients)
        self.v0_coefficients = dict(V0_COEFFICIENTS if v0_coefficients is None else v0_coefficients)
        self._files: dict[tuple[str, bool, bool], str] = {}

    def file_for(self, gpu: str, offline: bool, v0: bool = False) -> str | None:
        v0 = v0 and bool(self.v0_coefficients)
        if not self.coefficients and not offline and not v0:
            return None
        key = (gpu, offline, v0)
        if key not in self._files:
            from dataclasses import replace

            from harness.sim.presets import gpu_to_toml, load_presets

            base = load_presets().gpus[gpu]
            # a coefficient the GPU's preset sets itself (a per-class fit) is kept
            values = {k: x for k, x in self.coefficients.items() if not _own_value(base, k)}
            if v0:
                values.update(self.v0_coefficients)
            if offline:
                values.update(dict.fromkeys(API_SERVER_COEFFICIENTS, 0.0))
            preset = replace(base, **values)  # type: ignore[arg-type]  # float coefficient fields only
            name = f"{gpu}-{'offline' if offline else 'served'}{'-v0' if v0 else ''}.toml"
            path = self.folder / name
            write_file(path, gpu_to_toml(preset))
            self._files[key] = str(path)
        return self._files[key]


def _figure(result: Mapping[str, Any], figure: str) -> float | None:
    block, metric, stat = FIGURES[figure]
    value = result["summary"][block][metric]
    if stat:
        value = value.get(stat) if isinstance(value, Mapping) else None
    return None if value is None or not math.isfinite(float(value)) else float(value)


def predict_point(
    point: Point, sim: Mapping[str, Any], folder: Path
) -> tuple[dict[str, float | None], str]:
    """The point's figures as `predict` gives them, or ({}, why) when it cannot run."""
    got, why, _ = predict_point_regime(point, sim, folder)
    return got, why


def predict_point_regime(
    point: Point, sim: Mapping[str, Any], folder: Path
) -> tuple[dict[str, float | None], str, str]:
    """`predict_point`, and the regime `predict` reads from that prediction (one replica's load
    as predicted: `predict_intervals.result_regime`); "" when it cannot run."""
    from harness.orchestrate.predict import predict_result
    from harness.orchestrate.predict_intervals import result_regime
    from harness.orchestrate.scenario import load_scenario

    try:
        scn = load_scenario(scenario_doc(point, folder))
        result = predict_result(scn, dict(sim))
    except HarnessError as exc:
        return {}, str(exc).splitlines()[0][:160], ""
    got = {f: _figure(result, f) for f in point.figures}
    # each replica served its share: the throughputs add up
    return (
        {f: v * point.replicas if v is not None and f in SUMMED else v for f, v in got.items()},
        "",
        result_regime(scn, result),
    )


def validate(
    points: Sequence[Point],
    coefficients: Mapping[str, float] | None = None,
    v0_coefficients: Mapping[str, float] | None = None,
) -> list[Row]:
    """Every figure of every point, predicted. `coefficients`: GpuPreset fields to use instead
    of the presets' own (the coefficients a fit tries), for every GPU; `v0_coefficients`: those
    of a V0 point (default `V0_COEFFICIENTS`)."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="harness-validation-") as tmp:
        files = PresetFiles(Path(tmp), coefficients or {}, v0_coefficients)
        for p in points:
            offline = p.raw.get("harness") in NO_API_SERVER
            sim = sim_settings(p, files.file_for(p.gpu, offline, p.v0))
            got, why, regime = predict_point_regime(p, sim, Path(tmp))
            for fig, pub in p.figures.items():
                rows.append(Row(p, fig, pub, got.get(fig), why, regime=regime))
    return rows


# `plan`'s capacity is checked where a published sweep shows it well determined: at a sweep point
# whose published latency p50 stands at least twice the figure's target error above the same
# sweep's single-user value (TPOT / ITL: 1.30x, TTFT: 1.60x). Below that the latency is nearly
# flat in the load, and a model error within target moves the load at which the SLO binds by a
# factor (docs/validation.md, "plan's capacity at an operating point").
PLAN_HEADROOM = {
    "tpot": 1.0 + 2 * TARGETS["tpot_p50_ms"] / 100,
    "ttft": 1.0 + 2 * TARGETS["ttft_p50_ms"] / 100,
}


@dataclass(frozen=True)
class OperatingPoint:
    """A published load and the SLO it was served under. Either a point of a concurrency sweep:
    the server served `rate_per_s` requests/s with `metric` p50 `limit_ms` (`single_ms` at one
    user); or a run held to latency limits (`slos`, MLPerf's constraints) that met them at
    `rate_per_s`."""

    point: Point
    metric: str  # tpot, itl or ttft (the SLO's metric); "slos" for a run held to `slos`
    limit_ms: float
    single_ms: float
    rate_per_s: float
    slos: tuple[str, ...] = ()

    @property
    def slo_list(self) -> tuple[str, ...]:
        return self.slos or (f"{self.metric}_p50={self.limit_ms:g}ms",)

    @property
    def slo(self) -> str:
        return ", ".join(self.slo_list)


def _sweep_key(p: Point) -> tuple[object, ...]:
    r = p.raw
    return (
        p.source,
        p.gpu,
        r["model"],
        r["tp"],
        r.get("dtype"),
        r.get("kv_cache_dtype"),
        r.get("dataset"),
        r.get("input_len", r.get("input_len_mean")),
    )


def _served_rate(p: Point) -> float | None:
    """Requests/s as published, or output tokens/s over the mean answer length."""
    rate = p.raw.get("request_throughput_per_s")
    out_len = p.raw.get("output_len") or p.raw.get("output_len_mean")
    if rate is None and "output_tokens_per_s" in p.raw and out_len:
        rate = float(p.raw["output_tokens_per_s"]) / float(out_len)
    return None if rate is None else float(rate)


def operating_points(points: Sequence[Point]) -> list[OperatingPoint]:
    """Every (sweep point, metric) that passes PLAN_HEADROOM: points of a closed-loop sweep
    (same source, GPU, model, TP, dtypes and workload) with a one-user point, at two users or
    more, for TPOT p50 (else ITL p50, the same for one token per chunk) and for TTFT p50 (V0
    multi-step left out). Each pair is one check; none is chosen by its result."""
    singles = {
        _sweep_key(p): p
        for p in points
        if int(p.raw.get("max_concurrency") or 0) == 1 and not p.multi_step
    }
    out: list[OperatingPoint] = []
    for p in points:
        one = singles.get(_sweep_key(p))
        rate = _served_rate(p)
        if one is None or int(p.raw.get("max_concurrency") or 0) < 2 or p.multi_step or not rate:
            continue
        decode = next((m for m in ("tpot", "itl") if f"{m}_p50_ms" in p.raw), None)
        for metric, headroom in ((decode, PLAN_HEADROOM["tpot"]), ("ttft", PLAN_HEADROOM["ttft"])):
            key = f"{metric}_p50_ms"
            if metric is None or key not in p.raw or key not in one.raw:
                continue
            limit, single = float(p.raw[key]), float(one.raw[key])
            if limit >= headroom * single:
                out.append(OperatingPoint(p, metric, limit, single, rate))
    for p in points:  # runs held to latency limits that met them (MLPerf's server scenarios)
        ttft, tpot = p.raw.get("slo_ttft_p99_ms"), p.raw.get("slo_tpot_p99_ms")
        rate = p.raw.get("request_throughput_per_s")
        if ttft and tpot and rate:
            slos = (f"ttft_p99={float(ttft):g}ms", f"tpot_p99={float(tpot):g}ms")
            out.append(OperatingPoint(p, "slos", float(tpot), 0.0, float(rate), slos))
    return out


def plan_rows(
    points: Sequence[Point], coefficients: Mapping[str, float] | None = None
) -> list[Row]:
    """`plan`'s capacity at published operating points (`operating_points`). At concurrency c the
    server served X_c req/s with latency p50 t_c; under the SLO `p50 <= t_c` its capacity is
    about X_c (by Little's law an open load of X_c keeps about c in flight, the point's own
    state). The prediction is the capacity search `plan` runs (`virtual_capacity`) on the
    point's workload as Poisson arrivals, with that SLO. Closed and open loops queue differently
    near the knee; the docs say so."""
    from harness.analysis import capacity as cap
    from harness.config.toml_dump import dump_toml
    from harness.orchestrate.virtual_capacity import virtual_capacity

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="harness-validation-") as tmp:
        files = PresetFiles(Path(tmp), coefficients or {})
        for op in operating_points(points):
            p = op.point
            doc = scenario_doc(p, Path(tmp))
            share = op.rate_per_s / p.replicas  # one replica's; its answer counts once per replica
            doc["phases"] = [
                {
                    "name": "main",
                    "duration": f"{PLAN_PROBE_S:g}s",
                    "arrival": {"process": "poisson", "rate": share},
                }
            ]
            doc["sim"] = sim_settings(p, files.file_for(p.gpu, False, p.v0))
            path = Path(tmp) / f"{p.id}-{op.metric}-plan.toml"
            write_file(path, dump_toml(doc))
            try:
                found = virtual_capacity(
                    str(path), [cap.parse_slo(x) for x in op.slo_list], start_rate=share
                )
                got = found.answer * p.replicas if found.answer else None
                why = "" if got else "no rate met the SLO"
            except HarnessError as exc:
                got, why = None, str(exc).splitlines()[0][:160]
            rows.append(Row(p, PLAN_FIGURE, op.rate_per_s, got, why, slo=op.slo))
    return rows
