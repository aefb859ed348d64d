"""One time base across every view of one result (issue 45): a simulated run at `speedup = 4`
is in model time in the terminal report, the HTML page, the JSON summary, the csv / jsonl /
parquet / vllm exports, the Python API's rows and histograms and the live Prometheus endpoint,
and each figure computed from each view equals the others.

One run against the built-in simulator (module fixture), then each figure recomputed from each
view. Exact: the per-request rows (csv, jsonl, parquet, `to_pandas()`, per-token csv) against
the summary (the summary's percentiles are exact, nearest rank: numpy's inverted_cdf), the vllm
export's lists against the rows, the Prometheus histograms' counts and buckets against the rows.
Within the HDR histograms' stated resolution (3 significant digits: 1 part in 1,000): the
Python API's `histogram()` percentiles. To the printed digits: the terminal's and the page's
tables (harness.analysis.numbers.fmt_number of the exact figure). Sums and means: to float
rounding (rel 1e-9), as summing in another order gives.
"""

from __future__ import annotations

import csv
import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import harness
from harness.analysis.html import render_result_html
from harness.analysis.numbers import fmt_number
from harness.analysis.report_text import render_text
from harness.cli import main

SPEEDUP = 4.0
SCENARIO = f"""
name = "timebase"
seed = 45
[workload]
prompt_tokens = {{ dist = "fixed", value = 64 }}
output_tokens = {{ dist = "uniform", min = 24, max = 48 }}
ignore_eos = true
[[phases]]
name = "main"
duration = "3s"
arrival = {{ process = "poisson", rate = 10.0 }}
[sim]
gpu = "H200"
model = "Qwen2.5-7B-Instruct"
speedup = {SPEEDUP}
reasoning_tokens = {{ values = [8, 16], weights = [0.5, 0.5] }}
"""
HDR_REL = 1e-3  # 3 significant digits
pytestmark = pytest.mark.slow
try:  # the parquet extra: without it, that one view is left out (said in the skip list)
    import pyarrow.parquet as pq
except ImportError:  # pragma: no cover - .ci/run installs it
    pq = None
QS = {"p50": 50, "p90": 90, "p99": 99}


def _exact(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q, method="inverted_cdf"))


def _scrape(port: int) -> dict[str, Any]:
    """The Prometheus text as {family: {"count", "sum", "buckets": {le: n}}} / gauge values."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text.decode()):
        if fam.type == "histogram":
            h: dict[str, Any] = {"buckets": {}}
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    h["buckets"][float(s.labels["le"])] = s.value
                elif s.name.endswith("_count"):
                    h["count"] = s.value
                elif s.name.endswith("_sum"):
                    h["sum"] = s.value
            out[fam.name] = h
        elif fam.samples:
            out[fam.name] = fam.samples[0].value
    return out


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run at speedup 4, and every view of it."""
    from harness.orchestrate import live_metrics

    d = tmp_path_factory.mktemp("timebase")
    out, scn = d / "r.json", d / "timebase.toml"
    scn.write_text(SCENARIO, encoding="utf-8")
    try:
        r = harness.run(scn, out=str(out), prometheus_port=0, prometheus_linger_s=120)
        servers = list(live_metrics._lingering)
        assert len(servers) == 1, "the endpoint lingers after the run with its final counts"
        prom = _scrape(servers[0].port)
    finally:
        for s in list(live_metrics._lingering):
            s.stop()
    v: dict[str, Any] = {"result": r, "json": orjson.loads(out.read_bytes()), "prom": prom}
    for fmt in ("csv", "jsonl", "vllm") + (("parquet",) if pq is not None else ()):
        dest = d / f"rows.{fmt}"
        assert main(["export", str(out), "--format", fmt, "--out", str(dest)]) == 0
        v[fmt] = dest
    assert main(["export", str(out), "--format", "csv", "--tokens", "--out", str(d / "t.csv")]) == 0
    v["tokens"] = d / "t.csv"
    return v


def _csv_rows(path: Path) -> list[dict[str, Any]]:
    def cell(x: str) -> Any:
        if x == "":
            return None
        if x in ("true", "false"):
            return x == "true"
        try:
            return int(x)
        except ValueError:
            try:
                return float(x)
            except ValueError:
                return x

    with open(path, encoding="utf-8") as f:
        return [{k: cell(x) for k, x in row.items()} for row in csv.DictReader(f)]


def _row_views(v: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out = {
        "csv": _csv_rows(v["csv"]),
        "jsonl": [json.loads(x) for x in v["jsonl"].read_text().splitlines()],
        "requests": v["result"].requests(),
    }
    if pq is not None:
        out["parquet"] = pq.read_table(v["parquet"]).to_pylist()
    try:
        df = v["result"].to_pandas()
    except ImportError:  # pragma: no cover - the pandas extra
        return out
    out["to_pandas"] = df.astype(object).where(df.notna(), None).to_dict("records")
    return out


def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["error"] is None and r["sent_ns"] is not None]


def test_the_run_is_in_model_time_and_says_so(views: dict[str, Any]) -> None:
    r, doc = views["result"], views["json"]
    assert doc["clock"]["time"] == "model" and doc["clock"]["speedup"] == SPEEDUP
    assert r.clock == doc["clock"]
    try:
        assert r.to_pandas().attrs["clock"] == doc["clock"]
    except ImportError:  # the pandas extra (.ci/run installs it; the README's `.[test]` not)
        pass
    assert orjson.loads(views["vllm"].read_bytes())["clock"] == doc["clock"]
    if pq is not None:
        meta = pq.read_schema(views["parquet"]).metadata
        assert orjson.loads(meta[b"harness.clock"])["speedup"] == SPEEDUP
    assert views["prom"]["harness_clock_speedup"] == SPEEDUP
    assert "model time, speedup x4" in render_text(doc)
    # the model's window is the wall's x 4 (the run's 3 s of wall time and its drain)
    assert doc["summary"]["throughput"]["window_s"] > 3 * doc["clock"]["wall_duration_s"]


def test_per_request_rows_give_the_summarys_figures_exactly(views: dict[str, Any]) -> None:
    lat = views["json"]["summary"]["latency_ms"]
    thr = views["json"]["summary"]["throughput"]
    for name, rows in _row_views(views).items():
        ok = _ok(rows)
        assert len(ok) == lat["ttft"]["count"] > 10, name
        for metric in ("ttft", "ttft_from_schedule", "tpot", "e2e", "e2e_from_schedule", "ttfo"):
            values = [r[f"{metric}_ms"] for r in ok if r[f"{metric}_ms"] is not None]
            assert len(values) == lat[metric]["count"], (name, metric)
            for key, q in QS.items():
                assert _exact(values, q) == lat[metric][key], (name, metric, key)
            assert float(np.mean(values)) == pytest.approx(lat[metric]["mean"], rel=1e-9)
        # one measured phase, its drain in its window: every success ends inside it
        assert len(ok) / thr["window_s"] == pytest.approx(thr["requests_per_s"], rel=1e-12), name
        tokens = sum(r["output_tokens"] for r in rows)
        assert tokens / thr["window_s"] == pytest.approx(thr["output_tokens_per_s"], rel=1e-12)


def test_token_rows_give_the_summarys_itl_exactly(views: dict[str, Any]) -> None:
    lat = views["json"]["summary"]["latency_ms"]["itl"]
    itl: list[float] = []
    for t in _csv_rows(views["tokens"]):
        if t["chunk_index"] > 0:  # the first chunk's gap is from `sent`: TTFT, not ITL
            itl += [t["gap_ns"] / t["tokens"]] * t["tokens"]
    assert len(itl) == lat["count"]
    for key, q in QS.items():
        assert _exact(itl, q) / 1e6 == lat[key], key


def test_the_vllm_export_is_in_the_rows_time_base(views: dict[str, Any]) -> None:
    """Latencies and duration in one base: its lists equal the rows' figures, its duration is
    the summary's window, its rates the summary's (every success ends inside the window)."""
    doc = orjson.loads(views["vllm"].read_bytes())
    summary = views["json"]["summary"]
    ok = _ok(_csv_rows(views["csv"]))
    assert doc["duration"] == summary["throughput"]["window_s"]
    assert doc["completed"] == len(ok) == summary["requests"]["completed"]
    assert doc["request_throughput"] == pytest.approx(summary["throughput"]["requests_per_s"])
    assert doc["output_throughput"] == pytest.approx(summary["throughput"]["output_tokens_per_s"])
    assert sorted(doc["ttfts"]) == sorted(r["ttft_ns"] / 1e9 for r in _ttft_ns(ok))
    assert sorted(doc["latencies"]) == sorted((r["end_ns"] - r["sent_ns"]) / 1e9 for r in ok)
    # the summary's own median (issue 45: --brief prints it; one computation), a value of the rows
    ttft_ms = [r["ttft_ms"] for r in ok]
    assert doc["median_ttft_ms"] == pytest.approx(summary["latency_ms"]["ttft"]["p50"], rel=1e-12)
    assert min(ttft_ms) <= summary["latency_ms"]["ttft"]["p50"] <= max(ttft_ms)
    assert doc["mean_ttft_ms"] == pytest.approx(summary["latency_ms"]["ttft"]["mean"], rel=1e-9)


def _ttft_ns(ok: list[dict[str, Any]]) -> list[dict[str, int]]:
    return [{"ttft_ns": r["first_token_ns"] - r["sent_ns"]} for r in ok]


def test_the_api_histograms_agree_within_their_resolution(views: dict[str, Any]) -> None:
    lat = views["json"]["summary"]["latency_ms"]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        h = views["result"].histogram(metric)
        assert h.get_total_count() == lat[metric]["count"], metric
        for key, q in QS.items():
            got_ms = h.get_value_at_percentile(q) / 1e3
            assert got_ms == pytest.approx(lat[metric][key], rel=HDR_REL), (metric, key)


def test_the_terminal_and_the_page_print_the_rows_figures(views: dict[str, Any]) -> None:
    """The latency table's TTFT and E2E rows (count, mean, p50, p90, p95, p99), as printed,
    recomputed from the csv rows: the terminal's lines and the page's table cells."""
    ok = _ok(_csv_rows(views["csv"]))
    text = render_text(views["json"])
    page = render_result_html(views["json"])
    for label, col in (("TTFT", "ttft_ms"), ("E2E", "e2e_ms")):
        v = [r[col] for r in ok]
        cells = [str(len(v)), fmt_number(float(np.mean(v)))]
        cells += [fmt_number(_exact(v, q)) for q in (50, 90, 95, 99)]
        row = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{label} "))
        assert row.split()[1:7] == cells, (row, cells)
        assert json.dumps([label, *cells], separators=(",", ":"))[:-1] in page, (label, cells)


def test_prometheus_histograms_count_the_rows_in_model_seconds(views: dict[str, Any]) -> None:
    """Every bucket of harness_ttft_seconds / harness_e2e_seconds equals the rows at or below
    its bound, and the sums are the rows' (exact counts; sums to float rounding)."""
    prom = views["prom"]
    ok = [r for r in _ok(_csv_rows(views["csv"])) if r["first_token_ns"] is not None]
    lat = views["json"]["summary"]["latency_ms"]
    for fam, end_key, metric in (
        ("harness_ttft_seconds", "first_token_ns", "ttft"),
        ("harness_e2e_seconds", "last_token_ns", "e2e"),
    ):
        values = np.array([(r[end_key] - r["sent_ns"]) / 1e9 for r in ok])
        h = prom[fam]
        assert h["count"] == len(values) == lat[metric]["count"], fam
        assert h["sum"] == pytest.approx(float(values.sum()), rel=1e-9), fam
        assert h["sum"] * 1e3 / h["count"] == pytest.approx(lat[metric]["mean"], rel=1e-9)
        for le, n in h["buckets"].items():
            assert n == int((values <= le).sum()), (fam, le)
    itl = prom["harness_itl_seconds"]
    assert itl["count"] == lat["itl"]["count"]
    assert itl["sum"] * 1e3 / itl["count"] == pytest.approx(lat["itl"]["mean"], rel=1e-9)
