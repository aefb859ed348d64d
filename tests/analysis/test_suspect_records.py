"""Issue 44: an answer that stray bytes followed on its kept-alive connection is suspect.

The client journals a `suspect` line naming the record (harness.client.keepalive, the engine);
the journal's vetting sets that record aside as it does an impossible one (counted, named, the
result not trustworthy), and the run's account still counts it as its request's one record. The
terminal report and the result page both say how many connections carried stray bytes and how
many answers were set aside for it. tests/hostile/test_keepalive.py runs the real case on both
clients; these tests hold the journal's side and the views, from the shipped journal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from harness.analysis.html_result import render_result_html
from harness.analysis.report_text import render_text
from harness.cli import main

SOURCE = Path(__file__).parents[1] / "data" / "results" / "v2.journal.jsonl"  # 27 records
WHY = "stray bytes on its connection after its answer: it may be another request's"


def rebuilt(folder: Path, suspects: list[dict[str, Any]]) -> dict[str, Any]:
    """The result rebuilt from the shipped journal with `suspects` lines added before its end."""
    docs = [orjson.loads(x) for x in SOURCE.read_bytes().splitlines()]
    docs[-1:-1] = suspects
    journal = folder / "r.journal.jsonl"
    journal.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    rc = main(["report", str(journal), "--out", str(folder / "r.json")])
    r: dict[str, Any] = json.loads((folder / "r.json").read_text())
    assert rc == (1 if r["trustworthy"] is False else 0)
    return r


def test_a_suspect_line_sets_its_record_aside_and_the_account_still_counts_it(
    tmp_path: Path, capsys: Any
) -> None:
    r = rebuilt(
        tmp_path,
        [
            {"t": "suspect", "seq": 14, "a": 0, "why": WHY},
            {"t": "suspect", "seq": 999, "a": 0, "why": WHY},  # no such record: nothing
            {"t": "suspect", "seq": "14", "why": WHY},  # not a sequence number: nothing
        ],
    )
    capsys.readouterr()
    assert r["trustworthy"] is False and r["complete"] is False
    assert r["impossible_records"] == {
        "count": 1,
        "checks": {"suspect": 1},
        "examples": [f"seq 14 attempt 0: {WHY} (suspect)"],
    }
    assert "the journal holds suspect records (1 suspect); 1 set aside" in r["stop_reason"]
    # set aside, not lost: the request still has its one record in the account ...
    assert r["accounting"]["missing"] == 0 and r["accounting"]["phases"][1]["recorded"] == 22
    # ... and no figure: the measured phase counts the other 21
    assert r["phases"][1]["requests"]["completed"] == 21
    assert "  NOT TRUSTWORTHY: suspect records in the journal (1 suspect), 1 set aside" in (
        render_text(r)
    )


def test_stray_bytes_are_shown_in_the_terminal_and_on_the_page(tmp_path: Path, capsys: Any) -> None:
    r = rebuilt(tmp_path, [{"t": "suspect", "seq": 14, "a": 0, "why": WHY}])
    capsys.readouterr()
    r["accounting"]["stale_connections"] = 2  # as a run's end line would have summed it
    line = (
        "stray bytes: 2 kept-alive connections carried responses nobody asked for (closed); "
        "1 answer taken on them just before set aside as suspect (possibly another request's)"
    )
    assert f"\n  {line}\n" in render_text(r)
    assert line in render_result_html(r)  # the page's subtitle (its data, as JSON)
    r["accounting"]["stale_connections"] = 0  # none met: nothing said
    assert "stray bytes:" not in render_text(r)
    assert "stray bytes:" not in render_result_html(r)


def test_stray_bytes_without_a_suspect_answer_say_why(tmp_path: Path, capsys: Any) -> None:
    r = rebuilt(tmp_path, [])
    capsys.readouterr()
    assert r["trustworthy"] is True
    r["accounting"]["stale_connections"] = 1
    assert (
        "  stray bytes: 1 kept-alive connection carried responses nobody asked for (closed); "
        "each answer before them was its connection's first, which nothing overtakes"
    ) in render_text(r)
