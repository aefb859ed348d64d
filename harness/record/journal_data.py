"""A journal read back: header, events, end line, and its records as Columns or Records.

`read_journal` (harness.record.journal) fills one while reading and vets its records
(harness.record.journal_vet) before any reader sees them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.record.journal_codec import decode_record
from harness.record.journal_columns import ColumnBuilder
from harness.record.metrics import Columns
from harness.record.records import ErrorKind, Record


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """What the result says about a failure: its class, the server's words, its Retry-After."""

    seq: int
    attempt: int
    phase: int
    retried: bool
    error_class: str
    detail: str
    retry_after_s: float | None


class Journal:
    """A journal read back: header, events, end line, and the records -- as `Columns` (built
    while reading) and, on first use of `records`, as Record objects."""

    def __init__(
        self,
        header: dict[str, Any],
        records: list[Record] | None = None,
        events: dict[str, list[dict[str, Any]]] | None = None,
        end: dict[str, Any] | None = None,
        torn_lines: int = 0,
    ) -> None:
        """`records`: a journal made from Records in memory (tests, tools); `read_journal`
        fills the columnar builder instead."""
        self.header = header
        self.events: dict[str, list[dict[str, Any]]] = events if events is not None else {}
        self.end = end
        self.torn_lines = torn_lines
        self.duplicate_lines = 0  # repeated records and event lines, read once (read_journal)
        self.header_line = 0  # the header's line in the file (read_journal)
        self.vetting: Any = None  # harness.record.journal_vet.Vetting, once vetted
        self._builder = ColumnBuilder()
        self._records = records
        self._columns: Columns | None = None

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            self._records = [decode_record(d) for d in self._builder.rows]
        return self._records

    def failed_attempts(self) -> list[FailedAttempt]:
        """Every failed attempt (retried ones too) with the server's message and Retry-After,
        in (seq, attempt) order; read from the journal lines without building Records."""
        if self._records is not None and not self._builder.rows:
            out = [
                FailedAttempt(
                    r.seq,
                    r.attempt,
                    r.phase,
                    r.retried,
                    r.error_class or "",
                    r.error_detail,
                    r.retry_after_s,
                )
                for r in self._records
                if r.error is not None
            ]
        else:
            out = []
            for d in self._builder.failed_rows:
                err = d["err"]
                st = d.get("st")
                cls = f"http_{st}" if err == ErrorKind.HTTP_STATUS.value and st is not None else err
                ra = d.get("ra")
                out.append(
                    FailedAttempt(
                        d["seq"],
                        d.get("a", 0),
                        d["ph"],
                        bool(d.get("r")),
                        cls,
                        str(d.get("msg", "")),
                        float(ra) if isinstance(ra, int | float) else None,
                    )
                )
        out.sort(key=lambda f: (f.seq, f.attempt))
        return out

    def columns(self) -> Columns:
        """The records as Columns in (seq, attempt) order; equal to `Columns.of(self.records)`."""
        if self._columns is None:
            if self._records is not None and not self._builder.rows:
                self._columns = Columns.of(self._records)
            else:
                self._columns = self._builder.columns()
        return self._columns
