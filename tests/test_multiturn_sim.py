"""Multi-turn sessions end to end against the simulator (started here on 127.0.0.1 and stopped):
requests = sessions x turns, each turn carrying the history the server actually streamed back
(checked against the server's own token count), later turns found in the server's prefix cache,
think time respected from the journal's stamps, under open-loop arrivals in one process and
closed-loop users in worker processes."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from harness.record.journal import read_journal
from harness.server.launcher import start_sim
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "multiturn.toml"
pytestmark = pytest.mark.slow


def _run(tmp_path: Path, base_url: str, name: str, sets: list[str], *flags: str):  # type: ignore[no-untyped-def]
    out = tmp_path / f"{name}.json"
    sets = ['target.endpoint="completions"', *sets]
    argv = [
        sys.executable,
        "-m",
        "harness",
        "run",
        str(SCENARIO),
        "--out",
        str(out),
        "--target",
        base_url,
        "--quiet",
        *flags,
    ]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = build_plan(load_scenario(SCENARIO, sets))
    return (
        json.loads(out.read_text()),
        read_journal(out.with_name(out.stem + ".journal.jsonl")),
        plan,
    )


def _prefix_counters(base_url: str) -> tuple[float, float]:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    found = {"vllm:prefix_cache_queries": 0.0, "vllm:prefix_cache_hits": 0.0}
    for line in text.splitlines():
        for name in found:
            if line.startswith((name + "_total", name + "{", name + " ")):
                found[name] += float(line.rsplit(" ", 1)[1])
    return found["vllm:prefix_cache_queries"], found["vllm:prefix_cache_hits"]


def _sessions(j, plan):  # type: ignore[no-untyped-def]
    """Records by session, in turn order, each with its planned new user message's tokens."""
    msg = {
        pp.first_seq + k: int(pp.prompt_tokens[k]) for pp in plan.phases for k in range(pp.count)
    }
    out: dict[int, list] = {}
    for r in j.records:
        assert r.session_id is not None
        out.setdefault(r.session_id, []).append((r, msg[r.seq]))
    for recs in out.values():
        recs.sort(key=lambda x: x[0].turn_index)
        assert [r.turn_index for r, _ in recs] == list(range(len(recs)))
    return out


def test_open_loop_sessions_send_their_history_and_hit_the_prefix_cache(tmp_path):
    with start_sim(["--speedup", "10"], tmp_path / "sim.log") as sim:
        result, j, plan = _run(tmp_path, sim.base_url, "open", ["workload.conversation.turns=3"])
        queries, hits = _prefix_counters(sim.base_url)
    c = j.columns()
    assert c.ok.all()
    sessions = _sessions(j, plan)
    assert len(sessions) == 2 + 12 and c.n == 3 * len(sessions)  # requests = sessions x turns
    main = result["summary"]["sessions"]
    assert (main["sessions"], main["requests"], main["sessions_with_a_failed_turn"]) == (12, 36, 0)
    assert [t["requests"] for t in main["ttft_by_turn"]] == [12, 12, 12]
    assert result["plan"]["workload"]["conversation"]["phases"]["main"]["sessions_planned"] == 12
    assert np.array_equal(c.prompt_tokens, c.planned_prompt)
    lengths = result["plan"]["workload"][
        "prompt_lengths"
    ]  # an HTTP target: its /tokenize was asked
    assert (
        lengths["method"] == "server_tokenize" and lengths["template_tokens"] == 0
    )  # completions: no template
    for recs in sessions.values():
        history = 0
        for r, msg in recs:
            # the server's count (words, on the completions endpoint): the system prompt, every
            # earlier user message and answer as streamed back, the new message
            assert r.prompt_tokens == 128 + history + msg
            history += msg + r.output_tokens
        for (prev, _), (nxt, _) in zip(recs, recs[1:], strict=False):
            assert nxt.intended_ns == prev.chunk_ns[-1] + 1_000_000_000  # last token + think time
            assert nxt.sent_ns >= nxt.intended_ns
    assert queries > 0 and hits / queries > 0.3  # later turns hit the cache
    _assert_schema_valid(result)
    # TTFT by turn is reported for every turn (its values are timings: not asserted here)
    assert all(
        t["ttft_ms"]["count"] == 12 and t["prompt_tokens_mean"] > 0 for t in main["ttft_by_turn"]
    )


def test_closed_loop_sessions_in_worker_processes_with_the_last_turn_as_history(tmp_path):
    sets = [
        "workload.conversation.turns=3",
        'workload.conversation.history="last_n"',
        "workload.conversation.last_n=1",
        'workload.conversation.think_time="0.2s"',
        "workload.system_prompt_tokens=0",
        'phases.1.arrival={ process = "closed", users = 4 }',
        "phases.1.requests=8",
    ]
    with start_sim(["--speedup", "10"], tmp_path / "sim.log") as sim:
        result, j, _plan = _run(tmp_path, sim.base_url, "closed", sets, "--workers", "2")
    assert result["options"]["workers"] == 2
    c = j.columns()
    assert c.ok.all() and np.array_equal(c.prompt_tokens, c.planned_prompt)
    sessions = _sessions(j, _plan)
    assert len(sessions) == 2 + 8 and c.n == 3 * len(sessions)
    for recs in sessions.values():
        for (prev, prev_msg), (nxt, msg) in zip(recs, recs[1:], strict=False):
            assert nxt.prompt_tokens == prev_msg + prev.output_tokens + msg  # only the turn before
            assert nxt.sent_ns >= prev.chunk_ns[-1] + 200_000_000
    assert result["summary"]["sessions"]["sessions"] == 8


def test_sharegpt_conversations_drive_the_turns(tmp_path):
    """A ShareGPT conversation is a session: its human messages are the turns, its answers'
    lengths the output lengths, and the history is the simulator's own answers as streamed."""
    dataset = REPO / "tests" / "data" / "datasets" / "sharegpt_multiturn.json"
    scn = tmp_path / "s.toml"
    scn.write_text(f"""
name = "sharegpt_mt"
[target]
endpoint = "completions"
[workload]
dataset = {{ format = "sharegpt", file = "{dataset}", order = "file" }}
conversation = {{ think_time = "0.1s" }}
[[phases]]
name = "main"
requests = 4
arrival = {{ process = "constant", rate = 10 }}
[sim]
speedup = 10
""")
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(scn), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    j = read_journal(out.with_suffix(".journal.jsonl"))
    convs = json.loads(dataset.read_text())
    sessions = sorted(
        (sorted(v, key=lambda r: r.turn_index) for v in _by_session(j).values()),
        key=lambda recs: recs[0].seq,
    )
    assert [len(s) for s in sessions] == [3, 2, 1, 1]  # m3's last question has no answer
    for recs, conv in zip(sessions, convs, strict=True):
        turns = conv["conversations"]
        history = 0
        for t, r in enumerate(recs):
            question, answer = turns[2 * t]["value"], turns[2 * t + 1]["value"]
            assert r.ok and r.output_tokens == len(answer.split())  # the dataset's answer length
            assert r.prompt_tokens == history + len(
                question.split()
            )  # its question, after the history
            history += len(question.split()) + r.output_tokens


def _by_session(j):  # type: ignore[no-untyped-def]
    out: dict[int, list] = {}
    for r in j.records:
        out.setdefault(r.session_id, []).append(r)
    return out


def _assert_schema_valid(result: dict) -> None:
    """The published result schema covers sessions and the workload view."""
    jsonschema = pytest.importorskip("jsonschema")  # in the test extra
    from harness.schema import RESULT_SCHEMA_PATH

    doc = {k: v for k, v in result.items() if not k.startswith("_")}
    assert "workload_view" in doc and "sessions" in doc["summary"]
    errors = [
        f"{'.'.join(map(str, e.path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(
            json.loads(RESULT_SCHEMA_PATH.read_text())
        ).iter_errors(doc)
    ]
    assert errors == []
