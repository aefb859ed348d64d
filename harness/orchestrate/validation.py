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

`python -m harness.orchestrate.validation` prints the table docs/validation.md carries.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.safe_write import write_file
from harness.sim.validation.errors import CAPACITY_FIGURE

HERE = Path(__file__).resolve().parents[1] / "sim" / "validation"  # the data
PUBLISHED = HERE / "published.toml"

# Which sources the coefficients may be fitted on; every other source is held out.
FIT_SOURCES = frozenset(
    {"gpustack-performance-lab", "gpustack-quantization-reference", "lambda-vllm-benchmark"}
)
# (published key, result block, metric, statistic): the figures compared, as the result holds them
FIGURES: dict[str, tuple[str, str, str]] = {
    "output_tokens_per_s": ("throughput", "output_tokens_per_s", ""),
    "request_throughput_per_s": ("throughput", "requests_per_s", ""),
    "ttft_p50_ms": ("latency_ms", "ttft", "p50"),
    "ttft_mean_ms": ("latency_ms", "ttft", "mean"),
    "tpot_p50_ms": ("latency_ms", "tpot", "p50"),
    "tpot_mean_ms": ("latency_ms", "tpot", "mean"),
    "itl_p50_ms": ("latency_ms", "itl", "p50"),
    "e2e_p50_ms": ("latency_ms", "e2e", "p50"),
}
# The metrics the issue sets targets for (|error| within): the headline columns.
TARGETS = {
    "output_tokens_per_s": 15.0,
    "tpot_p50_ms": 15.0,
    "ttft_p50_ms": 30.0,
    "plan_capacity_per_s": 20.0,
}
PLAN_FIGURE = CAPACITY_FIGURE  # `plan`'s capacity at a published operating point
# Figures of a point with several replicas that are the sum over them (the rest are per request)
SUMMED = ("output_tokens_per_s", "request_throughput_per_s")
# Summarised per GPU class: the targets, and E2E (all that the offline points publish)
SUMMARIZED = (*TARGETS, "e2e_p50_ms")
PLAN_PROBE_S = 60.0  # the virtual capacity search's probe length (model seconds)
DATASET_SIGMA = 0.8  # lognormal spread of a dataset's lengths when only their means are known
SEED = 1


@dataclass(frozen=True)
class Point:
    """One published measurement, as `published.toml` gives it."""

    id: str
    source: str
    raw: Mapping[str, Any]

    @property
    def gpu(self) -> str:
        return str(self.raw["gpu"])

    @property
    def split(self) -> str:
        return "fit" if self.source in FIT_SOURCES else "held out"

    @property
    def figures(self) -> dict[str, float]:
        return {k: float(self.raw[k]) for k in FIGURES if k in self.raw}

    @property
    def v0(self) -> bool:
        """Measured on vLLM's V0 engine (as the point's `engine` records it)."""
        return str(self.raw.get("engine", "")) == "V0"

    @property
    def replicas(self) -> int:
        """Identical servers behind one client (`data_parallel`): each is predicted with its
        share of the load, and the throughputs add up."""
        return int(self.raw.get("data_parallel", 1))

    @property
    def multi_step(self) -> bool:
        return int(self.raw.get("num_scheduler_steps", 1)) > 1

    @property
    def approximate(self) -> bool:
        return bool(self.raw.get("lengths_approximate")) or (
            "lengths_file" not in self.raw and "input_len" not in self.raw
        )


def load_points(path: Path = PUBLISHED) -> tuple[list[Point], dict[str, Any]]:
    """The points and the file's model tables (a preset file's `[model."NAME"]` shape)."""
    doc = tomllib.loads(path.read_text())
    points = [Point(p["id"], p["source"], p) for p in doc["point"]]
    return points, doc.get("model", {})


def _trace_lines(rows: Iterable[tuple[int, int]]) -> str:
    return "".join(
        f'{{"t": 0, "prompt_tokens": {max(p, 1)}, "output_tokens": {max(o, 1)}}}\n' for p, o in rows
    )


def _lengths(path: Path) -> list[tuple[int, int]]:
    lines = path.read_text().splitlines()[1:]
    return [(int(a), int(b)) for a, b in (ln.split(",") for ln in lines if ln.strip())]


def _dist(fixed: object, mean: object, maximum: object = None) -> dict[str, Any]:
    if fixed is not None:
        return {"dist": "fixed", "value": int(fixed)}  # type: ignore[call-overload]  # a TOML int
    m = float(mean)  # type: ignore[arg-type]  # a TOML number
    top = int(maximum) if maximum is not None else int(m * 20)  # type: ignore[call-overload]
    return {"dist": "lognormal", "mean": m, "sigma": DATASET_SIGMA, "min": 4, "max": top}


def scenario_doc(point: Point, folder: Path) -> dict[str, Any]:
    """The point as a scenario document (lengths files become a burst trace in `folder`): one
    replica's share of it where the point has several (`Point.replicas`)."""
    r = point.raw
    n = r.get("num_prompts") or r.get("batch_size")
    if n is not None:
        n = math.ceil(int(n) / point.replicas)
    phase: dict[str, Any] = {"name": "main"}
    workload: dict[str, Any] = {"ignore_eos": True}
    if "lengths_file" in r:
        trace = folder / f"{point.id}.jsonl"
        write_file(trace, _trace_lines(_lengths(HERE / r["lengths_file"])))
        phase["arrival"] = {"process": "trace", "file": str(trace), "format": "harness"}
    else:
        workload["prompt_tokens"] = _dist(
            r.get("input_len"), r.get("input_len_mean"), r.get("input_len_max")
        )
        workload["output_tokens"] = _dist(
            r.get("output_len"), r.get("output_len_mean"), r.get("output_len_max")
        )
        conc = r.get("max_concurrency")
        rate = r.get("request_rate")
        if conc is not None:
            phase["arrival"] = {"process": "closed", "users": int(conc)}
        elif rate == "inf" or rate is None:
            phase["arrival"] = {"process": "constant", "rate": 1e6}
        else:  # Poisson unless the point says its client spaced requests evenly
            process = "constant" if r.get("arrival") == "constant" else "poisson"
            phase["arrival"] = {"process": process, "rate": float(rate) / point.replicas}
        if n is not None:
            phase["requests"] = int(n)
        else:
            phase["duration"] = f"{float(r.get('planned_duration_s', 60))}s"
    return {
        "name": point.id,
        "seed": SEED,
        "workload": workload,
        "phases": [phase],
    }


def sim_settings(point: Point, preset_file: str | None = None) -> dict[str, Any]:
    """The point's `[sim]` table: hardware, model, parallelism, dtypes, stated engine limits."""
    r = point.raw
    sim: dict[str, Any] = {
        "gpu": point.gpu,
        "model": r["model"],
        "tensor_parallel_size": int(r["tp"]),
        "speedup": 1.0,
        "seed": SEED,
    }
    if preset_file:
        sim["preset_file"] = preset_file
    for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if key in r:
            sim[key] = int(r[key])
    if r.get("gpu_memory_utilization") is not None:
        sim["gpu_memory_utilization"] = float(r["gpu_memory_utilization"])
    if r.get("dtype") not in (None, "bf16", "auto"):
        sim["dtype"] = r["dtype"]
    if r.get("kv_cache_dtype") not in (None, "auto"):
        sim["kv_cache_dtype"] = r["kv_cache_dtype"]
    return sim


# vLLM's V0 engine (0.5.4, 0.6.0 here) differs from the V1 the simulator models in a way the
# published TP points show: every step, V0's driver broadcast the whole scheduler output to the
# other TP workers, where V1 keeps request state on each worker and sends only what changed. So
# a V0 point runs with its own per-step TP overhead (fitted on Lambda's V0 TP 2 and 4 points,
# `--fit`); the presets' own value is V1's. Used only to read the older points.
V0_COEFFICIENTS: dict[str, float] = {"tp_step_overhead_s": 2.25e-3, "tp_sequence_overhead_s": 0.0}

# The API server's costs (GpuPreset fields): zero for a point measured without one (offline)
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


@dataclass(frozen=True)
class Row:
    """One figure of one point: published, predicted, and the ratio prediction / published."""

    point: Point
    figure: str
    published: float
    predicted: float | None
    note: str = ""
    slo: str = ""  # plan rows: the SLO the capacity was searched under

    @property
    def ratio(self) -> float | None:
        if self.predicted is None or self.published <= 0:
            return None
        return self.predicted / self.published

    @property
    def error_pct(self) -> float | None:
        r = self.ratio
        return None if r is None else (r - 1.0) * 100.0


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
    from harness.orchestrate.predict import predict_result
    from harness.orchestrate.scenario import load_scenario

    try:
        scn = load_scenario(scenario_doc(point, folder))
        result = predict_result(scn, dict(sim))
    except HarnessError as exc:
        return {}, str(exc).splitlines()[0][:160]
    got = {f: _figure(result, f) for f in point.figures}
    # each replica served its share: the throughputs add up
    return {
        f: v * point.replicas if v is not None and f in SUMMED else v for f, v in got.items()
    }, ""


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
            offline = p.raw.get("harness") == "offline"
            sim = sim_settings(p, files.file_for(p.gpu, offline, p.v0))
            got, why = predict_point(p, sim, Path(tmp))
            for fig, pub in p.figures.items():
                rows.append(Row(p, fig, pub, got.get(fig), why))
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


def gpu_class(gpu: str) -> str:
    return gpu.split("-")[0]


def _group(r: Row) -> tuple[str, str, str]:
    """What the summary groups a row by: figure, GPU class, split."""
    return (r.figure, gpu_class(r.point.gpu), r.point.split)


def summarize(rows: Sequence[Row]) -> dict[tuple[str, str, str], tuple[int, float, float]]:
    """(figure, GPU class, split) -> (points, median |error| %, worst |error| %)."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        if r.error_pct is None or r.figure not in SUMMARIZED or r.point.multi_step:
            continue
        groups.setdefault(_group(r), []).append(abs(r.error_pct))
    return {k: (len(v), statistics.median(v), max(v)) for k, v in sorted(groups.items()) if v}


def unanswered(rows: Sequence[Row]) -> dict[tuple[str, str, str], int]:
    """(figure, GPU class, split) -> capacity checks where no rate met the SLO: the model's
    latency at the lightest load already above the published one (not in `summarize`)."""
    out: dict[tuple[str, str, str], int] = {}
    for r in rows:
        if r.figure == PLAN_FIGURE and r.predicted is None and not r.point.multi_step:
            out[_group(r)] = out.get(_group(r), 0) + 1
    return out


def errors_toml(rows: Sequence[Row], command: str) -> str:
    """`errors.toml` (harness.sim.validation.errors): per GPU class and target figure, the
    points, median and worst |error| % of the held-out and of the fitted points."""
    out = [
        "# The simulator's error against published vLLM measurements, per GPU class (written by",
        f"# `{command}`; docs/validation.md has every point). Read by plan and predict.",
        "",
    ]
    missing = unanswered(rows)
    for (fig, cls, split), (n, med, worst) in summarize(rows).items():
        key = "held_out" if split == "held out" else "fit"
        extra = f", unanswered = {m}" if (m := missing.get((fig, cls, split))) else ""
        out.append(
            f"class.{cls}.{fig}.{key} = {{ points = {n}, median = {med:.1f}, "
            f"worst = {worst:.1f}{extra} }}"
        )
    return "\n".join(out) + "\n"


VALIDATION_DOC = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
TABLE_HEADING = "## Predicted against published"


def write(rows: Sequence[Row], command: str, doc: Path = VALIDATION_DOC) -> None:
    """errors.toml, and the prediction section of docs/validation.md (replaced in place)."""
    from harness.sim.validation.errors import ERRORS

    write_file(ERRORS, errors_toml(rows, command))
    text = doc.read_text()
    head = text.split(TABLE_HEADING, 1)[0].rstrip() + "\n\n"
    write_file(
        doc,
        head
        + f"{TABLE_HEADING}\n\nEvery figure of every point, as `{command}` wrote it.\n\n"
        + markdown(rows),
    )


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def markdown(rows: Sequence[Row]) -> str:
    """The table of every row and the summary per figure, GPU class and split."""
    out = [
        "| point | source | GPU | model | TP | figure | published | predicted | ratio | split |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r.point
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        split = p.split + (" (V0 multi-step)" if p.multi_step else "")
        split += " (lengths approximate)" if p.approximate else ""
        pred = _fmt(r.predicted) if r.predicted is not None else f"- ({r.note or 'none'})"
        figure = f"{r.figure} ({r.slo.replace('=', ' <= ')})" if r.slo else r.figure
        out.append(
            f"| {p.id} | {p.source} | {p.gpu} | {p.raw['model']} | {p.raw['tp']} | {figure} | "
            f"{_fmt(r.published)} | {pred} | {ratio} | {split} |"
        )
    return "\n".join(out) + "\n\n" + summary_markdown(rows)


def summary_markdown(rows: Sequence[Row]) -> str:
    """The summary per figure, GPU class and split (median and worst |error|, the target)."""
    out = [
        "| figure | GPU class | split | points | median abs error % | worst abs error % | target % "
        "| no answer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    missing = unanswered(rows)
    for (fig, cls, split), (n, med, worst) in summarize(rows).items():
        target = f"{TARGETS[fig]:g}" if fig in TARGETS else "-"
        none = missing.get((fig, cls, split), 0) if fig == PLAN_FIGURE else "-"
        out.append(
            f"| {fig} | {cls} | {split} | {n} | {med:.1f} | {worst:.1f} | {target} | {none} |"
        )
    return "\n".join(out) + "\n"


# The coefficients the fit varies: the same for every GPU (each GPU keeps its datasheet rates),
# so that a GPU no fitted source measured (L4, H200) is a test of transfer, not of a fit.
FIT_COEFFICIENTS = (
    "compute_efficiency",
    "weight_bandwidth_efficiency",
    "kv_bandwidth_efficiency",
    "per_sequence_overhead_s",
    "tp_step_overhead_s",
    "intake_s_per_request",
    "stream_s_per_token",
    "request_latency_s",
)


def fit_loss(rows: Sequence[Row]) -> float:
    """Mean Cauchy loss of log(predicted / published) over the target figures (a point that
    could not run counts as a large error)."""
    total, n = 0.0, 0
    for r in rows:
        if r.figure not in TARGETS:
            continue
        e = math.log(r.ratio) if r.ratio else 3.0
        total += math.log1p((e / 0.2) ** 2)
        n += 1
    return total / max(n, 1)


# A share of a datasheet rate that a fit may not exceed: no GPU reads or computes faster than
# its datasheet (a CPU preset's efficiencies are relative to numpy rates and may; not fitted here).
MAX_SHARE = 0.95
SHARES = ("compute_efficiency", "weight_bandwidth_efficiency", "kv_bandwidth_efficiency")


def capped(point: Point, seconds: float) -> Point:
    """The point with a long open-loop run shortened to about `seconds` of model time: a stated
    duration cut to it, a rate's request count to rate x seconds, and a batch or burst to 4,000
    requests per replica (what makes an in-sample fit over every point affordable; the figures
    of a run that reached its steady state move little)."""
    r = dict(point.raw)
    if "planned_duration_s" in r:
        r["planned_duration_s"] = min(float(r["planned_duration_s"]), seconds)
    rate = r.get("request_rate")
    most = 4000 * point.replicas
    if r.get("num_prompts") is not None and "lengths_file" not in r:
        if rate not in (None, "inf"):
            most = math.ceil(float(rate) * seconds)
        r["num_prompts"] = min(int(r["num_prompts"]), most)
    if r.get("batch_size") is not None:
        r["batch_size"] = min(int(r["batch_size"]), most)
    return Point(point.id, point.source, r)


def fit(
    points: Sequence[Point],
    names: Sequence[str] = FIT_COEFFICIENTS,
    rounds: int = 60,
    start: Mapping[str, float] | None = None,
    in_sample: bool = False,
) -> tuple[dict[str, float], float]:
    """Coefficients (GpuPreset fields, one value for every GPU) that minimise `fit_loss` over
    the fit split of `points` (every point with `in_sample`: how far one set of coefficients can
    go, with nothing held out), by Nelder-Mead in log space from today's defaults (or the values
    `start` gives); and the loss. A share of a datasheet rate stays within MAX_SHARE. `rounds`
    bounds the simplex iterations (each costs one or two validations)."""
    import numpy as np

    from harness.calibrate.fit import decode_coefficient, encode_coefficient, nelder_mead
    from harness.sim.presets import GpuPreset

    fitting = [p for p in points if (in_sample or p.split == "fit") and not p.multi_step]
    base = GpuPreset("base", 1, 1.0, 1.0)
    first = {n: getattr(base, n) for n in names} | dict(start or {})
    u0 = np.array([encode_coefficient(n, first[n]) for n in names])

    def values(u: np.ndarray) -> dict[str, float]:
        out = {n: decode_coefficient(n, float(v)) for n, v in zip(names, u, strict=True)}
        return {n: min(v, MAX_SHARE) if n in SHARES else v for n, v in out.items()}

    def loss(u: np.ndarray) -> float:
        return fit_loss(validate(fitting, values(u)))

    best = nelder_mead(loss, u0, step=0.4, iters=rounds)
    return values(best), loss(best)


def publishers(path: Path = PUBLISHED) -> dict[str, str]:
    """source -> publisher (sources of one publisher are not independent of each other)."""
    doc = tomllib.loads(path.read_text())
    return {sid: str(s["publisher"]) for sid, s in doc["source"].items()}


# The two API-server coefficients on which the sources disagree most (docs/validation.md, "The
# request latency stays one value"): the grid `cross_validate` chooses them on. V0 points keep
# the presets' intake (V0's API server shared its process with the engine): only V1's is tried.
CROSS_GRID: dict[str, tuple[float, ...]] = {
    "request_latency_s": (0.0, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.0417, 0.048),
    "intake_s_per_request": (0.0005, 0.001, 0.002, 0.003, 0.005, 0.00705),
}


@dataclass(frozen=True)
class Fold:
    """One publisher left out: the grid values chosen on every other publisher's points (their
    `fit_loss`), and this publisher's rows at those values."""

    publisher: str
    chosen: dict[str, float]
    train_loss: float
    rows: list[Row]


def _validate_at(args: tuple[Sequence[Point], dict[str, float]]) -> list[Row]:
    points, values = args
    from harness.sim.presets import DEFAULT_INTAKE_S_PER_REQUEST

    v0 = {**V0_COEFFICIENTS, "intake_s_per_request": DEFAULT_INTAKE_S_PER_REQUEST}
    return validate(points, values, v0)


def cross_validate(
    points: Sequence[Point],
    grid: Mapping[str, Sequence[float]] = CROSS_GRID,
    workers: int | None = None,
) -> tuple[list[Fold], dict[str, float]]:
    """Leave one publisher out, for the coefficients of `grid` (the others stay the presets'):
    every grid point is validated once, then for each publisher the point that fits every
    other publisher best is chosen and this publisher's rows there are its held-out error.
    Also the values all publishers choose together. V0 multi-step points take no part."""
    import itertools
    import os
    from concurrent.futures import ProcessPoolExecutor

    names = list(grid)
    combos = [dict(zip(names, vs, strict=True)) for vs in itertools.product(*grid.values())]
    usable = [p for p in points if not p.multi_step]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        runs = list(pool.map(_validate_at, [(usable, c) for c in combos]))
    return choose_folds(combos, runs, publishers())


def choose_folds(
    combos: Sequence[dict[str, float]], runs: Sequence[Sequence[Row]], owner: Mapping[str, str]
) -> tuple[list[Fold], dict[str, float]]:
    """`cross_validate`'s choice, from every grid point's rows (`runs[i]` at `combos[i]`) and
    each source's publisher."""

    def best(keep: Any) -> tuple[int, float]:
        losses = [fit_loss([r for r in rows if keep(owner[r.point.source])]) for rows in runs]
        i = min(range(len(combos)), key=losses.__getitem__)
        return i, losses[i]

    folds = []
    for pub in sorted({owner[r.point.source] for r in runs[0]}):
        i, loss = best(lambda x, pub=pub: x != pub)
        mine = [r for r in runs[i] if owner[r.point.source] == pub]
        folds.append(Fold(pub, combos[i], loss, mine))
    return folds, combos[best(lambda x: True)[0]]


def _median_cells(rows: Sequence[Row], figures: Sequence[str]) -> list[str]:
    """Per figure: the median |error| % of `rows` and how many ("-" for none)."""
    cells = []
    for fig in figures:
        errs = [abs(r.error_pct) for r in rows if r.figure == fig and r.error_pct is not None]
        cells.append(f"{statistics.median(errs):.1f} (n={len(errs)})" if errs else "-")
    return cells


def publisher_markdown(rows: Sequence[Row]) -> str:
    """Per publisher, the target figures' median |error| % (V0 multi-step points apart): where
    a set of coefficients leaves each source."""
    owner = publishers()
    figures = [f for f in TARGETS if f != PLAN_FIGURE]
    out = [
        "| publisher | " + " | ".join(f"{f} median abs error %" for f in figures) + " |",
        "|---" * (1 + len(figures)) + "|",
    ]
    for pub in sorted({owner[r.point.source] for r in rows}):
        mine = [r for r in rows if owner[r.point.source] == pub and not r.point.multi_step]
        if mine:
            out.append(f"| {pub} | " + " | ".join(_median_cells(mine, figures)) + " |")
    return "\n".join(out) + "\n"


def cross_validation_markdown(folds: Sequence[Fold], together: Mapping[str, float]) -> str:
    """Per publisher left out: the values chosen without it, and its target figures' median
    |error| % there."""
    names = list(together)
    figures = [f for f in TARGETS if f != PLAN_FIGURE]
    out = [
        "| left out | "
        + " | ".join(names)
        + " | loss on the others | "
        + " | ".join(f"{f} median abs error %" for f in figures)
        + " |",
        "|---" * (len(names) + 2 + len(figures)) + "|",
    ]
    for fold in folds:
        cells = _median_cells(fold.rows, figures)
        out.append(
            f"| {fold.publisher} | "
            + " | ".join(f"{fold.chosen[n]:g}" for n in names)
            + f" | {fold.train_loss:.4f} | "
            + " | ".join(cells)
            + " |"
        )
    out.append(
        "| (none: all publishers) | "
        + " | ".join(f"{together[n]:g}" for n in names)
        + " | | "
        + " | ".join("" for _ in figures)
        + " |"
    )
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m harness.orchestrate.validation")
    ap.add_argument("--fit", action="store_true", help="fit FIT_COEFFICIENTS on the fit split")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME",
        help="with --fit: fit this GpuPreset coefficient too, beside FIT_COEFFICIENTS (the joint "
        "refit: --also tp_sequence_overhead_s)",
    )
    ap.add_argument(
        "--in-sample",
        action="store_true",
        help="with --fit: fit on every point, nothing held out (how far one set of coefficients "
        "can go; the errors it leaves are a floor for any split)",
    )
    ap.add_argument(
        "--cap-s",
        type=float,
        metavar="S",
        help="with --fit: replay each long open-loop run for about S seconds of model time "
        "(capped(); what makes --in-sample affordable: 120 s, ~17 s a validation)",
    )
    ap.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --fit: start the search from this value instead of the presets' (a fitted "
        "coefficient, SI units)",
    )
    ap.add_argument(
        "--cross-validate",
        action="store_true",
        help="leave one publisher out over CROSS_GRID (the API server's request latency and "
        "intake): what each publisher's points give when those are chosen without them",
    )
    ap.add_argument(
        "--write", action="store_true", help="write errors.toml and docs/validation.md's table"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="try a coefficient (a GpuPreset field, SI units) on every point: the table, unwritten",
    )
    ap.add_argument(
        "--set-v0",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="try a coefficient on the V0 points only (beside V0_COEFFICIENTS)",
    )
    a = ap.parse_args(argv)
    tried = _coefficient_args(ap, a.set)
    tried_v0 = {**V0_COEFFICIENTS, **_coefficient_args(ap, a.set_v0)}
    also = [_coefficient_name(ap, name) for name in a.also]
    if also and not a.fit:
        ap.error("--also: only with --fit")
    start = _coefficient_args(ap, a.start)
    for flag, given in (("--start", start), ("--in-sample", a.in_sample), ("--cap-s", a.cap_s)):
        if given and not a.fit:
            ap.error(f"{flag}: only with --fit")
    if a.cap_s is not None and a.cap_s <= 0:
        ap.error(f"--cap-s {a.cap_s:g}: expected seconds > 0")
    modes = [
        flag
        for flag, on in (
            ("--set/--set-v0", bool(a.set or a.set_v0)),
            ("--fit", a.fit),
            ("--cross-validate", a.cross_validate),
            ("--write", a.write),
        )
        if on
    ]
    if len(modes) > 1:  # each would ignore the others: say so rather than drop one
        ap.error(f"{' and '.join(modes)}: give one of them (each is its own run)")
    points, _ = load_points()
    if tried or a.set_v0:
        rows = validate(points, tried, tried_v0) + plan_rows(points, tried)
        # the rows `fit` minimises over: validated figures, V0 multi-step apart
        every = [r for r in rows if not r.point.multi_step and r.figure != PLAN_FIGURE]
        fitted = [r for r in every if r.point.split == "fit"]
        print(f"# fit-split loss {fit_loss(fitted):.4f}; over every point {fit_loss(every):.4f}")
        print(markdown(rows))
        print(publisher_markdown(rows), end="")
        return 0
    if a.cross_validate:
        folds, together = cross_validate(points)
        print(cross_validation_markdown(folds, together), end="")
        return 0
    if a.fit:
        names = FIT_COEFFICIENTS + tuple(n for n in also if n not in FIT_COEFFICIENTS)
        if set(start) - set(names):
            ap.error(f"--start {sorted(set(start) - set(names))[0]}: not a fitted coefficient")
        if a.cap_s:
            points = [capped(p, a.cap_s) for p in points]
        coefficients, loss = fit(points, names, rounds=a.rounds, start=start, in_sample=a.in_sample)
        print(f"# loss {loss:.4f}")
        for k, v in coefficients.items():
            print(f"{k} = {v:.6g}")
        return 0
    rows = validate(points) + plan_rows(points)
    if a.write:
        write(rows, "python -m harness.orchestrate.validation --write")
    print(markdown(rows), end="")
    return 0


def _coefficient_name(ap: Any, name: str, item: str | None = None) -> str:
    """`name` if it is a GpuPreset float coefficient; argparse's error (naming `item`, the
    argument as given, or `name`) if not."""
    from harness.sim.presets import GpuPreset

    field = GpuPreset.__dataclass_fields__.get(name)
    if field is None or field.type not in ("float", float):
        ap.error(f"{item or name!r}: expected a GpuPreset coefficient (a float field of GpuPreset)")
    return name


def _coefficient_args(ap: Any, items: Sequence[str]) -> dict[str, float]:
    """`NAME=VALUE` arguments as GpuPreset float coefficients; argparse's error otherwise."""
    out: dict[str, float] = {}
    for item in items:
        name, _, value = item.partition("=")
        _coefficient_name(ap, name, item)
        try:
            out[name] = float(value)
        except ValueError:
            ap.error(f"{item!r}: VALUE must be a number (SI units: seconds, not ms)")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
