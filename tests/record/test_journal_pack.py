"""Journal v2 packing: the short-record path (plain Python) and the numpy path give the same
bytes, and every record round-trips, whatever the length and the delta sizes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.record import journal
from harness.record.journal import _pack, _pack_deltas, _pack_ints, decode_record, encode_record
from harness.record.records import Record

ints = st.integers(min_value=-(2**40), max_value=2**40)


@settings(max_examples=300, deadline=None)
@given(st.lists(ints, min_size=1, max_size=120), ints)
def test_small_and_numpy_packing_agree(values: list[int], intended: int) -> None:
    want: dict[str, str] = {}
    _pack(want, "k", np.asarray(values, dtype=np.int64))
    got: dict[str, str] = {}
    _pack_ints(got, "k", values)
    assert got == want
    deltas = np.diff(np.asarray(values, dtype=np.int64), prepend=intended)
    want = {}
    _pack(want, "c", deltas)
    got = {}
    _pack_deltas(got, values, intended)
    assert got == want


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=2**40),
    st.lists(st.integers(min_value=0, max_value=5 * 10**9), min_size=0, max_size=80),
    st.lists(st.sampled_from([1, 2, 16, 2**33]), min_size=80, max_size=80),
)
def test_records_round_trip(intended: int, gaps: list[int], tokens: list[int]) -> None:
    stamps = tuple(int(x) for x in np.cumsum([intended, *gaps])[1:])
    r = Record(
        3,
        0,
        intended,
        intended,
        None,
        stamps,
        tuple(tokens[: len(stamps)]),
        stamps[-1] if stamps else intended,
        200,
    )
    assert decode_record(encode_record(r)) == r


def test_small_threshold_is_exercised() -> None:
    assert 1 < journal.SMALL_ARRAY < 80  # both paths run in the property tests above
