"""A simulated run at speedup K != 1 (issue 24): the result is in model time by default and says
so on every table, page and saved result."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from harness.analysis.html import render_result_html
from harness.analysis.report_text import render_text
from harness.analysis.result import build_result, check_result
from harness.record.journal import read_journal

JOURNAL = Path(__file__).parent.parent / "data" / "results" / "v2.journal.jsonl"


def _build(speedup: float) -> dict:
    j = read_journal(JOURNAL)
    j.header = copy.deepcopy(j.header)
    j.header["target"]["server"]["settings"]["speedup"] = speedup
    return build_result(j, str(JOURNAL))


def test_latencies_and_rates_are_the_models():
    wall, model = _build(1.0), _build(10.0)
    assert "clock" not in wall
    assert model["clock"]["time"] == "model" and model["clock"]["speedup"] == 10.0
    assert model["clock"]["wall_duration_s"] == pytest.approx(wall["duration_s"])
    assert model["duration_s"] == pytest.approx(10 * wall["duration_s"], rel=1e-6)
    w, m = wall["summary"], model["summary"]
    for metric in ("ttft", "itl", "e2e", "tpot"):
        assert m["latency_ms"][metric]["p50"] == pytest.approx(
            10 * w["latency_ms"][metric]["p50"], rel=1e-3
        ), metric
        assert m["latency_ms"][metric]["count"] == w["latency_ms"][metric]["count"]
    for rate in ("requests_per_s", "output_tokens_per_s"):
        assert m["throughput"][rate] == pytest.approx(w["throughput"][rate] / 10, rel=1e-3)
    assert model["server_metrics"]["series"]["t_s"][-1] == pytest.approx(
        10 * wall["server_metrics"]["series"]["t_s"][-1], abs=0.01
    )
    check_result(model, "model.json")  # the schema knows the clock block


def test_every_table_and_page_says_model_time():
    r = _build(10.0)
    text = render_text(r)
    assert "simulator speedup x10: times and rates are the model's" in text
    titles = [ln for ln in text.splitlines() if ln.startswith(("phase ", "summary "))]
    assert titles and all("model time, speedup x10" in t for t in titles)
    page = render_result_html(r)
    assert "simulator speedup x10" in page and page.count("model time, speedup x10") >= 5
    assert "speedup x" not in render_text(_build(1.0))


def test_the_clients_health_stays_in_wall_time():
    """Send lag is the client's, not the model's: x10 in the latency table (model time), as
    measured in the client block, as the loop lag is (capacity judges its probes by it)."""
    wall, model = _build(1.0), _build(10.0)
    assert model["summary"]["latency_ms"]["send_lag"]["p99"] == pytest.approx(
        10 * wall["summary"]["latency_ms"]["send_lag"]["p99"]
    )
    for key in ("send_lag_ms", "loop_lag_ms"):
        assert model["client"][key]["p99"] == pytest.approx(wall["client"][key]["p99"])
        assert model["client"][key]["count"] == wall["client"][key]["count"]
