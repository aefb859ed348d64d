"""HDR round trips and merges; journal round trips and torn tails."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.record import hist
from harness.record.journal import JournalWriter, decode_record, encode_record, read_journal
from harness.record.records import ErrorKind, Record


def test_vectorised_recording_equals_one_by_one():
    v = np.random.default_rng(0).lognormal(9, 2.5, size=20_000)
    a = hist.histogram_of(v)
    b = hist.new_histogram()
    for x in np.clip(np.rint(v), 0, hist.HIGHEST_US).astype(np.int64):
        b.record_value(int(x))
    assert list(a.counts) == list(b.counts) and a.get_total_count() == b.get_total_count()
    assert a.get_max_value() == b.get_max_value() and a.get_min_value() == b.get_min_value()


def test_encode_decode_and_merge_equal_one_histogram():
    rng = np.random.default_rng(1)
    parts = [rng.exponential(5000, size=n) for n in (10, 1000, 5000)]
    merged = hist.merge([hist.encode(hist.histogram_of(p)) for p in parts])
    whole = hist.histogram_of(np.concatenate(parts))
    assert list(merged.counts) == list(whole.counts)
    assert hist.stats_ms(merged) == hist.stats_ms(whole)
    one = hist.decode(hist.encode(whole))
    assert one.get_value_at_percentile(99) == whole.get_value_at_percentile(99)


def test_values_out_of_range_are_clipped_not_dropped():
    h = hist.histogram_of(np.array([-5.0, 0.0, 1e13]))
    assert h.get_total_count() == 3 and h.get_max_value() >= hist.HIGHEST_US


records = st.builds(
    lambda seq, phase, intended, sent_off, gaps, toks, err, pt, ot, attempt: Record(
        seq,
        phase,
        intended,
        None if sent_off is None else intended + sent_off,
        None if sent_off is None else intended + sent_off + 3,
        tuple((intended + np.cumsum(gaps)).tolist()) if gaps else (),
        tuple(toks[: len(gaps)]) + (1,) * max(0, len(gaps) - len(toks)),
        intended + sum(gaps) + 1,
        200,
        err,
        "detail" if err else "",
        pt,
        ot,
        pt,
        ot,
        bool(toks),
        attempt,
        bool(err) and attempt == 0,
    ),
    st.integers(0, 10**6),
    st.integers(0, 5),
    st.integers(0, 10**12),
    st.one_of(st.none(), st.integers(0, 10**9)),
    st.lists(st.integers(0, 10**9), max_size=30),
    st.lists(st.integers(1, 5), max_size=30),
    st.one_of(st.none(), st.sampled_from(list(ErrorKind))),
    st.integers(0, 10**5),
    st.integers(0, 10**5),
    st.integers(0, 3),
)


@settings(max_examples=200)
@given(records)
def test_record_encoding_round_trips(r):
    import orjson

    assert decode_record(orjson.loads(orjson.dumps(encode_record(r)))) == r


def test_journal_round_trip_and_torn_tail(tmp_path):
    p = tmp_path / "j.journal.jsonl"
    w = JournalWriter(p, {"scenario": {}, "phases": []})
    recs = [
        Record(
            i, 0, i * 10, i * 10 + 1, i * 10 + 2, (i * 10 + 5, i * 10 + 9), (1, 2), i * 10 + 9, 200
        )
        for i in range(5)
    ]
    for r in recs:
        w.write_record(r)
    w.write_line({"t": "server_metrics", "x": 1})
    w.flush()
    w._f.close()  # as if the process died here: no end line
    with open(p, "ab") as f:  # a SIGKILL mid-write leaves a partial line
        f.write(b'{"t": "rec", "seq": 99, "ph"')
    j = read_journal(p)
    assert j.records == recs and j.end is None and j.torn_lines == 1
    assert j.events["server_metrics"] == [{"t": "server_metrics", "x": 1}]


def test_session_fields_round_trip_and_old_journals_read_without_them(tmp_path):
    """Multi-turn records carry their session id and turn index (journal keys sid, ti); records
    without them -- single-turn runs, journals written before sessions existed -- read as None/0."""
    r = Record(
        7,
        0,
        100,
        110,
        chunk_ns=(150, 160),
        chunk_tokens=(1, 1),
        end_ns=160,
        status=200,
        output_tokens=2,
        session_id=5,
        turn_index=2,
    )
    plain = Record(
        8, 0, 100, 110, chunk_ns=(150,), chunk_tokens=(1,), end_ns=150, status=200, output_tokens=1
    )
    assert decode_record(encode_record(r)) == r
    assert "sid" not in encode_record(plain) and decode_record(encode_record(plain)) == plain
    w = JournalWriter(tmp_path / "j.jsonl", {"phases": []})
    w.write_record(r)
    w.write_record(plain)
    w.close()
    c = read_journal(tmp_path / "j.jsonl").columns()
    assert c.session.tolist() == [5, -1] and c.turn.tolist() == [2, 0]
