"""Journal version 2 (base64 stamp arrays) and the columnar reader: `read_journal(p).columns()`
equals `Columns.of(records)` for any records in any order, version-1 lines included."""

from __future__ import annotations

import dataclasses

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.record.journal import (
    JOURNAL_VERSION,
    JournalWriter,
    encode_record,
    read_journal,
    read_journal_as_written,
)
from harness.record.metrics import Columns
from harness.record.records import ErrorKind, Record


def v1_line(r: Record) -> bytes:
    """The version-1 encoding: stamp deltas and tokens as JSON lists."""
    d = encode_record(r)
    for key in ("c", "k"):
        for suffix in ("4", "8"):
            d.pop(key + suffix, None)
    if r.chunk_ns:
        d["c"] = np.diff(np.asarray(r.chunk_ns, dtype=np.int64), prepend=r.intended_ns).tolist()
        if any(k != 1 for k in r.chunk_tokens):
            d["k"] = list(r.chunk_tokens)
    return orjson.dumps(d) + b"\n"


def assert_columns_equal(a: Columns, b: Columns) -> None:
    for f in dataclasses.fields(Columns):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


gap = st.one_of(st.integers(0, 10**7), st.integers(2**31 - 5, 2**33))  # int32 and int64 deltas
records = st.lists(
    st.builds(
        lambda seq, attempt, phase, intended, sent_off, gaps, toks, err, status: Record(
            seq,
            phase,
            intended,
            None if sent_off is None else intended + sent_off,
            None,
            tuple((intended + np.cumsum(gaps)).tolist()) if gaps else (),
            tuple(toks[: len(gaps)]) + (1,) * max(0, len(gaps) - len(toks)),
            intended + sum(gaps) + 1,
            status,
            err,
            "x" if err else "",
            3,
            len(gaps),
            3,
            4,
            bool(toks),
            attempt,
            bool(err) and attempt == 0,
        ),
        st.integers(0, 50),
        st.integers(0, 2),
        st.integers(0, 2),
        st.integers(0, 10**12),
        st.one_of(st.none(), st.integers(0, 10**9)),
        st.lists(gap, max_size=20),
        st.lists(st.integers(1, 5), max_size=20),
        st.one_of(st.none(), st.sampled_from(list(ErrorKind))),
        st.one_of(st.none(), st.sampled_from([200, 429, 500])),
    ),
    max_size=25,
    unique_by=lambda r: (
        r.seq,
        r.attempt,
    ),  # a journal holds each once (read_journal: repeats dropped)
)


@settings(max_examples=150, deadline=None)
@given(records, st.lists(st.booleans(), max_size=25))
def test_columns_from_journal_equal_columns_of_records(tmp_path_factory, recs, as_v1):
    p = tmp_path_factory.mktemp("j") / "r.journal.jsonl"
    w = JournalWriter(p, {"scenario": {}, "phases": []})
    for i, r in enumerate(recs):  # journal order is arrival order, not (seq, attempt)
        if i < len(as_v1) and as_v1[i]:
            w.write_encoded(v1_line(r))
        else:
            w.write_record(r)
    w.close({"end_ns": 1})
    j = read_journal_as_written(p)  # the format only: these records need not be possible
    assert j.header["version"] == JOURNAL_VERSION and j.torn_lines == 0
    assert j.records == recs
    assert_columns_equal(j.columns(), Columns.of(recs))


def test_version_2_stores_base64_arrays_and_falls_back_to_int64():
    r = Record(1, 0, 100, 110, None, (200, 300, 300 + 2**31 + 7), (1, 2, 1), 400, 200)
    d = encode_record(r)
    assert "c8" in d and "k4" in d and "c" not in d and "c4" not in d
    small = encode_record(dataclasses.replace(r, chunk_ns=(200, 300), chunk_tokens=(1, 1)))
    assert "c4" in small and "k4" not in small and "k8" not in small


def test_damaged_stamp_arrays_are_counted_as_torn(tmp_path):
    p = tmp_path / "r.journal.jsonl"
    w = JournalWriter(p, {"scenario": {}, "phases": []})
    good = Record(1, 0, 100, 110, None, (200, 300), (1, 1), 400, 200)
    w.write_record(good)
    bad = encode_record(dataclasses.replace(good, seq=2))
    w.write_encoded(orjson.dumps({**bad, "c4": "AAA"}) + b"\n")  # not whole int32s
    w.write_encoded(orjson.dumps({**bad, "c4": "!!!!"}) + b"\n")  # not base64
    w.write_encoded(orjson.dumps({**bad, "k4": bad["c4"][:-8] + "===="}) + b"\n")
    w.write_encoded(orjson.dumps({**bad, "seq": "2"}) + b"\n")  # not an integer
    w.write_encoded(orjson.dumps({**bad, "err": "nonsense"}) + b"\n")
    w.close()
    j = read_journal(p)
    assert j.records == [good] and j.torn_lines == 5
    assert j.columns().n == 1


def test_find_journal_prefers_the_sibling_then_the_recorded_path(tmp_path):
    from harness.record.journal import find_journal, journal_path_for

    result_path = tmp_path / "moved" / "r.json"
    result_path.parent.mkdir()
    recorded = tmp_path / "old" / "r.journal.jsonl"
    recorded.parent.mkdir()
    doc = {"files": {"journal": str(recorded)}}
    assert journal_path_for(result_path) == result_path.with_name("r.journal.jsonl")
    assert find_journal(doc, result_path) is None  # neither exists
    recorded.write_text("")
    assert find_journal(doc, result_path) == recorded  # only the recorded one
    journal_path_for(result_path).write_text("")
    assert find_journal(doc, result_path) == journal_path_for(result_path)  # the sibling wins
    assert find_journal({}, None) is None
