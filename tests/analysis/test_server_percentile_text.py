"""A server percentile is interpolated inside the Prometheus bucket that holds it: where that
bucket is coarse (it starts at 0, is the open top one, or spans more than 2x), the views show its
bounds only, never the interpolated figure as if it were measured (`150.0 [0-300]` was shown next
to a client p50 of 9 ms)."""

from __future__ import annotations

import pytest

from harness.analysis.html import server_view_sections
from harness.analysis.report_text import render_server_view
from harness.analysis.server_view import build_server_view, percentile_text

E2E = "vllm:e2e_request_latency_seconds"


@pytest.mark.parametrize(
    ("value", "bucket", "shown"),
    [
        (150.0, [0.0, 300.0], "[0-300]"),  # the first bucket: from 0, no figure
        (400.0, [100.0, 500.0], "[100-500]"),  # 5x wide
        (600.0, [500.0, 1000.0], "600.0 [500-1000]"),  # 2x: narrow enough for a figure
        (3.75, [2.5, 5.0], "3.75 [2.5-5]"),
        (1100.0, [1000.0, 1500.0], "1,100 [1000-1500]"),
        (240000.0, [240000.0, None], "[240000-inf]"),  # the open top bucket: a bound
        (None, [0.0, 300.0], "-"),  # no requests
        (12.5, None, "12.50"),  # no bucket recorded
    ],
)
def test_percentile_text(value, bucket, shown):
    assert percentile_text(value, bucket) == shown


def _view() -> dict:
    """Twenty requests whose E2E all fell in vLLM's first E2E bucket (0-300 ms)."""
    le = [0.3, 0.5, 0.8, 1.0]

    def poll(wall: float, n: int, total_s: float) -> dict:
        return {
            "t": "server_metrics",
            "wall_s": wall,
            "values": {},
            "hist": {E2E: [total_s, n, [n, n, n, n, n]]},
            "hist_le": {E2E: le},
        }

    client = {"e2e": {"count": 20, "mean": 9.0, "p50": 9.0, "p90": 11.0, "p99": 12.0}}
    return build_server_view(
        [poll(100.0, 0, 0.0), poll(110.0, 20, 0.2)], 100.0, (0.0, 10.0), client
    )


def test_text_and_html_show_the_bounds_not_an_interpolation():
    sv = _view()
    assert sv["latency_ms"]["e2e"]["p50"] == pytest.approx(150.0)  # the result keeps the figure
    text = "\n".join(render_server_view(sv))
    row = next(ln for ln in text.splitlines() if "E2E server" in ln)
    assert "[0-300]" in row and "150" not in row
    cells = next(
        r for r in server_view_sections({"server_view": sv})[0]["rows"] if r[0] == "E2E (server)"
    )
    assert cells[3:] == ["[0-300]", "[0-300]", "[0-300]"]
