"""Records a run could not have produced, found in a journal before a result is built from it.

A journal is a file users hand back (`report X.journal.jsonl`), so every record is held against
the plan its header claims and the run's window its end line gives: a record that fails a check
is set aside (no figure is computed from it), counted under the first check it failed, and the
result built from the journal says it is not trustworthy (`trustworthy: false`,
`impossible_records`, harness.analysis.result). The checks, in the order they are tried:

  phase                  its phase is not one of the plan's phases (a header without phases,
                         which no result is built from: a negative phase)
  seq                    a negative sequence number or attempt
  stamps_without_send    headers or tokens stamped for a request never sent
  before_start           a stamp (intended, sent, headers, token, end) before the run's start
  after_end              a stamp after the run's end (end line's end_ns; a killed run: unchecked)
  sent_after_headers     the response's headers before its request was sent
  first_token_before_sent / first_token_before_headers / first_token_before_intended
  tokens_out_of_order    a token stamp earlier than the one before it
  end_before_last_token  the request ended before its last token arrived
  negative_token_count   a chunk carrying a negative number of tokens
  suspect                named by a `suspect` line: stray bytes followed its answer on its
                         kept-alive connection, so that answer may be another request's
                         (harness.client.keepalive); possible, but not to be vouched for

and, per phase, `more_than_planned`: more first attempts than the phase planned (counted, not set
aside: which of them is extra cannot be told). A sound run passes every check: the engine stamps
sent <= headers <= tokens <= end on one monotonic clock, inside [0, end_ns]. A record set aside
is still its request's one record: the run's account (harness.analysis.accounting) counts it
(`Vetting.aside`), no figure does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.record.journal_columns import ColumnBuilder
from harness.record.journal_data import Journal
from harness.record.metrics import Columns

CHECKS: dict[str, str] = {
    "phase": "its phase is not one of the plan's",
    "seq": "a negative sequence number or attempt",
    "stamps_without_send": "headers or tokens of a request never sent",
    "before_start": "a stamp before the run's start",
    "after_end": "a stamp after the run's end",
    "sent_after_headers": "headers before the request was sent",
    "first_token_before_sent": "first token before the request was sent (negative TTFT)",
    "first_token_before_headers": "first token before the response's headers",
    "first_token_before_intended": "first token before its planned send time",
    "tokens_out_of_order": "a token stamp earlier than the one before it",
    "end_before_last_token": "the request ended before its last token",
    "negative_token_count": "a chunk with a negative token count",
    "suspect": "stray bytes on its connection after its answer: it may be another request's",
    "more_than_planned": "more requests in a phase than it planned",
}
EXAMPLES = 5  # impossible records named in the result, the first ones in (seq, attempt) order
CLOCK_SKEW_NS = 1_000_000_000  # Ray runs: workers' stamps are mapped across machines' clocks
NONE = -1


@dataclass
class Vetting:
    """What the checks found: records set aside per check, and the first few named."""

    set_aside: int = 0
    by_check: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    aside: list[tuple[int, int]] = field(default_factory=list)  # (phase, seq) of final ones

    @property
    def trustworthy(self) -> bool:
        return not self.by_check

    def block(self) -> dict[str, Any]:
        """The result's `impossible_records`."""
        return {"count": self.set_aside, "checks": dict(self.by_check), "examples": self.examples}

    def sentence(self) -> str | None:
        """One line for stop_reason and the report; None when every record passed."""
        if self.trustworthy:
            return None
        parts = ", ".join(f"{n} {name}" for name, n in self.by_check.items())
        return (
            f"the journal holds {set_aside_kind(self.by_check)} ({parts}); {self.set_aside} set "
            "aside: this result is not trustworthy"
        )


def set_aside_kind(checks: dict[str, int]) -> str:
    """What the records a vetting set aside are, by its checks: "impossible records", "suspect
    records" (only `suspect`), or "impossible and suspect records"."""
    suspect = "suspect" in checks
    if suspect and len(checks) == 1:
        return "suspect records"
    return "impossible and suspect records" if suspect else "impossible records"


def _headers_and_attempts(j: Journal, c: Columns) -> tuple[np.ndarray, np.ndarray]:
    """headers stamp (-1: none) and attempt per row of `j.columns()` ((seq, attempt) order)."""
    rows = j._builder.rows
    if j._records is not None and not rows:
        recs = sorted(j._records, key=lambda r: (r.seq, r.attempt))
        h = [NONE if r.headers_ns is None else r.headers_ns for r in recs]
        a = [r.attempt for r in recs]
    else:
        seq = np.array([d["seq"] for d in rows], dtype=np.int64)
        att = np.array([d.get("a", 0) for d in rows], dtype=np.int64)
        order = np.lexsort((att, seq)) if len(rows) else np.zeros(0, dtype=np.int64)
        hs = [rows[i].get("h") for i in order.tolist()]
        h = [NONE if v is None else v for v in hs]
        a = att[order].tolist()
    return np.array(h, dtype=np.int64).reshape(c.n), np.array(a, dtype=np.int64).reshape(c.n)


def _suspects(j: Journal, c: Columns, attempt: np.ndarray) -> np.ndarray:
    """The rows named by the journal's `suspect` lines (harness.client.keepalive)."""
    named = {
        (d.get("seq"), d.get("a", 0))
        for d in j.events.get("suspect") or []
        if type(d.get("seq")) is int and type(d.get("a", 0)) is int
    }
    if not named:
        return np.zeros(c.n, dtype=bool)
    keys = zip(c.seq.tolist(), attempt.tolist(), strict=True)
    return np.fromiter((k in named for k in keys), dtype=bool, count=c.n)


def _failures(j: Journal, c: Columns, headers: np.ndarray, attempt: np.ndarray) -> list[Any]:
    """(check, rows failing it) in CHECKS order."""
    phases = j.header.get("phases")
    n_phases = len(phases) if isinstance(phases, list) and phases else None  # None: no plan
    skew = CLOCK_SKEW_NS if j.events.get("clock") else 0
    has = c.n_chunks > 0
    first, last = c.first(), c.last()
    sent_, hdr, end = c.sent != NONE, headers != NONE, c.end != NONE
    stamps = [(c.intended, True), (c.sent, sent_), (headers, hdr), (c.end, end)]
    stamps += [(first, has), (last, has)]
    early = np.zeros(c.n, dtype=bool)
    late = np.zeros(c.n, dtype=bool)
    end_ns = (j.end or {}).get("end_ns")
    for v, present in stamps:
        early |= present & (v < -skew)
        if isinstance(end_ns, int):
            late |= present & (v > end_ns + skew)
    owner = c.owner()
    back = np.zeros(c.n, dtype=bool)
    neg = np.zeros(c.n, dtype=bool)
    if len(c.stamps) > 1:
        step = np.diff(c.stamps) < 0
        same = owner[1:] == owner[:-1]
        back[owner[1:][step & same]] = True
    neg[owner[c.tokens < 0]] = True
    return [
        (
            "phase",
            (c.phase < 0)
            | (c.phase >= (c.phase.max(initial=0) + 1 if n_phases is None else n_phases)),
        ),
        ("seq", (c.seq < 0) | (attempt < 0)),
        ("stamps_without_send", ~sent_ & (hdr | has)),
        ("before_start", early),
        ("after_end", late),
        ("sent_after_headers", sent_ & hdr & (headers < c.sent)),
        ("first_token_before_sent", sent_ & has & (first < c.sent)),
        ("first_token_before_headers", hdr & has & (first < headers)),
        ("first_token_before_intended", has & (first < c.intended)),
        ("tokens_out_of_order", back),
        ("end_before_last_token", end & has & (c.end < last)),
        ("negative_token_count", neg),
        ("suspect", _suspects(j, c, attempt)),
    ]


def _over_plan(j: Journal, c: Columns, attempt: np.ndarray, kept: np.ndarray) -> int:
    """First attempts beyond their phase's planned_requests, over all phases."""
    over = 0
    for i, spec in enumerate(j.header.get("phases") or []):
        planned = spec.get("planned_requests") if isinstance(spec, dict) else None
        if type(planned) is int:
            got = int(np.count_nonzero(kept & (c.phase == i) & (attempt == 0)))
            over += max(0, got - planned)
    return over


def vet_journal(j: Journal) -> Vetting:
    """Check every record of `j` (wall-clock stamps); the impossible ones are removed from `j`
    (its columns, records and failed attempts), so that no figure is computed from them. A
    journal vetted before (every one `read_journal` returns) answers what was found then, kept
    in `j.vetting`."""
    if isinstance(j.vetting, Vetting):
        return j.vetting
    out = j.vetting = Vetting()
    c = j.columns()
    if c.n == 0:
        return out
    headers, attempt = _headers_and_attempts(j, c)
    bad = np.zeros(c.n, dtype=bool)
    found: list[tuple[int, int, str]] = []
    for name, rows in _failures(j, c, headers, attempt):
        new = rows & ~bad
        if new.any():
            out.by_check[name] = int(np.count_nonzero(new))
            for i in np.flatnonzero(new).tolist():
                found.append((int(c.seq[i]), int(attempt[i]), name))
            bad |= new
    out.set_aside = int(np.count_nonzero(bad))
    over = _over_plan(j, c, attempt, ~bad)
    if over:
        out.by_check["more_than_planned"] = over
    out.examples = [
        f"seq {s} attempt {a}: {CHECKS[name]} ({name})" for s, a, name in sorted(found)[:EXAMPLES]
    ]
    final = bad & ~c.retried
    out.aside = list(zip(c.phase[final].tolist(), c.seq[final].tolist(), strict=True))
    if out.set_aside:
        _drop(j, {(int(s), int(a)) for s, a in zip(c.seq[bad], attempt[bad], strict=True)})
    return out


def _drop(j: Journal, bad: set[tuple[int, int]]) -> None:
    """Remove the records (seq, attempt) in `bad` from `j`; its columns are rebuilt."""
    if j._records is not None and not j._builder.rows:
        j._records = [r for r in j._records if (r.seq, r.attempt) not in bad]
    else:
        kept = [d for d in j._builder.rows if (d["seq"], d.get("a", 0)) not in bad]
        j._builder = ColumnBuilder()
        for d in kept:
            j._builder.add(d)
        j._records = None
    j._columns = None


__all__ = ["CHECKS", "Vetting", "set_aside_kind", "vet_journal"]
