"""The validation set of published measurements (harness/sim/validation/published.toml): every
point is complete enough to replay, every lengths file parses and agrees with its point, and the
set covers what issue 23 asks of it. Everything here is read from the file, not restated."""

from __future__ import annotations

import csv
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.sim.presets import BUILTIN_PRESETS
from harness.sim.validation import table

DATA = table.load()
POINTS: list[dict[str, Any]] = DATA["point"]
SOURCES: dict[str, dict[str, Any]] = DATA["source"]
with BUILTIN_PRESETS.open("rb") as _f:
    BUILTIN = tomllib.load(_f)
# The model presets the points name (builtin.toml holds their shapes)
MODELS: dict[str, dict[str, Any]] = {
    p["model"]: BUILTIN["model"][p["model"]] for p in POINTS if p["model"] in BUILTIN["model"]
}
VALIDATION_DIR = table.PUBLISHED.parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "validation-sources.md"

ENGINES = {"V0", "V1", "unknown"}
SOURCE_KINDS = {"repository", "blog", "docs", "issue", "paper"}
SHAPE_KEYS = (
    "hf_id",
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
)
MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
FIGURE = re.compile(r"_(ms|per_s)$")  # a published figure: a latency or a rate
# The GPU classes issue 23 names, by the prefix of a preset name.
GPU_CLASSES = ("H100", "H200", "A100", "L40S", "L4")


def _ids(points: list[dict[str, Any]]) -> list[str]:
    return [str(p["id"]) for p in points]


def _model(name: str) -> Mapping[str, Any]:
    return BUILTIN["model"][name]


def _gpu_class(gpu: str) -> str:
    # the longest matching prefix: "L40S" before "L4"
    return max((c for c in GPU_CLASSES if gpu.startswith(c)), key=len, default="")


def _dense_params(m: Mapping[str, Any]) -> float:
    """Parameters of a dense decoder from its config.json shape (norms and biases left out)."""
    h, hd = m["hidden_size"], m["head_dim"]
    attn = h * hd * (2 * m["num_heads"] + 2 * m["num_kv_heads"])
    mlp = 3 * h * m["intermediate_size"]
    emb = m["vocab_size"] * h * (1 if m["tie_word_embeddings"] else 2)
    return float(m["num_layers"] * (attn + mlp) + emb)


def test_point_ids_are_unique() -> None:
    ids = _ids(POINTS)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("p", POINTS, ids=_ids(POINTS))
def test_point_names_its_source_setup_and_engine(p: dict[str, Any]) -> None:
    assert p["source"] in SOURCES
    assert p["engine"] in ENGINES and p.get("engine_how")
    assert p["vllm_version"] and p["gpu_as_published"] and p["hf_id"] and p["dtype"]
    assert isinstance(p["tp"], int) and p["tp"] >= 1
    # a V1 claim needs a version that has the V1 engine by default (0.8 or later)
    if p["engine"] == "V1":
        major, minor = (int(x) for x in p["vllm_version"].split(".")[:2])
        assert (major, minor) >= (0, 8)


@pytest.mark.parametrize("p", POINTS, ids=_ids(POINTS))
def test_point_gpu_and_model_are_presets_or_described_here(p: dict[str, Any]) -> None:
    assert p["gpu"] in BUILTIN["gpu"] or {
        "memory_gib",
        "bandwidth_gb_per_s",
        "bf16_tflop_per_s",
        "interconnect",
    } <= set(p.get("gpu_specs", {}))
    assert p["model"] in BUILTIN["model"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_tables_carry_the_config_shape(name: str) -> None:
    m = MODELS[name]
    assert all(k in m for k in SHAPE_KEYS), [k for k in SHAPE_KEYS if k not in m]
    assert m["num_heads"] % m["num_kv_heads"] == 0
    has_moe = [k in m for k in MOE_KEYS]
    assert all(has_moe) or not any(has_moe)  # an MoE model gives all three
    if all(has_moe):
        assert 1 <= m["num_experts_per_tok"] <= m["num_experts"]


@pytest.mark.parametrize("p", POINTS, ids=_ids(POINTS))
def test_point_has_a_workload_a_load_and_a_figure(p: dict[str, Any]) -> None:
    assert p["dataset"]
    lengths = (
        "lengths_file" in p
        or {"input_len", "output_len"} <= p.keys()
        or ({"input_len_mean"} <= p.keys() and bool({"output_len", "output_len_mean"} & p.keys()))
    )
    assert lengths
    rate = p.get("request_rate")
    assert rate == "inf" or (isinstance(rate, int | float) and rate > 0) or "max_concurrency" in p
    if "max_concurrency" in p:
        assert isinstance(p["max_concurrency"], int) and p["max_concurrency"] >= 1
    figures = [k for k in p if FIGURE.search(k)]
    assert figures and all(isinstance(p[k], int | float) and p[k] > 0 for k in figures)
    # how the figures are defined, and what is unclear, are said by the point or its source
    source = SOURCES[p["source"]]
    assert p.get("definitions") or source.get("definitions")
    assert p.get("ambiguities") or source.get("ambiguities")


@pytest.mark.parametrize("p", [p for p in POINTS if "lengths_file" in p], ids=lambda p: p["id"])
def test_lengths_file_parses_and_matches_its_point(p: dict[str, Any]) -> None:
    path = VALIDATION_DIR / p["lengths_file"]
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["input_tokens", "output_tokens"]
    pairs = [(int(a), int(b)) for a, b in rows[1:]]
    assert all(i > 0 and o >= 0 for i, o in pairs)
    assert len(pairs) == p["num_prompts"]
    # the published totals are the sums of the published per-request lengths
    assert sum(i for i, _ in pairs) == p["total_input_tokens"]
    assert sum(o for _, o in pairs) == p["total_output_tokens"]


def test_lengths_files_are_all_referenced_and_small() -> None:
    on_disk = {f"lengths/{f.name}" for f in (VALIDATION_DIR / "lengths").glob("*.csv")}
    assert on_disk == {p["lengths_file"] for p in POINTS if "lengths_file" in p}
    assert sum((VALIDATION_DIR / f).stat().st_size for f in on_disk) < 300_000


@pytest.mark.parametrize("sid", sorted(SOURCES))
def test_source_says_where_when_and_who(sid: str) -> None:
    s = SOURCES[sid]
    assert s["title"] and s["url"].startswith("https://") and s["publisher"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", s["retrieved"])
    assert s["kind"] in SOURCE_KINDS
    assert any(p["source"] == sid for p in POINTS)


def test_the_set_covers_what_issue_23_asks() -> None:
    assert len(POINTS) >= 24
    assert (
        len({s["publisher"] for s in SOURCES.values()}) >= 5
    )  # independent = different publishers
    assert len({_gpu_class(p["gpu"]) for p in POINTS} - {""}) >= 3
    assert sum(p["engine"] == "V1" for p in POINTS) * 2 >= len(POINTS)
    tps = {p["tp"] for p in POINTS}
    assert 1 in tps and max(tps) > 1
    dense = [
        _dense_params(_model(p["model"])) for p in POINTS if "num_experts" not in _model(p["model"])
    ]
    assert any(6e9 <= n <= 10e9 for n in dense)  # an 8B-class model
    assert any(60e9 <= n <= 80e9 for n in dense)  # a 70B-class model
    assert any("num_experts" in _model(p["model"]) for p in POINTS)  # an MoE model


def test_docs_carry_the_current_tables() -> None:
    rendered = table.render(DATA)
    assert all(f"`{pid}`" in rendered for pid in _ids(POINTS))
    assert rendered in DOC.read_text(), "regenerate: python -m harness.sim.validation.table"
