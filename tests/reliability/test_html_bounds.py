"""The HTML report is bounded and shows text, not controls (issue 44).

- A result whose time series hold 300,000 points makes a page whose series hold at most
  MAX_SERIES_POINTS points each, keep the peak and the dip, and say "downsampled" (a 3 M-point
  result made a 369 MB page in 48 s before).
- A right-to-left override (U+202E), other bidi controls, C0/C1 controls and separators in a model,
  scenario or phase name reach no HTML view raw: every view's page escapes them as the terminal
  does (`\\u202e`), through the one function `harness.analysis.html.page` applies.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from harness.analysis.html import page, render_result_html
from harness.analysis.html_capacity import render_capacity_html
from harness.analysis.html_compare import render_compare_html
from harness.analysis.html_safe import MAX_SERIES_POINTS, bounded_points, html_text
from harness.analysis.result import check_result
from harness.errors import ConfigError
from harness.termtext import terminal_safe

V2 = Path(__file__).resolve().parents[1] / "data" / "results" / "v2.json"
UNSAFE = "\u202e\u202a\u2066\u2069\u200f\u061c\u2028\x1b\x9b\x07\r"
# what no page may hold raw: C0 (but newline and tab), DEL, C1, bidi, line separators
RAW = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


@functools.cache
def _v2_bytes() -> bytes:
    return V2.read_bytes()


def _result() -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(_v2_bytes())
    doc["files"] = {}  # no journal: the page is built from the result alone
    return doc


def _page_data(text: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', text, re.S)
    assert m is not None
    data: dict[str, Any] = orjson.loads(m.group(1))
    return data


def _charts(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["title"]: s for s in data["sections"] if s["type"] == "chart"}


# -- downsampling ----------------------------------------------------------------------------


def test_bounded_points_keeps_each_bins_min_and_max_in_order() -> None:
    ys = [0, 5, 1, 1, 9, 2, 3, 3, -1, 4]
    pts, n = bounded_points([[i, y] for i, y in enumerate(ys)], max_points=6)
    assert n == 10  # 2 bins of 5 (0 5 1 1 9 | 2 3 3 -1 4), plus the first and last points
    assert pts == [[0.0, 0.0], [4.0, 9.0], [8.0, -1.0], [9.0, 4.0]]
    # 2 bins of 4 (3 0 9 5 | 1 2 7): the last bin is short
    pts, _ = bounded_points([[i, y] for i, y in enumerate([3, 0, 9, 5, 1, 2, 7])], max_points=6)
    assert pts == [[0.0, 3.0], [1.0, 0.0], [2.0, 9.0], [4.0, 1.0], [6.0, 7.0]]


def test_bounded_points_leaves_a_short_series_and_drops_what_cannot_be_drawn() -> None:
    pts, n = bounded_points([[1, 2], [2, None], [3, float("nan")], [4, 0], [True, 3]], ylog=True)
    assert (pts, n) == ([[1.0, 2.0]], 1)


def test_long_time_series_are_downsampled_and_say_so() -> None:
    n = 300_000
    r = _result()
    rng = np.random.default_rng(1)
    ts = r["timeseries"]
    for key in ("offered", "sent", "completed", "errors", "in_flight", "output_tokens", "http_429"):
        a = rng.integers(10, 20, n)
        a[n // 3] = 500  # a one-step peak
        a[2 * n // 3] = 0  # a one-step dip
        ts[key] = a.tolist()
    text = render_result_html(r)
    assert len(text) < 2_000_000, len(text)
    charts = _charts(_page_data(text))
    step = ts["step_s"]
    load = charts["Offered vs achieved load"]
    for s in load["series"]:
        ys = [y for _, y in s["points"]]
        assert len(ys) <= MAX_SERIES_POINTS
        assert max(ys) == 500 / step and min(ys) == 0.0, s["name"]
    assert f"of {3 * n:,} points drawn" in load["note"] and "downsampled" in load["note"]
    flight = charts["In-flight requests"]
    assert max(y for _, y in flight["series"][0]["points"]) == 500
    # the time axis still spans the whole run
    xs = [p[0] for p in flight["series"][0]["points"]]
    assert min(xs) == step and max(xs) == n * step


def test_a_short_result_is_not_downsampled() -> None:
    data = _page_data(render_result_html(_result()))
    assert "downsampled" not in orjson.dumps(data).decode()
    load = _charts(data)["Offered vs achieved load"]
    assert [len(s["points"]) for s in load["series"]] == [4, 4, 4]


# -- text escaping ---------------------------------------------------------------------------


def _assert_no_raw_controls(text: str) -> None:
    found = sorted({f"U+{ord(c):04X}" for c in RAW.findall(text)})
    assert found == [], found


def test_bidi_and_controls_in_names_are_escaped_in_the_result_page() -> None:
    r = _result()
    r["scenario_name"] = f"scn{UNSAFE}x"
    r["target"]["model"] = f"gpt\u202eevil{UNSAFE}"
    for ph in r["phases"]:
        ph["name"] = f"{ph['name']}\u2066{UNSAFE}"
    r["client"].setdefault("warnings", []).append(f"warn{UNSAFE}")
    text = render_result_html(r)
    _assert_no_raw_controls(text)
    data = _page_data(text)
    assert data["title"] == f"harness: scn{terminal_safe(UNSAFE)}x"
    assert "gpt\\u202eevil" in data["subtitle"][0]
    assert f"<title>harness: scn{terminal_safe(UNSAFE)}x</title>" in text


def test_every_view_escapes_through_page() -> None:
    """compare, capacity and a bare page: the same escaping (page() is what they share)."""
    name = f"m\u202e{UNSAFE}"
    _assert_no_raw_controls(page(name, [name], [{"type": "note", "text": name, name: [name]}]))
    capacity = {
        "scenario": name,
        "slos": [],
        "bracket": [None, None],
        "probes": [{"kind": name, "rate": 1.0, "passed": True, "values": {}, "reason": name}],
        "notes": [name],
    }
    text = render_capacity_html(capacity)
    _assert_no_raw_controls(text)
    assert f"harness capacity: {terminal_safe(name)}" in text
    report = {
        "thresholds": {"source": name, "values": {}},
        "comparisons": [
            {"baseline": name, "candidate": name, "status": "ok", "missing": name, "rows": []}
        ],
        "status": "ok",
    }
    text = render_compare_html(report)
    _assert_no_raw_controls(text)
    assert "m\\\\u202e" in text  # the escape, as JSON writes a backslash


def test_html_text_is_terminal_safe() -> None:
    assert html_text(f"a{UNSAFE}b") == terminal_safe(f"a{UNSAFE}b")
    assert html_text("ünïcode 名前 ok") == "ünïcode 名前 ok"


@pytest.mark.parametrize(("bad", "got"), [("x", "a string 'x'"), (True, "true"), (None, "null")])
def test_long_number_arrays_are_still_checked_item_by_item_where_one_fails(
    bad: Any, got: str
) -> None:
    """The schema check's one-pass path for long number arrays names the first bad item."""
    r = orjson.loads(_v2_bytes())  # as written, files and all
    r["workload_view"]["offered_per_s"] = [1.5] * 100_000 + [bad, 2]
    with pytest.raises(ConfigError) as e:
        check_result(r, "r.json")
    assert str(e.value).startswith(
        f"r.json: workload_view.offered_per_s.100000: expected a number, got {got} "
    )


def test_a_time_series_with_a_non_number_draws_the_numbers() -> None:
    r = _result()
    r["timeseries"]["in_flight"] = [1, "x", None, 4]
    flight = _charts(_page_data(render_result_html(r)))["In-flight requests"]
    step = r["timeseries"]["step_s"]
    assert flight["series"][0]["points"] == [[step, 1.0], [4 * step, 4.0]]
