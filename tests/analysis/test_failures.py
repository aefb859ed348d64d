"""Failures you can act on: the servers' messages per class (deduplicated, capped, shown as
text in HTML), retries counted by what decided their wait, 429s over time, adaptations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis.failures import MESSAGE_CHARS, error_messages, headline, server_message
from harness.analysis.html import render_result_html
from harness.analysis.report_text import render_text
from harness.analysis.result import build_result
from harness.record.journal import FailedAttempt, Journal
from harness.record.records import ErrorKind, Record

S = 1_000_000_000
HEADER: dict[str, Any] = {
    "scenario": {"workload": {"ignore_eos": True}},
    "scenario_name": "t",
    "environment": {},
    "target": {"kind": "http", "base_url": "http://127.0.0.1:1", "model": "m", "endpoint": "chat"},
    "started_at": "2026-11-30T00:00:00Z",
    "slo": [],
    "phases": [
        {
            "name": "main",
            "warmup": False,
            "closed": False,
            "max_concurrency": None,
            "arrival": "Constant(1/s)",
            "planned_duration_s": 3.0,
            "planned_requests": 3,
        }
    ],
    "options": {"ignore_eos": False},
    "request_adaptations": [
        {
            "parameter": "ignore_eos",
            "action": "dropped",
            "consequence": "lengths vary",
            "evidence": "HTTP 400: Unrecognized request argument supplied: ignore_eos",
        }
    ],
}


def fail(
    seq: int,
    status: int,
    msg: str,
    attempt: int = 0,
    retried: bool = False,
    ra: float | None = None,
    end_s: float = 0.5,
) -> Record:
    return Record(
        seq,
        0,
        0,
        0,
        0,
        (),
        (),
        int(end_s * S),
        status,
        ErrorKind.HTTP_STATUS,
        f"HTTP {status}: {msg}",
        attempt=attempt,
        retried=retried,
        retry_after_s=ra,
    )


def ok(seq: int, attempt: int = 0) -> Record:
    return Record(
        seq, 0, 0, 0, 0, (S, S + 10), (1, 1), S + 10, 200, None, "", 5, 6, 5, 8, False, attempt
    )


def test_messages_are_deduplicated_ranked_and_capped() -> None:
    fails = [
        FailedAttempt(
            i,
            0,
            0,
            False,
            "http_429",
            f"HTTP 429: Rate limit reached. Try again in {i * 37}ms.",
            1.0,
        )
        for i in range(5)
    ]
    fails += [
        FailedAttempt(9, 0, 0, False, "http_400", "HTTP 400: " + "x" * 500, None),
        FailedAttempt(
            10, 0, 0, True, "http_400", "HTTP 400: retried, so not a final outcome", None
        ),
    ]
    m = error_messages(fails)
    assert m["http_429"] == [{"message": "Rate limit reached. Try again in 0ms.", "count": 5}]
    assert len(m["http_400"]) == 1 and len(m["http_400"][0]["message"]) == MESSAGE_CHARS
    assert server_message("HTTP 500:   line one\n  line two") == "line one line two"
    blocks = [{"error_messages": m}]
    assert headline(blocks, 6) == (
        "every request failed (6 of 6); nothing was measured: http_400 ×1: "
        + m["http_400"][0]["message"]
        + "; http_429 ×5: Rate limit reached. "
        "Try again in 0ms."
    )


def _result(records: list[Record]) -> dict[str, Any]:
    return build_result(Journal(HEADER, records=records, end={"end_ns": 3 * S, "complete": True}))


def test_result_and_views_carry_messages_retries_and_429s(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script> & more"
    records = [
        fail(0, 429, "slow down", attempt=0, retried=True, ra=1.0, end_s=0.2),  # waited Retry-After
        ok(0, attempt=1),
        fail(1, 503, "busy", attempt=0, retried=True, end_s=0.3),  # backed off
        fail(1, 429, "slow down", attempt=1, end_s=1.5),  # final: failed
        fail(2, 400, evil, end_s=2.5),
    ]
    r = _result(records)
    s = r["summary"]
    assert (
        s["requests"]["retried_with_retry_after"] == 1
        and s["requests"]["retried_with_backoff"] == 1
    )
    assert s["error_messages"] == {
        "http_400": [{"message": evil, "count": 1}],
        "http_429": [{"message": "slow down", "count": 1}],
    }
    assert r["timeseries"]["http_429"] == [1, 1, 0]  # retried attempts included
    assert r["request_adaptations"][0]["parameter"] == "ignore_eos"
    assert r["output_lengths_forced"] is False
    text = render_text(r)
    assert "    http_400 ×1: " + evil in text
    assert "2 retried attempts (1 after the server's Retry-After)" in text
    assert "request adapted (dropped): ignore_eos refused by the target: lengths vary" in text
    assert "output lengths (EOS decides): planned mean 8.0" in text
    page = render_result_html(r)
    assert "<script>alert" not in page and "\\u003cscript\\u003ealert(1)" in page
    assert "Error messages (most frequent per class)" in page and "Rate limits: HTTP 429" in page
    assert "Request adapted to the target" in page and "Output lengths, tokens" in page


def test_journal_round_trip_keeps_messages_and_retry_after(tmp_path: Path) -> None:
    from harness.record.journal import JournalWriter, read_journal

    records = [fail(0, 429, "slow down", retried=True, ra=0.25), ok(0, attempt=1)]
    w = JournalWriter(tmp_path / "j.jsonl", HEADER)
    for rec in records:
        w.write_record(rec)
    w.close({"end_ns": 3 * S, "complete": True})
    j = read_journal(tmp_path / "j.jsonl")
    assert j.records == records
    assert (
        j.failed_attempts()
        == Journal(HEADER, records=records).failed_attempts()
        == [FailedAttempt(0, 0, 0, True, "http_429", "HTTP 429: slow down", 0.25)]
    )
    assert build_result(j)["summary"] == _result(records)["summary"]
