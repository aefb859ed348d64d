"""The Responses and Embeddings endpoints through the whole run, on answers whose truth is known.

Responses: a scripted server sends each request the same typed-event stream (2 reasoning deltas,
a function call's 2 argument deltas, 2 answer deltas, each channel after a pause so its first
event arrives in a read of its own, then `response.completed` with the usage). Through either
transport, TTFT, TTFO and the time to the first tool call are exactly the stamps of those events
minus sent, and each channel's tokens are exact.

Embeddings: a scripted server answers each batch whole; the records carry no token stamps, the
input tokens from `usage.prompt_tokens`, and a latency of sent -> the answer's last read; the
result's `embeddings` block and the report say so. An answer with fewer vectors than inputs
is `malformed`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from harness.analysis.embeddings import NO_STREAMING
from harness.analysis.html import render_result_html
from harness.analysis.report_text import render_text
from harness.orchestrate import run as runner
from harness.record.journal import read_journal
from harness.record.metrics import exact_stats_ms
from harness.record.records import Channel, ErrorKind
from tests.scripted_server import READ_APART_S, Request, json_response, scripted, sse

A, R, T = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)
PAUSE_S = READ_APART_S
SCENARIO = """
name = "endpoints"
seed = 4
[target]
endpoint = "{endpoint}"
[workload]
prompt_tokens = {{ dist = "fixed", value = 16 }}
{more}
[[phases]]
name = "main"
requests = 4
arrival = {{ process = "constant", rate = 50 }}
"""


def ev(kind: str, **fields: Any) -> bytes:
    data = orjson.dumps({"type": kind, **fields, "sequence_number": 0})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def delta(kind: str, text: str) -> bytes:
    return ev(f"response.{kind}.delta", item_id="i", output_index=0, delta=text)


USAGE = {
    "input_tokens": 16,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 6,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 22,
}
STREAM: list[tuple[bytes | float, int | None]] = [
    (ev("response.created", response={"id": "resp_1", "status": "in_progress"}), None),
    (PAUSE_S, None),
    (delta("reasoning_text", "hmm"), R),
    (delta("reasoning_text", " so"), R),
    (PAUSE_S, None),
    (ev("response.output_item.added", output_index=1, item={"type": "function_call"}), None),
    (delta("function_call_arguments", '{"q":'), T),
    (delta("function_call_arguments", '"x"}'), T),
    (PAUSE_S, None),
    (delta("output_text", "Paris"), A),
    (delta("output_text", " it is"), A),
    (ev("response.completed", response={"id": "resp_1", "usage": USAGE}), None),
]
CHANNELS = [ch for _, ch in STREAM if ch is not None]


def _run(tmp_path: Path, url: str, endpoint: str, http_client: str, more: str = "") -> int:
    (tmp_path / "s.toml").write_text(SCENARIO.format(endpoint=endpoint, more=more))
    return runner.run_command(
        runner.RunArgs(
            scenario="s.toml",
            target=url,
            model="m",
            out="r.json",
            quiet=True,
            probe=False,
            http_client=http_client,
        )
    )


@pytest.mark.timing  # its channels are told apart by pauses between reads
@pytest.mark.parametrize("http_client", ["fast", "aiohttp"])
def test_responses_ttft_ttfo_tool_call_and_channels_are_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_client: str
) -> None:
    def respond(i: int, req: Request) -> list[bytes | float]:
        if req.path != "/v1/responses":  # the run's /metrics polls
            return json_response(404, {"error": {"message": "no such route"}})
        body = req.json()
        assert body["input"] and body["stream"] is True
        return sse(*(e for e, _ in STREAM))

    monkeypatch.chdir(tmp_path)
    with scripted(respond) as server:
        assert (
            _run(
                tmp_path,
                server.url,
                "responses",
                http_client,
                'output_tokens = { dist = "fixed", value = 16 }',
            )
            == 0
        )
    result = orjson.loads((tmp_path / "r.json").read_bytes())
    records = sorted(read_journal(tmp_path / "r.journal.jsonl").records, key=lambda r: r.seq)
    assert len(records) == 4
    first_reason, first_tool, first_answer = CHANNELS.index(R), CHANNELS.index(T), CHANNELS.index(A)
    for r in records:
        assert r.ok and list(r.channels) == CHANNELS and list(r.chunk_tokens) == [1] * 6
        assert r.sent_ns is not None
        assert r.ttft_ns == r.chunk_ns[first_reason] - r.sent_ns
        assert r.ttfo_ns == r.chunk_ns[first_answer] - r.sent_ns
        assert r.ttft_tool_ns == r.chunk_ns[first_tool] - r.sent_ns
        assert r.chunk_ns[first_reason] < r.chunk_ns[first_tool] < r.chunk_ns[first_answer]
        assert (r.prompt_tokens, r.output_tokens, r.usage_reasoning_tokens) == (16, 6, 2)
    s = result["summary"]
    for name, attr in (("ttft", "ttft_ns"), ("ttfo", "ttfo_ns"), ("ttft_tool", "ttft_tool_ns")):
        want = exact_stats_ms(np.array([getattr(r, attr) for r in records], dtype=np.int64))
        assert {k: s["latency_ms"][name][k] for k in want} == want, name
    ch = s["tokens"]["channels"]
    assert (ch["answer_tokens"], ch["reasoning_tokens"], ch["tool_tokens"]) == (8, 8, 8)
    assert ch["usage_reasoning_tokens"] == 8 and ch["reasoning_disagree_requests"] == 0
    assert result["target"]["endpoint"] == "responses" and "embeddings" not in s


def _embeddings_answer(req: Request, short: bool = False) -> list[bytes | float]:
    if req.path != "/v1/embeddings":  # the run's /metrics polls
        return json_response(404, {"error": {"message": "no such route"}})
    body = req.json()
    assert body["encoding_format"] == "base64"
    n = len(body["input"]) - (1 if short else 0)
    tokens = sum(len(t.split()) for t in body["input"])
    return [
        0.01,
        *json_response(
            200,
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": "AAAA"} for i in range(n)
                ],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        ),
    ]


@pytest.mark.parametrize("http_client", ["fast", "aiohttp"])
def test_embeddings_records_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_client: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with scripted(lambda i, req: _embeddings_answer(req)) as server:
        more = 'batch = 3\n[slo]\ne2e_p99 = "10s"'
        assert _run(tmp_path, server.url, "embeddings", http_client, more) == 0
        sent = [r.json() for r in server.requests if r.path == "/v1/embeddings"]
    assert all(len(b["input"]) == 3 and "max_tokens" not in b for b in sent)
    assert len({t for b in sent for t in b["input"]}) == 12  # every input its own text
    result = orjson.loads((tmp_path / "r.json").read_bytes())
    records = sorted(read_journal(tmp_path / "r.journal.jsonl").records, key=lambda r: r.seq)
    for r in records:
        assert r.ok and r.chunk_ns == () and r.ttft_ns is None and r.output_tokens == 0
        assert r.prompt_tokens == 48 == r.planned_prompt_tokens  # 3 inputs of 16 words
        assert r.sent_ns is not None and r.end_ns is not None and r.end_ns > r.sent_ns
    e = result["summary"]["embeddings"]
    want = exact_stats_ms(np.array([r.end_ns - r.sent_ns for r in records], dtype=np.int64))
    assert e["latency_ms"]["e2e"] == want and e["batch"] == 3 and e["streaming"] is False
    w = e["window_s"]
    assert e["inputs_per_s"] == pytest.approx(12 / w) and e["input_tokens_per_s"] == pytest.approx(
        4 * 48 / w
    )
    assert result["summary"]["latency_ms"]["ttft"]["count"] == 0
    (slo,) = result["summary"]["slo"]  # an aggregate E2E SLO reads the embeddings latency
    assert slo["name"] == "e2e_p99" and slo["value_ms"] == want["p99"] and slo["pass"] is True
    text = render_text(result)
    assert NO_STREAMING in text and "inputs/s (batch 3)" in text and "TTFT " not in text
    html = render_result_html(result)
    assert f"Embeddings latency (ms): {NO_STREAMING}" in html and "TTFT from sent" not in html


def test_an_answer_short_of_vectors_is_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with scripted(lambda i, req: _embeddings_answer(req, short=True)) as server:
        _run(tmp_path, server.url, "embeddings", "fast", "batch = 2")
    records = read_journal(tmp_path / "r.journal.jsonl").records
    assert records and all(r.error is ErrorKind.MALFORMED for r in records)
    assert "1 embeddings for the 2 inputs sent" in records[0].error_detail
