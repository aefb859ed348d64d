"""Issue 44: a result rebuilt from a crafted journal never takes an impossible record as a
measurement. Every record is held against the plan its header claims and the run's window
(harness.record.journal_vet): one that fails a check is set aside, counted under the check it
failed and named; the result says `trustworthy: false` (and `complete: false`, with the reason),
the report prints a NOT TRUSTWORTHY line, and `report` exits 1. A sound journal passes."""

from __future__ import annotations

import binascii
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from harness import cli
from harness.analysis.result import build_result
from harness.record.journal import read_journal

SOURCE = Path(__file__).parents[1] / "data" / "results" / "v2.journal.jsonl"  # 27 records
VICTIM = b"the victim's own bytes\n"


def lines() -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in SOURCE.read_bytes().splitlines()]


def rec(docs: list[dict[str, Any]], seq: int) -> dict[str, Any]:
    return next(d for d in docs if d.get("t") == "rec" and d["seq"] == seq)


def first_token(d: dict[str, Any]) -> int:
    deltas = np.frombuffer(binascii.a2b_base64(d["c4"]), dtype="<i4")
    return int(d["i"] + deltas[0])


def craft(tmp: Path, docs: list[dict[str, Any]]) -> Path:
    p = tmp / "crafted.journal.jsonl"
    p.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    return p


def report(tmp: Path, journal: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict]:
    (tmp / "victim").write_bytes(VICTIM)
    (tmp / "r.json.tmp").symlink_to(tmp / "victim")  # a planted link: never written through
    rc = cli.main(["report", str(journal), "--out", str(tmp / "r.json")])
    out = capsys.readouterr().out
    assert (tmp / "victim").read_bytes() == VICTIM and not (tmp / "r.json").is_symlink()
    return rc, out, orjson.loads((tmp / "r.json").read_bytes())


def sent_before_t0(docs: list[dict[str, Any]]) -> None:
    for seq in (5, 6, 7, 8):  # "0 sent, 4 completed", TTFT 10^12 ms, before this check
        rec(docs, seq)["s"] = -(10**18)


def negative_ttft(docs: list[dict[str, Any]]) -> None:
    d = rec(docs, 10)
    d["s"] = d["h"] = first_token(d) + 1_000  # sent and headers after the first token
    d["e"] = max(d["e"], d["s"])


def no_such_phase(docs: list[dict[str, Any]]) -> None:
    rec(docs, 11)["ph"] = 7  # the plan has phases 0 and 1: once dropped without a word


def tokens_backwards(docs: list[dict[str, Any]]) -> None:
    d = rec(docs, 12)
    deltas = np.frombuffer(binascii.a2b_base64(d["c4"]), dtype="<i4").copy()
    deltas[2] = -5_000_000  # the third token 5 ms before the second
    d["c4"] = binascii.b2a_base64(deltas.tobytes(), newline=False).decode()


def after_the_end(docs: list[dict[str, Any]]) -> None:
    rec(docs, 13)["e"] = 10**15  # ended 11 days after a 3 s run


def one_request_too_many(docs: list[dict[str, Any]]) -> None:
    extra = dict(rec(docs, 26), seq=27)  # a 23rd request in a phase that planned 22
    docs.insert(docs.index(rec(docs, 26)) + 1, extra)


CASES = [
    (sent_before_t0, 4, {"before_start": 4}, "seq 5 attempt 0: a stamp before the run's start"),
    (
        negative_ttft,
        1,
        {"first_token_before_sent": 1},
        "seq 10 attempt 0: first token before the request was sent (negative TTFT)",
    ),
    (no_such_phase, 1, {"phase": 1}, "seq 11 attempt 0: its phase is not one of the plan's"),
    (
        tokens_backwards,
        1,
        {"tokens_out_of_order": 1},
        "seq 12 attempt 0: a token stamp earlier than the one before it",
    ),
    (after_the_end, 1, {"after_end": 1}, "seq 13 attempt 0: a stamp after the run's end"),
]


@pytest.mark.parametrize(("crafting", "aside", "checks", "example"), CASES)
def test_impossible_records_are_set_aside_counted_and_named(
    tmp_path, capsys, crafting, aside, checks, example
):
    docs = lines()
    crafting(docs)
    rc, out, r = report(tmp_path, craft(tmp_path, docs), capsys)
    assert rc == 1
    assert r["trustworthy"] is False and r["complete"] is False
    assert r["impossible_records"]["count"] == aside
    assert r["impossible_records"]["checks"] == checks
    assert r["impossible_records"]["examples"][0] == f"{example} ({next(iter(checks))})"
    assert "this result is not trustworthy" in r["stop_reason"]
    assert "  NOT TRUSTWORTHY: impossible records in the journal (" in out
    ph = r["phases"][1]  # the measured phase: 22 planned, the impossible ones not among them
    assert ph["requests"]["completed"] == 22 - aside
    ttft = r["summary"]["latency_ms"]["ttft"]  # no figure from an impossible stamp
    assert ttft["count"] == 22 - aside and ttft["p50"] > 0 and ttft["max"] < 1_000


def test_more_requests_than_planned_are_counted_not_guessed(tmp_path, capsys):
    docs = lines()
    one_request_too_many(docs)
    rc, out, r = report(tmp_path, craft(tmp_path, docs), capsys)
    assert rc == 1 and r["trustworthy"] is False
    assert r["impossible_records"] == {
        "count": 0,
        "checks": {"more_than_planned": 1},
        "examples": [],
    }
    assert "NOT TRUSTWORTHY" in out


def test_every_case_at_once_names_each_check(tmp_path, capsys):
    docs = lines()
    for crafting, *_ in CASES:
        crafting(docs)
    rc, _, r = report(tmp_path, craft(tmp_path, docs), capsys)
    assert rc == 1
    assert r["impossible_records"]["count"] == 8
    assert r["impossible_records"]["checks"] == {
        "phase": 1,
        "before_start": 4,
        "after_end": 1,
        "first_token_before_sent": 1,
        "tokens_out_of_order": 1,
    }
    assert len(r["impossible_records"]["examples"]) == 5  # the first five, by (seq, attempt)


def test_a_sound_journal_is_trustworthy_and_a_second_build_agrees(tmp_path, capsys):
    rc, out, r = report(tmp_path, SOURCE, capsys)
    assert rc == 0 and r["trustworthy"] is True and "NOT TRUSTWORTHY" not in out
    assert r["impossible_records"] == {"count": 0, "checks": {}, "examples": []}
    docs = lines()
    no_such_phase(docs)
    j = read_journal(craft(tmp_path, docs))
    first, again = build_result(j), build_result(j)  # the journal is vetted once
    assert first["impossible_records"] == again["impossible_records"]
    assert again["trustworthy"] is False


# --- every reader of a journal sees the records the result was built from ---------------------
# read_journal vets once (harness.record.journal_vet), so exports, Result.to_pandas and compare's
# recomputation from the journal never see a record the result set aside.


def crafted_result(tmp: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict]:
    """r.json rebuilt from a journal with sent_before_t0 (seq 5-8 set aside), the journal
    beside it (r.journal.jsonl), as a run leaves them."""
    docs = lines()
    sent_before_t0(docs)
    journal = tmp / "r.journal.jsonl"
    journal.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    assert cli.main(["report", str(journal), "--out", str(tmp / "r.json")]) == 1
    capsys.readouterr()
    return tmp / "r.json", orjson.loads((tmp / "r.json").read_bytes())


ASIDE = {5, 6, 7, 8}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_rows_are_the_results_records_and_say_what_was_set_aside(tmp_path, capsys, fmt):
    path, r = crafted_result(tmp_path, capsys)
    out = tmp_path / f"rows.{fmt}"
    assert cli.main(["export", str(path), "--format", fmt, "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert f"{27 - 4} rows" in line and "4 set aside: this result is not trustworthy" in line
    if fmt == "csv":
        import csv

        rows = list(csv.DictReader(out.read_text().splitlines()))
    else:
        rows = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    seqs = {int(row["seq"]) for row in rows}
    assert not seqs & ASIDE and len(seqs) == 27 - 4
    ttft = [float(row["ttft_ms"]) for row in rows if row["ttft_ms"] not in ("", None)]
    assert max(ttft) < 1_000  # none of the 10^12 ms figures of the impossible records


def test_a_parquet_export_keeps_what_was_set_aside_in_its_metadata(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    path, r = crafted_result(tmp_path, capsys)
    out = tmp_path / "rows.parquet"
    assert cli.main(["export", str(path), "--format", "parquet", "--out", str(out)]) == 0
    table = pq.read_table(out)
    assert not set(table.column("seq").to_pylist()) & ASIDE and table.num_rows == 27 - 4
    meta = table.schema.metadata
    assert orjson.loads(meta[b"harness.impossible_records"]) == r["impossible_records"]


def test_vllm_export_counts_only_the_results_records_and_says_untrustworthy(tmp_path, capsys):
    path, r = crafted_result(tmp_path, capsys)
    out = tmp_path / "vllm.json"
    assert cli.main(["export", str(path), "--format", "vllm", "--out", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    assert doc["num_prompts"] == 22 - 4 and doc["completed"] == 22 - 4
    assert doc["trustworthy"] is False
    assert doc["impossible_records"] == r["impossible_records"]
    assert max(doc["ttfts"]) < 1.0 and min(doc["start_times"]) >= 0


def test_to_pandas_rows_are_the_results_records_and_attrs_say_what_was_set_aside(tmp_path, capsys):
    pytest.importorskip("pandas")
    import harness

    path, r = crafted_result(tmp_path, capsys)
    df = harness.load_result(str(path)).to_pandas()
    assert len(df) == 27 - 4 and not set(df["seq"]) & ASIDE
    assert df.attrs["impossible_records"] == r["impossible_records"]
    assert df["ttft_ms"].max() < 1_000
    sound = tmp_path / "sound"
    sound.mkdir()
    (sound / "r.journal.jsonl").write_bytes(SOURCE.read_bytes())
    assert cli.main(["report", str(sound / "r.journal.jsonl"), "--out", str(sound / "r.json")]) == 0
    assert (
        harness.load_result(str(sound / "r.json")).to_pandas().attrs["impossible_records"] is None
    )


def test_compare_recomputes_from_the_results_records_only(tmp_path, capsys):
    from harness.analysis.compare import _journal_side

    path, r = crafted_result(tmp_path, capsys)
    side = _journal_side({**r, "_path": str(path)})
    assert side is not None and side.source == "journal"
    assert side.n == r["phases"][1]["requests"]["sent"] == 22 - 4  # the measured phase's
    ttft = side.values["ttft"]
    assert np.nanmax(ttft) < 1_000 and len(ttft) == 22 - 4
