"""The issue-25 "Done when": on a stream whose truth is known, TTFT, TTFO, the time to the first
tool call and the tokens of each channel are exact -- through either transport, the journal and
the result, and again from the journal alone (`report RUN.journal.jsonl`).

A scripted server sends each request the same known stream: 3 reasoning events (the third
carrying 2 tokens), a tool call (its name, then 2 argument events), then 2 answer events, with a
pause before each channel's first event so that it arrives in a read of its own. The truth per
request is its event list: the client's stamp of event k is the k-th token stamp, so TTFO is
exactly the stamp of event 6 minus sent, whatever the loopback's timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from harness.analysis.result import build_result
from harness.orchestrate import run as runner
from harness.record.journal import read_journal
from harness.record.metrics import exact_stats_ms
from harness.record.records import Channel
from tests.scripted_server import DONE, READ_APART_S, Request, event, json_response, sse

A, R, T = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)
SCENARIO = """
name = "channels"
seed = 4
[workload]
prompt_tokens = { dist = "fixed", value = 16 }
output_tokens = { dist = "fixed", value = 16 }
[[phases]]
name = "main"
requests = 4
arrival = { process = "constant", rate = 50 }
[slo]
ttfo_p99 = "10s"
"""
PAUSE_S = READ_APART_S


def delta(d: dict[str, Any], c: int) -> bytes:
    usage = {"prompt_tokens": 8, "completion_tokens": c, "total_tokens": 8 + c}
    return event({"choices": [{"index": 0, "delta": d, "finish_reason": None}], "usage": usage})


def fn(**f: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": 0, "function": f}]}


# (event, its channel, its tokens); None for an event that is no token
STREAM: list[tuple[bytes | float, int | None, int]] = [
    (delta({"role": "assistant", "content": ""}, 0), None, 0),
    (PAUSE_S, None, 0),
    (delta({"reasoning_content": "a"}, 1), R, 1),
    (delta({"reasoning_content": "b"}, 2), R, 1),
    (delta({"reasoning_content": "c d"}, 4), R, 2),
    (PAUSE_S, None, 0),
    (delta(fn(name="lookup", arguments=""), 5), T, 1),
    (delta(fn(arguments='{"q": '), 6), T, 1),
    (delta(fn(arguments='"x"}'), 7), T, 1),
    (PAUSE_S, None, 0),
    (delta({"content": "Paris"}, 8), A, 1),
    (delta({"content": " it is"}, 10), A, 2),
    (
        event(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 8,
                    "completion_tokens": 10,
                    "total_tokens": 18,
                    "completion_tokens_details": {"reasoning_tokens": 4},
                },
            }
        ),
        None,
        0,
    ),
    (DONE, None, 0),
]
CHANNELS = [ch for _, ch, _ in STREAM if ch is not None]
TOKENS = [k for _, ch, k in STREAM if ch is not None]


def respond(i: int, req: Request) -> list[bytes | float]:
    if not (req.json() or {}).get("stream"):
        return json_response(404, {"error": {"message": "stream only"}})
    return sse(*(e for e, _, _ in STREAM))


@pytest.mark.timing  # its channels are told apart by pauses between reads
@pytest.mark.parametrize("http_client", ["fast", "aiohttp"])
def test_ttft_ttfo_tool_call_and_channel_tokens_are_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_client: str
) -> None:
    from tests.scripted_server import scripted

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SCENARIO)
    with scripted(respond) as server:
        rc = runner.run_command(
            runner.RunArgs(
                scenario="s.toml",
                target=server.url,
                model="m",
                out="r.json",
                quiet=True,
                probe=False,
                http_client=http_client,
            )
        )
    assert rc == 0
    result = orjson.loads((tmp_path / "r.json").read_bytes())
    j = read_journal(tmp_path / "r.journal.jsonl")
    records = sorted(j.records, key=lambda r: r.seq)
    assert len(records) == 4
    first_reason, first_tool, first_answer = CHANNELS.index(R), CHANNELS.index(T), CHANNELS.index(A)
    for r in records:
        assert r.ok and list(r.channels) == CHANNELS and list(r.chunk_tokens) == TOKENS
        assert r.sent_ns is not None
        assert r.ttft_ns == r.chunk_ns[first_reason] - r.sent_ns
        assert r.ttfo_ns == r.chunk_ns[first_answer] - r.sent_ns
        assert r.ttft_tool_ns == r.chunk_ns[first_tool] - r.sent_ns
        # each channel's first event came after a pause, in a read of its own
        assert r.chunk_ns[first_reason] < r.chunk_ns[first_tool] < r.chunk_ns[first_answer]
        assert r.usage_reasoning_tokens == 4 and r.output_tokens == 10
    s = result["summary"]
    for name, attr in (("ttft", "ttft_ns"), ("ttfo", "ttfo_ns"), ("ttft_tool", "ttft_tool_ns")):
        want = exact_stats_ms(np.array([getattr(r, attr) for r in records], dtype=np.int64))
        assert {k: s["latency_ms"][name][k] for k in want} == want, name
    assert s["tokens"]["channels"] == {
        "answer_tokens": 4 * 3,
        "answer_requests": 4,
        "reasoning_tokens": 4 * 4,
        "reasoning_requests": 4,
        "tool_tokens": 4 * 3,
        "tool_requests": 4,
        "usage_reasoning_tokens": 4 * 4,
        "reasoning_disagree_requests": 0,
    }
    assert [v["name"] for v in s["slo"]] == ["ttfo_p99"] and s["slo"][0]["pass"] is True
    # the journal alone rebuilds the same figures
    again = build_result(j, str(tmp_path / "r.journal.jsonl"))
    assert again["summary"]["latency_ms"] == s["latency_ms"]
    assert again["summary"]["tokens"] == s["tokens"]
