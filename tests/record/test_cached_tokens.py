"""usage.prompt_tokens_details.cached_tokens per request: decoded, vetted against the prompt
count, journaled, rebuilt (harness.client.openai, harness.record.usage, harness.record.journal)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from harness.client.openai import StreamDecoder
from harness.record.journal import decode_record, encode_record, read_journal
from harness.record.metrics import Columns
from harness.record.records import Record
from harness.record.usage import flag_reasons, vet_counts

# vLLM 0.32's final usage chunk with --enable-prompt-tokens-details (exclude_none: only cached)
FINAL = (
    b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":40,"total_tokens":43,"completion_tokens":3,'
    b'"prompt_tokens_details":{"cached_tokens":%s}}}'
)


def _decode(cached: bytes) -> StreamDecoder:
    dec = StreamDecoder()
    dec.on_event(FINAL % cached)
    return dec


@pytest.mark.parametrize(
    ("sent", "cached", "flags"),
    [
        (b"32", 32, ()),  # a hit: kept as sent
        (b"0", 0, ()),  # a miss: vLLM 0.32 sends 0
        (b"null", None, ()),  # null: not reported, nothing flagged
        (b"-1", None, ("negative: cached_tokens -1",)),  # not a count: flagged, not read
        (b"1.5", None, ("not_integer: cached_tokens 1.5",)),
        (b'"32"', None, ("not_integer: cached_tokens '32'",)),
    ],
)
def test_the_decoder_reads_cached_tokens(
    sent: bytes, cached: int | None, flags: tuple[str, ...]
) -> None:
    dec = _decode(sent)
    assert dec.cached_tokens == cached and dec.usage_flags == flags
    assert dec.prompt_tokens == 40 and dec.completion_tokens == 3  # the rest read as before


def test_a_usage_without_details_reports_none() -> None:
    dec = StreamDecoder()
    dec.on_event(b'{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}')
    dec.on_event(b'{"choices":[],"usage":{"prompt_tokens_details":null}}')
    assert dec.cached_tokens is None and dec.usage_flags == ()


def _vet(cached: int | None, prompt: int = 40, request_bytes: int | None = 500) -> tuple:
    v = vet_counts(
        output_tokens=3,
        prompt_tokens=prompt,
        n_events=3,
        chunk_sum=3,
        max_tokens=3,
        received_bytes=None,
        request_bytes=request_bytes,
        cached_tokens=cached,
    )
    return v.cached_tokens, v.prompt_tokens, v.output_tokens, v.flag


def test_a_cached_count_within_its_prompt_is_believed() -> None:
    assert _vet(39) == (39, 40, 3, "")
    assert _vet(40) == (40, 40, 3, "")  # all of it (vLLM recomputes the last token; others may not)
    assert _vet(None) == (None, 40, 3, "")


def test_a_cached_count_past_its_prompt_is_flagged_and_dropped_alone() -> None:
    cached, prompt, out, flag = _vet(41)
    assert (cached, prompt, out) == (None, 40, 3)  # the other counts stand
    assert flag == "over_prompt_tokens: cached_tokens 41 > prompt_tokens 40"
    assert flag_reasons(flag) == ["over_prompt_tokens"]
    assert _vet(-2)[0] is None and _vet(-2)[3] == "negative: cached_tokens -2"


def test_a_prompt_count_not_believed_takes_its_cached_count_with_it() -> None:
    # 10,000 prompt tokens from a 10-byte body: the prompt count is 0, so no cached count fits
    cached, prompt, _, flag = _vet(5_000, prompt=10_000, request_bytes=10)
    assert (cached, prompt) == (None, 0)
    assert flag_reasons(flag) == ["over_bytes", "over_prompt_tokens"]


def test_the_journal_keeps_the_cached_count(tmp_path: Path) -> None:
    rec = Record(
        seq=0,
        phase=0,
        intended_ns=0,
        sent_ns=10,
        chunk_ns=(20, 30),
        chunk_tokens=(1, 1),
        end_ns=30,
        status=200,
        prompt_tokens=40,
        output_tokens=2,
        cached_tokens=32,
    )
    assert decode_record(encode_record(rec)) == rec
    assert "cpt" not in encode_record(Record(0, 0, 0, 10))  # not reported: not written
    c = Columns.of([rec])
    assert c.cached is not None and c.cached.tolist() == [32]
    assert Columns.of([Record(0, 0, 0, 10)]).cached is None


def _journal(tmp_path: Path, recs: list[dict]) -> Path:
    header = {
        "t": "header",
        "scenario": {},
        "scenario_name": "x",
        "target": {"kind": "http", "base_url": "http://x", "endpoint": "chat"},
        "environment": {},
        "started_at": "2026-01-01T00:00:00Z",
        "phases": [{"name": "main", "warmup": False, "planned_duration_s": 1.0}],
        "slo": [],
        "journal_version": 2,
    }
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [header, *recs]))
    return path


def test_a_handwritten_journal_cannot_claim_more_cached_than_prompt(tmp_path: Path) -> None:
    base = {"t": "rec", "ph": 0, "i": 0, "s": 1, "e": 5, "st": 200, "c": [2, 1], "pt": 40, "ot": 2}
    path = _journal(
        tmp_path,
        [
            {**base, "seq": 0, "cpt": 16},  # believed
            {**base, "seq": 1, "cpt": 41},  # more than its prompt
            {**base, "seq": 2, "cpt": -3},  # negative
            {**base, "seq": 3},  # none
        ],
    )
    c = read_journal(path).columns()
    assert c.cached is not None and c.cached.tolist() == [16, -1, -1, -1]
    assert c.usage_flag is not None
    assert [flag_reasons(f) for f in c.usage_flag] == [
        [],
        ["over_prompt_tokens"],
        ["negative"],
        [],
    ]
    assert c.prompt_tokens.tolist() == [40, 40, 40, 40]
