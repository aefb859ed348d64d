"""HTML reports: escaping, and a real headless browser (Debian's chromium) drawing every chart.

The browser tests skip only when chromium is missing AND the CI variable is unset: in CI
(`.ci/run` installs chromium) a missing browser is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from analysis_simruns import run, write

from harness.analysis.html import page
from harness.cli import main

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail(
            "chromium not found but CI is set: .ci/run must install it (apt-get install chromium)"
        )
    pytest.skip(
        "chromium not found (install Debian's chromium: apt-get install -y chromium); CI is not set"
    )


def load_page(html_path: Path, tmp: Path) -> tuple[str, str]:
    """(DOM after scripts ran, browser stderr with console messages)."""
    proc = subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            "--dump-dom",
            html_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def assert_drawn(dom: str, stderr: str, min_charts: int) -> None:
    console = [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    assert 'data-rendered="ok"' in dom, "the page script did not finish"
    assert "data-js-errors" not in dom
    points = [int(n) for n in re.findall(r'data-points="(\d+)"', dom)]
    assert len(points) >= min_charts
    assert all(n > 0 for n in points), points  # every chart drew data
    assert re.search(r'data-charts="(\d+)"', dom).group(1) == re.search(
        r'data-charts-drawn="(\d+)"', dom
    ).group(1)


def test_strings_from_results_cannot_break_out() -> None:
    evil = "</script><img src=x onerror=alert(1)>&\u2028"
    text = page(evil, [evil], [{"type": "note", "text": evil}])
    assert "<img" not in text and "</script><img" not in text
    assert "&lt;/script&gt;&lt;img" in text  # the <title> is HTML-escaped
    assert text.count("</script>") == 2  # only our own two script blocks end
    assert "innerHTML" not in text


@pytest.fixture(scope="module")
def result_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("html")
    s = write(tmp, rate=12.0, duration="2s", speedup=10.0)
    r = run(s, tmp / "r.json")
    doc = json.loads(r.read_text())
    doc["scenario_name"] = "cmp </script><b>bold</b>"  # a hostile name must show as text
    r.write_text(json.dumps(doc))
    return r


@pytest.mark.slow
def test_result_report_loads_in_a_browser_and_draws_every_chart(
    result_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(result_path), "--html", str(out)]) == 0
    text = out.read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", text)  # nothing fetched
    dom, err = load_page(out, tmp_path)
    assert_drawn(dom, err, min_charts=8)  # 4 percentile curves, 3 time series, the timeline
    assert "cmp &lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in dom and "<b>bold</b>" not in dom
    assert "Per-request timeline" in dom


@pytest.mark.slow
def test_multiturn_report_draws_ttft_by_turn_and_the_workload(tmp_path: Path) -> None:
    """A multi-turn run's report: the sessions table and TTFT-by-turn chart, and the workload
    views (arrival rate with sessions started, prompt and output length histograms)."""
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "multiturn.toml"
    r = run(
        scenario,
        tmp_path / "mt.json",
        sets=[
            "phases.0.requests=1",
            "phases.1.requests=4",
            "workload.conversation.turns=2",
            'workload.conversation.think_time="0.1s"',
            "sim.speedup=10",
        ],
    )
    out = tmp_path / "mt.html"
    assert main(["report", str(r), "--html", str(out)]) == 0
    dom, err = load_page(out, tmp_path)
    assert_drawn(dom, err, min_charts=12)
    for title in (
        "Sessions: 4 (8 requests",
        "TTFT by turn",
        "Workload: arrival rate",
        "Workload: prompt lengths",
        "Workload: output lengths",
        "sessions started",
    ):
        assert title in dom, title


@pytest.mark.slow
def test_compare_and_sweep_reports_draw(result_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.html"
    rc = main(
        [
            "compare",
            str(result_path),
            str(result_path),
            "--html",
            str(out),
            "--force",
            "--replicates",
            "200",
        ]
    )
    assert rc in (0, 3)  # a result against itself: never a regression (3: a p99 unjudged)
    dom, err = load_page(out, tmp_path)
    assert_drawn(dom, err, min_charts=1)
    # A sweep summary with one point, built from the same result.
    from harness.analysis.sweep_report import fold_repeats, point_metrics

    r = json.loads(result_path.read_text())
    m = point_metrics(r)
    summary = {
        "kind": "sweep_summary",
        "schema_version": 1,
        "sweep": {"name": "s<i>", "scenario": "x", "server_kind": "sim", "repeat": 1},
        "points": [
            {
                "id": "a/b",
                "index": 0,
                "setting": {},
                "load": {},
                "setting_label": "max_num_seqs=4",
                "load_label": "rate=1",
                "status": "done",
                "runs": [{"result": result_path.name, "metrics": m}],
                "metrics": fold_repeats([m]),
            }
        ],
    }
    sp = result_path.parent / "summary.json"
    sp.write_text(json.dumps(summary))
    out = tmp_path / "s.html"
    assert main(["report", str(sp), "--html", str(out)]) == 0
    dom, err = load_page(out, tmp_path)
    assert_drawn(dom, err, min_charts=5)
