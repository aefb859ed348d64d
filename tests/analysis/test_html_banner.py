"""Issue 44: a page whose figures are not to be trusted says so first, as loudly as the terminal.

A result that is not trustworthy (impossible records set aside from its journal), or incomplete,
gets a red banner above the title of its HTML page, in the terminal's words
(harness.analysis.html_trust); so does a compare page for each compared run of that kind and a
sweep page for its stop reason and each point not done. A sound, complete result has none. One
test draws the pages in chromium and checks the banner comes before the title.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest
from test_html import load_page

from harness.analysis.html_capacity import render_capacity_html
from harness.analysis.html_result import render_result_html
from harness.analysis.html_sweep import render_sweep_html
from harness.analysis.report_text import render_text
from harness.cli import main

SOURCE = Path(__file__).parents[1] / "data" / "results" / "v2.journal.jsonl"  # 27 records


def rebuilt(folder: Path, crafted: bool) -> Path:
    """A result rebuilt from the shipped journal; `crafted`: seq 5 sent 10^18 ns before t0."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = [orjson.loads(x) for x in SOURCE.read_bytes().splitlines()]
    if crafted:
        next(d for d in docs if d.get("t") == "rec" and d["seq"] == 5)["s"] = -(10**18)
    journal = folder / "r.journal.jsonl"
    journal.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    assert main(["report", str(journal), "--out", str(folder / "r.json")]) == (1 if crafted else 0)
    return folder / "r.json"


def banner(text: str) -> list[str]:
    """The banner's lines, as the page's HTML holds them (HTML-escaped); [] when there is none."""
    m = re.search(r'<div id="banner" class="banner" role="alert">(.*?)</div>', text)
    return re.findall(r"<p>(.*?)</p>", m.group(1)) if m else []


def terminal_line(r: dict) -> str:
    return next(x.strip() for x in render_text(r).splitlines() if "NOT TRUSTWORTHY" in x)


def test_an_untrustworthy_result_page_opens_with_the_terminals_words(tmp_path, capsys):
    r = json.loads(rebuilt(tmp_path, crafted=True).read_text())
    capsys.readouterr()
    text = render_result_html(r)
    lines = banner(text)
    assert lines[0] == terminal_line(r).replace("'", "&#x27;")  # the terminal's line, escaped
    assert "1 before_start), 1 set aside" in lines[0]
    assert lines[1].startswith("INCOMPLETE (") and "not trustworthy" in lines[1]
    assert text.index('id="banner"') < text.index('id="app"')  # above the title and figures
    assert re.search(r"<title>NOT TRUSTWORTHY: harness: ", text)


def test_a_sound_complete_result_page_has_no_banner(tmp_path, capsys):
    r = json.loads(rebuilt(tmp_path, crafted=False).read_text())
    assert r["trustworthy"] is True and r["complete"] is True
    text = render_result_html(r)
    assert banner(text) == [] and 'id="banner"' not in text and "NOT TRUSTWORTHY" not in text


def test_an_incomplete_result_page_says_why(tmp_path, capsys):
    r = json.loads(rebuilt(tmp_path, crafted=False).read_text())
    r["complete"], r["stop_reason"] = False, "interrupted (SIGINT)"
    assert banner(render_result_html(r)) == [
        "INCOMPLETE (interrupted (SIGINT)): the figures cover only what finished, not the run "
        "the scenario planned"
    ]


def test_a_compare_page_names_each_untrustworthy_run(tmp_path, capsys):
    sound, bad = rebuilt(tmp_path / "a", False), rebuilt(tmp_path / "b", True)
    out = tmp_path / "c.html"
    main(["compare", str(sound), str(bad), "--html", str(out), "--replicates", "50"])
    lines = banner(out.read_text())
    assert lines[0].startswith("NOT TRUSTWORTHY: a compared run")
    assert len(lines) == 2 and lines[1].startswith(f"candidate run {bad}: NOT TRUSTWORTHY")
    out2 = tmp_path / "same.html"
    main(["compare", str(sound), str(sound), "--html", str(out2), "--replicates", "50"])
    assert banner(out2.read_text()) == []


def test_compare_text_and_json_name_each_untrustworthy_run(tmp_path, capsys):
    """The terminal and the JSON say what the page's banner says (the runs are files)."""
    sound, bad = rebuilt(tmp_path / "a", False), rebuilt(tmp_path / "b", True)
    capsys.readouterr()
    main(["compare", str(sound), str(bad), "--replicates", "50"])
    text = capsys.readouterr().out.splitlines()
    assert (
        text[0] == "NOT TRUSTWORTHY: a compared run's figures are not to be trusted as they stand"
    )
    assert text[1].startswith(f"  candidate run {bad}: NOT TRUSTWORTHY: impossible records")
    assert "INCOMPLETE (" in text[1]
    main(["compare", str(sound), str(bad), "--replicates", "50", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    [row] = report["untrusted_runs"]
    assert row["side"] == "candidate" and row["run"] == str(bad)
    assert row["problem"].startswith("NOT TRUSTWORTHY: impossible records in the journal (1 ")
    main(["compare", str(sound), str(sound), "--replicates", "50", "--format", "json"])
    assert json.loads(capsys.readouterr().out)["untrusted_runs"] == []
    main(["compare", str(sound), str(sound), "--replicates", "50"])
    assert "NOT TRUSTWORTHY" not in capsys.readouterr().out


def summary(points: list[dict], stop_reason: str | None = None) -> dict:
    return {
        "kind": "sweep_summary",
        "schema_version": 1,
        "sweep": {"name": "s", "scenario": "x", "server_kind": "sim", "repeat": 1}
        | ({"stop_reason": stop_reason} if stop_reason else {}),
        "points": points,
    }


def point(pid: str, status: str, error: str | None = None) -> dict:
    p = {"id": pid, "index": 0, "setting": {}, "load": {}, "setting_label": "max_num_seqs=4"}
    p |= {"load_label": "rate=1", "status": status, "runs": [], "metrics": {}}
    return p | ({"error": error} if error else {})


def test_a_sweep_page_names_its_stop_reason_and_each_point_not_done(tmp_path):
    bad = "the journal holds impossible records (1 before_start); 1 set aside: this result is not trustworthy"
    s = summary([point("a", "failed", bad), point("b", "pending")], "interrupted (SIGTERM)")
    lines = banner(render_sweep_html(s, tmp_path, None))
    assert lines == [
        "NOT TRUSTWORTHY: a point&#x27;s journal held impossible records; it is left out",
        "INCOMPLETE sweep (interrupted (SIGTERM)): points not done have no figures",
        f"point a (max_num_seqs=4 / rate=1) failed: {bad}",
        "point b (max_num_seqs=4 / rate=1) pending",
    ]
    assert banner(render_sweep_html(summary([]), tmp_path, None)) == []


@pytest.mark.slow
def capacity_report(result: str, **flags: object) -> dict:
    """A capacity.json of one passing probe whose result file is `result`."""
    probe = {"kind": "probe", "rate": 4.0, "passed": True, "values": {}, "reason": ""}
    return {
        "scenario": "s.toml",
        "slos": [],
        "answer_requests_per_s": 4.0,
        "bracket": [4.0, None],
        "probes": [{**probe, "result": result}],
        "notes": [],
        **flags,
    }


def test_a_capacity_page_says_when_its_answer_or_a_run_is_not_to_be_trusted(tmp_path, capsys):
    bad = rebuilt(tmp_path / "bad", crafted=True)
    capsys.readouterr()
    lines = banner(render_capacity_html(capacity_report(bad.name), bad.parent))
    assert lines[0] == "NOT TRUSTWORTHY: a run of the search is not to be trusted as it stands"
    assert lines[1].startswith("run 1 (probe at 4 req/s): ")
    assert "NOT TRUSTWORTHY: impossible records in the journal (1 before_start)" in lines[1]
    good = rebuilt(tmp_path / "good", crafted=False)
    capsys.readouterr()
    text = render_capacity_html(capacity_report(good.name, lower_bound=True), good.parent)
    assert banner(text) == [] and "sustainable: at least 4 req/s" in text
    unreliable = banner(render_capacity_html(capacity_report(good.name, unreliable=True)))
    assert unreliable[0].startswith("NOT TRUSTWORTHY: UNRELIABLE answer: the harness itself")
    cut = capacity_report(good.name, interrupted="SIGINT", stop_reason="interrupted (SIGINT)")
    assert banner(render_capacity_html(cut, good.parent)) == [
        "INCOMPLETE search (SIGINT: interrupted (SIGINT)): no answer; only the runs that "
        "finished are shown"
    ]


def test_the_banner_is_drawn_above_the_title_in_a_browser(tmp_path, capsys):
    path = rebuilt(tmp_path / "b", crafted=True)
    out = tmp_path / "r.html"
    assert main(["report", str(path), "--html", str(out)]) == 1  # not trustworthy: exit 1
    dom, _ = load_page(out, tmp_path)
    assert 'data-rendered="ok"' in dom  # the page's script drew it all
    at = dom.index('id="banner"')
    assert at < dom.index("<h1") and "NOT TRUSTWORTHY: impossible records" in dom[at:]
