"""Sweeps that recommend (issue 24): with [slo], the table and the page mark the SLO lines and
the point to run at (the highest goodput that meets every SLO), with its margin, or say that no
point meets them."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.html_sweep import sweep_sections
from harness.analysis.sweep_report import fold_slo, recommend, render_sweep_text

LIMITS = [
    {"name": "ttft_p99", "limit_ms": 2000.0, "kind": "aggregate"},
    {"name": "ttft", "limit_ms": 2000.0, "kind": "per_request"},
]


def _point(i: int, seqs: int, goodput: float, ttft_p99: float) -> dict:
    fig = {
        "goodput_requests_per_s": goodput,
        "ttft_p99_ms": ttft_p99,
        "output_tokens_per_s": 100.0 * goodput,
    }
    runs = [
        [
            {**LIMITS[0], "value_ms": ttft_p99, "pass": ttft_p99 <= 2000.0},
            {**LIMITS[1], "attainment": 0.99, "pass": None},
        ]
    ]
    return {
        "id": f"p{i}",
        "setting_label": f"max_num_seqs={seqs}",
        "load_label": "rate=8",
        "status": "done",
        "metrics": {
            k: {"mean": v, "ci95_low": None, "ci95_high": None, "n": 1} for k, v in fig.items()
        },
        "slo": fold_slo(runs),
    }


def _summary(points: list[dict]) -> dict:
    return {"kind": "sweep_summary", "sweep": {"name": "s", "server_kind": "sim"}, "points": points}


# (max_num_seqs, goodput, TTFT p99): 64 has the most goodput but misses the SLO; 32 is chosen
POINTS = [(16, 5.0, 900.0), (32, 7.5, 1500.0), (64, 8.0, 2600.0)]


def test_the_highest_goodput_that_meets_every_slo_is_recommended_with_its_margin():
    s = _summary([_point(i, *p) for i, p in enumerate(POINTS)])
    rec = recommend(s)
    assert rec is not None and rec["point"] == "p1"
    assert rec["margins"][0]["margin_share"] == 0.25  # 1,500 ms under a 2,000 ms limit
    text = render_sweep_text(s)
    assert "SLOs: ttft_p99 <= 2,000 ms, ttft <= 2,000 ms per request" in text
    assert "recommended: max_num_seqs=32 rate=8" in text and "25% under its 2,000 ms" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("max_num_seqs=32"))
    assert "meets <- recommended" in row
    assert "misses ttft_p99" in next(
        ln for ln in text.splitlines() if ln.startswith("max_num_seqs=64")
    )


def test_no_point_meeting_the_slos_is_said_plainly():
    s = _summary([_point(0, 64, 8.0, 2600.0), _point(1, 128, 9.0, 3100.0)])
    rec = recommend(s)
    assert rec is not None and rec["point"] is None
    assert "no point meets every SLO" in render_sweep_text(s)
    assert "every point missed ttft_p99" in rec["text"]


def test_a_sweep_without_slos_recommends_nothing():
    s = _summary([_point(0, 16, 5.0, 900.0)])
    s["points"][0]["slo"] = []
    assert recommend(s) is None and "recommended" not in render_sweep_text(s)


def test_the_page_draws_the_slo_line_and_the_recommended_point(tmp_path: Path):
    s = _summary([_point(i, *p) for i, p in enumerate(POINTS)])
    sections = sweep_sections(s, tmp_path, None)
    assert sections[0]["title"].startswith("Recommendation")
    assert "recommended: max_num_seqs=32" in sections[0]["rows"][0][1]
    table = next(x for x in sections if x["title"].startswith("Sweep points"))
    assert table["classes"][1] == "pass" and table["rows"][1][-1] == "meets (recommended)"
    ttft = next(x for x in sections if x.get("title") == "p99 TTFT against throughput")
    names = [x["name"] for x in ttft["series"]]
    assert "SLO ttft_p99 <= 2,000 ms" in names
    slo_line = next(x for x in ttft["series"] if x["name"].startswith("SLO"))
    assert {y for _, y in slo_line["points"]} == {2000.0}
    assert any(n.startswith("recommended: max_num_seqs=32") for n in names)


def test_a_sped_up_sweep_says_model_time_on_its_table_and_page(tmp_path: Path):
    """Issue 24: sweep figures at simulator speedup 10 carried no label anywhere."""
    from harness.analysis.html_sweep import render_sweep_html

    s = _summary([_point(i, *p) for i, p in enumerate(POINTS)])
    for p in s["points"]:
        p["runs"] = [{"result": "x.json", "speedup": 10.0}]
    assert "simulator speedup x10: times and rates are the model's" in render_sweep_text(s)
    page = render_sweep_html(s, tmp_path, None)
    assert "simulator speedup x10" in page and "(model time, speedup x10)" in page
    for p in s["points"]:
        p["runs"] = [{"result": "x.json", "speedup": 1.0}]
    assert "speedup" not in render_sweep_text(s)
