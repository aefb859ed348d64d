"""The validation set's tables for docs/validation.md: `python -m harness.sim.validation.table`.

Reads `published.toml` (the published measurements, figures as their sources printed them)
and prints three Markdown sections: the sources, the points, and each source's ambiguities.
Numbers in the points table are rounded for reading (4 significant digits); the file keeps
them as published. Pure: the file in, text out.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PUBLISHED = Path(__file__).with_name("published.toml")

# The figures the points table shows, in order: (keys, label, unit); the first key a point has
# is shown (a median where published, else the mean).
FIGURES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("output_tokens_per_s",), "out", "tok/s"),
    (("throughput_unlabelled_tokens_per_s",), "tput (unlabelled)", "tok/s"),
    (("request_throughput_per_s",), "", "req/s"),
    (("ttft_p50_ms", "ttft_mean_ms"), "TTFT", "ms"),
    (("tpot_p50_ms", "tpot_mean_ms"), "TPOT", "ms"),
    (("itl_p50_ms", "itl_mean_ms"), "ITL", "ms"),
    (("e2e_p50_ms", "e2e_mean_ms"), "E2E", "ms"),
)


def load(path: Path = PUBLISHED) -> dict[str, Any]:
    """The parsed file: {"source": {id: {...}}, "point": [{...}], "model": {name: {...}}}."""
    with path.open("rb") as f:
        return tomllib.load(f)


def _num(v: float) -> str:
    """4 significant digits, whole numbers from 1000 up (no exponent): 6027, 20.03, 0.4768."""
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def workload(p: Mapping[str, Any]) -> str:
    """The point's lengths in a few words: 'sharegpt, 320 per-request lengths', 'random 4000/200'."""
    ds = str(p["dataset"])
    if "lengths_file" in p:
        return f"{ds}, {p['num_prompts']} per-request lengths"
    if "input_len" in p:
        eos = ", ignore EOS" if p.get("ignore_eos") else ""
        return f"{ds} {p['input_len']}/{p['output_len']}{eos}"
    approx = ", approx." if p.get("lengths_approximate") else ""
    # means where only means are published; a fixed side (output_len) as it is
    out = _num(p["output_len_mean"]) if "output_len_mean" in p else f"{p['output_len']} fixed"
    return f"{ds}, mean {_num(p['input_len_mean'])}/{out}{approx}"


def load_shape(p: Mapping[str, Any]) -> str:
    """How requests arrive: 'burst of 320', '4 req/s Poisson x 1200', '8 concurrent x 100', and
    over how many identical servers ('..., 4 replicas')."""
    shape = _arrivals(p)
    dp = int(p.get("data_parallel", 1))
    return f"{shape}, {dp} replicas" if dp > 1 else shape


def _arrivals(p: Mapping[str, Any]) -> str:
    n = p.get("num_prompts")
    of_n = f" x {n}" if n is not None else ""
    if p.get("harness") == "offline":
        return f"offline batch of {p['batch_size']}"
    if "max_concurrency" in p:
        during = f" for {p['planned_duration_s']:.0f} s" if "planned_duration_s" in p else ""
        return f"{p['max_concurrency']} concurrent{of_n}{during}"
    rate = p["request_rate"]
    if rate == "inf":
        return f"burst of {n}" if n is not None else "all at once"
    process = "constant" if p.get("arrival") == "constant" else "Poisson"
    during = f" for {p['planned_duration_s']:.0f} s" if "planned_duration_s" in p else ""
    return f"{rate} req/s {process}{of_n}{during}"


def figures(p: Mapping[str, Any]) -> str:
    """The point's headline figures, in FIGURES order: 'out 6027 tok/s; TTFT p50 1731 ms'."""
    parts = []
    for keys, label, unit in FIGURES:
        key = next((k for k in keys if k in p), None)
        if key is not None:
            stat = (
                " mean" if key.endswith("_mean_ms") else (" p50" if key.endswith("_p50_ms") else "")
            )
            derived = " (derived)" if key in p.get("derived", ()) else ""
            parts.append(f"{label}{stat} {_num(p[key])} {unit}{derived}".strip())
    return "; ".join(parts)


def render_sources(data: Mapping[str, Any]) -> str:
    counts: dict[str, int] = {}
    for p in data["point"]:
        counts[p["source"]] = counts.get(p["source"], 0) + 1
    rows = [
        [
            f"`{sid}`",
            s["title"],
            s["url"],
            s["publisher"],
            f"{s['vllm_version']} ({s['engine']})",
            s["gpus"],
            str(counts.get(sid, 0)),
        ]
        for sid, s in data["source"].items()
    ]
    return _table(["source", "what", "address", "publisher", "vLLM", "GPUs", "points"], rows)


def render_points(data: Mapping[str, Any]) -> str:
    rows = [
        [
            f"`{p['id']}`",
            p["engine"],
            p["gpu"],
            p["model"],
            p["dtype"]
            + ("" if p.get("kv_cache_dtype", "auto") == "auto" else f", KV {p['kv_cache_dtype']}"),
            str(p["tp"]),
            workload(p),
            load_shape(p),
            figures(p),
        ]
        for p in data["point"]
    ]
    header = ["point", "engine", "GPU", "model", "dtype", "TP", "workload", "load", "figures"]
    return _table(header, rows)


def render_ambiguities(data: Mapping[str, Any]) -> str:
    return "\n".join(f"- `{sid}`: {s['ambiguities']}" for sid, s in data["source"].items())


def render(data: Mapping[str, Any]) -> str:
    """The three sections docs/validation.md carries, as Markdown."""
    return "\n\n".join(
        [
            "### Sources\n\n" + render_sources(data),
            "### Points\n\n" + render_points(data),
            "### Ambiguities, per source\n\n" + render_ambiguities(data),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    path = Path(argv[0]) if argv else PUBLISHED
    sys.stdout.write(render(load(path)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
