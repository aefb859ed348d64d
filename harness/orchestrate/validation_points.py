"""The validation set's data model: a published point (`Point`, read from `published.toml`),
the harness scenario and `[sim]` table that replay it, and a compared figure (`Row`).

Pure apart from reading the data and writing a lengths file's trace: what
`harness.orchestrate.validation` predicts and the report and fit modules read.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
# A prompt the server had already seen (`repeated_prompts`: the same prompts sent in an earlier
# run to the same server, vLLM V1's prefix cache on) is a cache hit but for its last, partial
# 16-token KV block, which vLLM computes again: 8 tokens on average.
REPEAT_UNCACHED_TOKENS = 8
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


def clipped_mean(mean: float, top: float, sigma: float = DATASET_SIGMA) -> float:
    """E[min(X, top)] for X lognormal with that mean and sigma (what a cap leaves of a mean)."""
    mu = math.log(mean) - sigma * sigma / 2

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    z = math.log(top)
    return mean * phi((z - mu - sigma * sigma) / sigma) + top * (1.0 - phi((z - mu) / sigma))


def _uncapped_mean(mean: float, top: float) -> float:
    """The lognormal mean whose draws, capped at `top`, average `mean`: a published mean is of
    lengths that never passed the published maximum (bisection in log space; `mean` itself
    where the cap leaves it within 0.1 %)."""
    if mean >= top or clipped_mean(mean, top) >= 0.999 * mean:
        return mean
    lo, hi = math.log(mean), math.log(top * 50)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if clipped_mean(math.exp(mid), top) < mean else (lo, mid)
    return math.exp((lo + hi) / 2)


def _dist(fixed: object, mean: object, maximum: object = None) -> dict[str, Any]:
    if fixed is not None:
        return {"dist": "fixed", "value": int(fixed)}  # type: ignore[call-overload]  # a TOML int
    m = float(mean)  # type: ignore[arg-type]  # a TOML number
    top = int(maximum) if maximum is not None else int(m * 20)  # type: ignore[call-overload]
    drawn = round(_uncapped_mean(m, top), 1) if maximum is not None else m
    return {"dist": "lognormal", "mean": drawn, "sigma": DATASET_SIGMA, "min": 4, "max": top}


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
        shared = r.get("shared_prefix_tokens")
        if r.get("repeated_prompts"):  # seen before: one cached prefix, the last block computed
            tokens = round(float(r.get("input_len") or r["input_len_mean"]))
            own = min(REPEAT_UNCACHED_TOKENS, tokens)
            workload["prompt_tokens"] = {"dist": "fixed", "value": own}
            workload["prefix_groups"] = {
                "groups": 1,
                "tokens": {"dist": "fixed", "value": tokens - own},
            }
        elif shared is not None:  # a system prompt shared by groups of users, within input_len
            workload["prompt_tokens"] = {"dist": "fixed", "value": int(r["input_len"]) - shared}
            workload["prefix_groups"] = {
                "groups": int(r["prefix_groups"]),
                "tokens": {"dist": "fixed", "value": int(shared)},
            }
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


@dataclass(frozen=True)
class Row:
    """One figure of one point: published, predicted, and the ratio prediction / published."""

    point: Point
    figure: str
    published: float
    predicted: float | None
    note: str = ""
    slo: str = ""  # plan rows: the SLO the capacity was searched under
    # the regime `predict` reads from this prediction (predict_intervals.result_regime): the one
    # rule both sides of a comparison are classified by; "" where the point could not run
    regime: str = ""

    @property
    def ratio(self) -> float | None:
        if self.predicted is None or self.published <= 0:
            return None
        return self.predicted / self.published

    @property
    def error_pct(self) -> float | None:
        r = self.ratio
        return None if r is None else (r - 1.0) * 100.0


@dataclass(frozen=True)
class Fold:
    """One publisher left out: the grid values chosen on every other publisher's points (their
    `fit_loss`), and this publisher's rows at those values."""

    publisher: str
    chosen: dict[str, float]
    train_loss: float
    rows: list[Row]


def gpu_class(gpu: str) -> str:
    return gpu.split("-")[0]


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


def publishers(path: Path = PUBLISHED) -> dict[str, str]:
    """source -> publisher (sources of one publisher are not independent of each other)."""
    doc = tomllib.loads(path.read_text())
    return {sid: str(s["publisher"]) for sid, s in doc["source"].items()}
