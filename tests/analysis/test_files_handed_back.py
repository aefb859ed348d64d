"""Files users hand back (docs/security.md, "Files handed back"): real results of both schema
versions work in `report`, `compare` and `export`; a hand-edited one that fails the shipped
schema is one line naming the file and the path (exit 2), in each of them; a journal rebuild
reads a repeated line once and refuses a damaged header in one line. No server is started."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import cli
from harness.analysis.result import load_result, rebuild_result
from harness.record.journal import JournalError, read_journal

DATA = Path(__file__).parents[1] / "data" / "results"
RUNS = ("v1-c250271", "v2")


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """The real results and journals, copied (a rebuild and an export write beside them)."""
    for name in RUNS:
        for suffix in (".json", ".journal.jsonl"):
            shutil.copy(DATA / (name + suffix), tmp_path / (name + suffix))
    return tmp_path


def cli_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line(rc: int, err: str, *words: str) -> None:
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize("name", RUNS)
def test_real_results_work_in_every_view(runs, name, capsys):
    r = runs / f"{name}.json"
    assert load_result(r)["schema_version"] == (1 if name.startswith("v1") else 2)
    rc, out, _ = cli_run(["report", str(r)], capsys)
    assert rc == 0 and "TTFT" in out
    rc, out, _ = cli_run(["compare", str(r), str(runs / "v2.json")], capsys)
    assert rc in (0, 1, 3) and "overall:" in out  # 3: INCONCLUSIVE, not a crash (2)
    rc, out, _ = cli_run(
        ["export", str(r), "--format", "csv", "--out", str(runs / "x.csv")], capsys
    )
    assert rc == 0 and (runs / "x.csv").read_text().count("\n") > 10


@pytest.mark.parametrize("name", RUNS)
def test_a_rebuilt_result_equals_the_run_s(runs, name):
    """`report JOURNAL` of an untouched journal gives the counts the run's own result holds
    (version 1's: this version counts retries apart too)."""
    _, rebuilt = rebuild_result(runs / f"{name}.journal.jsonl")
    kept = load_result(runs / f"{name}.json")
    assert kept["summary"]["requests"].items() <= rebuilt["summary"]["requests"].items()
    assert rebuilt["files"]["journal_duplicate_lines"] == 0


# (what the hand edit does, the path named). The first three crashed report/compare/export.
EDITS = [
    (lambda r: r.update(target=None), "target"),
    (lambda r: r.update(phases=None), "phases"),
    (lambda r: r.pop("complete"), "complete"),
    (lambda r: r["summary"].update(latency_ms=[]), "summary.latency_ms"),
    (lambda r: r["phases"][0]["requests"].update(completed="30"), "phases.0.requests.completed"),
    (lambda r: r["summary"]["tokens"].pop("prompt_total"), "summary.tokens.prompt_total"),
    (lambda r: r["client"].update(send_lag_ms=None), "client.send_lag_ms"),
    (lambda r: r.update(histograms={"unit": "us"}), "histograms.highest"),
]


@pytest.mark.parametrize(("edit", "path"), EDITS, ids=[p for _, p in EDITS])
@pytest.mark.parametrize("command", ["report", "compare", "export"])
def test_a_hand_edited_result_is_one_line_in_every_command(runs, edit, path, command, capsys):
    doc: dict[str, Any] = orjson.loads((runs / "v2.json").read_bytes())
    edit(doc)
    bad = runs / "edited.json"
    bad.write_bytes(orjson.dumps(doc))
    shutil.copy(runs / "v2.journal.jsonl", runs / "edited.journal.jsonl")
    argv = {
        "report": ["report", str(bad)],
        "compare": ["compare", str(runs / "v2.json"), str(bad)],
        "export": ["export", str(bad), "--format", "csv", "--out", str(runs / "x.csv")],
    }[command]
    rc, _, err = cli_run(argv, capsys)
    assert_one_line(rc, err, f"{bad}: {path}: ", "result schema")


def _lines(name: str) -> list[bytes]:
    return (DATA / f"{name}.journal.jsonl").read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("name", RUNS)
def test_a_journal_with_repeated_lines_rebuilds_the_same_run(tmp_path, name, capsys):
    """Every record line written twice (a journal copied into itself, minus its header): the
    rebuild counts each request once and says how many lines it read once."""
    lines = _lines(name)
    body = [ln for ln in lines[1:] if b'"t":"end"' not in ln]
    end = [ln for ln in lines if b'"t":"end"' in ln]
    twice = tmp_path / "twice.journal.jsonl"
    twice.write_bytes(b"".join([lines[0], *body, *body, *end]))
    _, once = rebuild_result(DATA / f"{name}.journal.jsonl")
    _, r = rebuild_result(twice)
    assert r["summary"]["requests"] == once["summary"]["requests"]
    assert r["files"]["journal_duplicate_lines"] == len(body)
    rc, out, _ = cli_run(["report", str(twice)], capsys)
    assert rc == 0
    sent = once["summary"]["requests"]["sent"]
    assert f"{sent} sent" in out and f"{2 * sent} sent" not in out
    assert f"journal: 0 damaged lines skipped, {len(body)} repeated lines read once" in out


def test_a_repeated_record_keeps_its_first_line(tmp_path):
    lines = _lines("v2")
    rec = next(i for i, ln in enumerate(lines) if b'"t":"rec"' in ln)
    changed = orjson.loads(lines[rec])
    changed["ot"] = 10**6  # the same (seq, attempt) again, claiming something else
    p = tmp_path / "j.journal.jsonl"
    p.write_bytes(b"".join([*lines[: rec + 1], orjson.dumps(changed) + b"\n", *lines[rec + 1 :]]))
    j = read_journal(p)
    assert j.duplicate_lines == 1 and 10**6 not in j.columns().output_tokens.tolist()


# (how the header is damaged, the words of the one line)
HEADERS = [
    (lambda h: h.pop("phases"), ":1: header: phases: is missing"),
    (lambda h: h.update(target=None), ":1: header: target: expected an object, got NoneType"),
    (
        lambda h: h["phases"][0].update(warmup="no"),
        ":1: header: phases.0.warmup: expected true or false",
    ),
    (lambda h: h.update(phases=[]), ":1: header: phases: is empty"),
    (lambda h: h["slo"].append({"name": "x"}), ":1: header: slo.1.metric: is missing"),
    (lambda h: h["target"].pop("base_url"), ": target.base_url: is missing (the result rebuilt"),
]


@pytest.mark.parametrize(("damage", "words"), HEADERS, ids=[w for _, w in HEADERS])
def test_a_damaged_header_is_one_line(tmp_path, damage, words, capsys):
    lines = _lines("v2")
    header = orjson.loads(lines[0])
    damage(header)
    p = tmp_path / "d.journal.jsonl"
    p.write_bytes(b"".join([orjson.dumps(header) + b"\n", *lines[1:]]))
    for argv in (
        ["report", str(p)],
        ["export", str(p), "--format", "csv", "--out", str(tmp_path / "x.csv")],
    ):
        rc, _, err = cli_run(argv, capsys)
        assert_one_line(rc, err, str(p), words)


def test_no_header_and_two_headers_are_one_line(tmp_path, capsys):
    lines = _lines("v2")
    torn = tmp_path / "torn.journal.jsonl"
    torn.write_bytes(lines[0][:40] + b"\n" + b"".join(lines[1:]))  # the header line cut
    rc, _, err = cli_run(["report", str(torn)], capsys)
    assert_one_line(rc, err, str(torn), "no header line")
    other = orjson.loads(_lines("v1-c250271")[0])
    joined = tmp_path / "joined.journal.jsonl"
    joined.write_bytes(b"".join([*lines, orjson.dumps(other) + b"\n"]))
    with pytest.raises(JournalError, match=rf":{len(lines) + 1}: a second, different header"):
        read_journal(joined)
    rc, _, err = cli_run(["report", str(joined)], capsys)
    assert_one_line(rc, err, "two journals joined")


def test_a_damaged_end_line_is_skipped_and_counted(tmp_path):
    lines = _lines("v2")
    end = orjson.loads(lines[-1])
    assert end["t"] == "end"
    end["phase_starts_ns"] = ["soon"]
    p = tmp_path / "e.journal.jsonl"
    p.write_bytes(b"".join([*lines[:-1], orjson.dumps(end) + b"\n"]))
    _, r = rebuild_result(p)
    assert r["files"]["journal_torn_lines"] == 1 and r["complete"] is False
