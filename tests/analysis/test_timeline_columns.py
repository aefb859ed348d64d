"""The HTML timeline, built from the journal's columns, draws the bars the per-Record code drew."""

from __future__ import annotations

import math
import random

from harness.analysis import html_result as html_mod  # the result page: its timeline sampling
from harness.record.journal import JournalWriter
from harness.record.records import ErrorKind, Record


def _bars_from_records(recs: list[Record]) -> list[list[object]]:
    """The previous implementation, on Records (ties in intended broken by (seq, attempt))."""
    recs = sorted(
        (r for r in recs if not r.retried), key=lambda r: (r.intended_ns, r.seq, r.attempt)
    )
    step = max(1, math.ceil(len(recs) / html_mod.TIMELINE_MAX_REQUESTS))
    out = []
    for r in recs[::step]:
        s, f, last = r.sent_ns, r.first_token_ns, r.last_token_ns
        end = r.end_ns if r.end_ns is not None else (last or s or r.intended_ns)
        out.append(
            [
                r.seq,
                r.intended_ns / 1e9,
                None if s is None else s / 1e9,
                None if f is None else f / 1e9,
                None if last is None else last / 1e9,
                end / 1e9,
                r.ok,
            ]
        )
    return out


def _records(n: int, rng: random.Random) -> list[Record]:
    recs = []
    for seq in range(n):
        intended = rng.randrange(0, 5_000_000_000, 1_000_000)  # ties on purpose
        kind = rng.random()
        if kind < 0.1:  # never sent
            recs.append(
                Record(seq, 0, intended, None, end_ns=intended + 5, error=ErrorKind.NOT_SENT)
            )
            continue
        sent = intended + rng.randrange(0, 3_000_000)
        chunks = tuple(
            sorted(sent + rng.randrange(1, 900_000_000) for _ in range(rng.randrange(0, 6)))
        )
        if kind < 0.2:  # failed and retried, then a second attempt
            recs.append(
                Record(
                    seq,
                    0,
                    intended,
                    sent,
                    end_ns=sent + 7,
                    status=503,
                    error=ErrorKind.HTTP_STATUS,
                    retried=True,
                )
            )
            recs.append(
                Record(
                    seq,
                    0,
                    intended,
                    sent + 9,
                    None,
                    chunks,
                    (1,) * len(chunks),
                    (chunks[-1] if chunks else sent + 10),
                    200,
                    attempt=1,
                )
            )
        elif kind < 0.3:  # cut stream
            recs.append(
                Record(
                    seq,
                    0,
                    intended,
                    sent,
                    None,
                    chunks,
                    (1,) * len(chunks),
                    sent + 1_000_000_000,
                    200,
                    ErrorKind.STREAM_CUT,
                )
            )
        else:
            recs.append(
                Record(
                    seq,
                    0,
                    intended,
                    sent,
                    None,
                    chunks,
                    (2,) * len(chunks),
                    chunks[-1] if chunks else sent + 1,
                    200,
                )
            )
    rng.shuffle(recs)  # worker runs journal in arrival order
    return recs


def test_timeline_from_columns_equals_records(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(html_mod, "TIMELINE_MAX_REQUESTS", 37)  # sampling with a step > 1
    for n in (0, 5, 400):
        recs = _records(n, random.Random(n))
        path = tmp_path / f"j{n}.journal.jsonl"
        w = JournalWriter(path, {"scenario": {"name": "t"}})
        for r in recs:
            w.write_record(r)
        w.close({"end_ns": 10_000_000_000})  # after every record: none is impossible
        got = html_mod.timeline({"files": {"journal": str(path)}}, None)
        if not n:
            assert got is None
            continue
        assert got is not None and got["bars"] == _bars_from_records(recs)
        assert f"of {sum(1 for r in recs if not r.retried)} requests" in got["title"]
