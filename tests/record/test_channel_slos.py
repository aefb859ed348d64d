"""SLOs on the channel metrics (issue 25): a per-request TTFO limit and goodput, what a request
without an answer token does to them, `run --slo`, and the virtual clock's channels (capacity,
plan and predict run there)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.catalogue import SloLimit
from harness.commands.run import slo_sets
from harness.errors import UsageError
from harness.orchestrate.predict import simulate
from harness.orchestrate.scenario import load_scenario
from harness.record.metrics import Columns, meets_per_request_slos, slo_verdicts
from harness.record.records import Channel, ErrorKind, Record, channel_runs_of, chunk_channels

MS = 1_000_000
A, R, T = int(Channel.ANSWER), int(Channel.REASONING), int(Channel.TOOL)


def rec(seq: int, stamps_ms: list[int], runs=(), error=None) -> Record:
    return Record(
        seq=seq,
        phase=0,
        intended_ns=0,
        sent_ns=0,
        chunk_ns=tuple(t * MS for t in stamps_ms),
        chunk_tokens=(1,) * len(stamps_ms),
        end_ns=stamps_ms[-1] * MS if stamps_ms else 0,
        status=200,
        error=ErrorKind.STREAM_CUT if error else None,
        output_tokens=len(stamps_ms),
        channel_runs=tuple(runs),
    )


RECORDS = [
    rec(0, [10, 50, 60], runs=((0, R), (2, A))),  # reasons, answers at 60 ms: TTFO 60
    rec(1, [10, 50, 300], runs=((0, R), (2, A))),  # answers at 300 ms: TTFO 300
    rec(2, [10, 40, 45], runs=((0, R), (1, T))),  # a tool call at 40, no answer: no TTFO
    rec(3, [10, 20, 30], runs=((0, R),)),  # only reasoned (max_tokens spent thinking)
    rec(4, [20, 25]),  # a plain answer: TTFO = TTFT = 20
    rec(5, [5, 500], runs=((0, R),), error=True),  # cut mid-thought: failed
]


def test_a_ttfo_limit_holds_answers_exempts_tool_calls_and_fails_thinking_only() -> None:
    c = Columns.of(RECORDS)
    slo = [SloLimit("ttfo", "ttfo", None, 0.1)]  # 100 ms per request
    # 0 and 4 meet; 1 is over; 2 ended in a tool call: exempt; 3 gave no output; 5 failed
    assert meets_per_request_slos(c, slo).tolist() == [True, False, True, False, True, False]
    (v,) = slo_verdicts(c, np.ones(c.n, bool), {}, slo)
    # attainment over the successes the limit applies to (0, 1, 3, 4): 2 of 4
    assert v["attainment"] == 0.5


def test_a_ttft_tool_limit_holds_the_tool_calls_only() -> None:
    c = Columns.of(RECORDS)
    slo = [SloLimit("ttft_tool", "ttft_tool", None, 0.03)]  # 30 ms: the call at 40 misses it
    assert meets_per_request_slos(c, slo).tolist() == [True, True, False, True, True, False]
    (v,) = slo_verdicts(c, np.ones(c.n, bool), {}, slo)
    assert v["attainment"] == 0.0  # one request had a tool call, and it missed


def test_without_channels_a_ttfo_limit_is_a_ttft_limit() -> None:
    plain = [rec(0, [20, 25]), rec(1, [200, 210]), rec(2, [])]  # 2: succeeded without a token
    c = Columns.of(plain)
    ttfo = meets_per_request_slos(c, [SloLimit("ttfo", "ttfo", None, 0.1)])
    ttft = meets_per_request_slos(c, [SloLimit("ttft", "ttft", None, 0.1)])
    assert ttfo.tolist() == ttft.tolist() == [True, False, False]


@pytest.mark.parametrize(
    "channels",
    [
        [],  # no event
        [A, A, A],  # a plain answer: nothing to store
        [R, R, A, A],  # reasoning, then the answer
        [R, T, T, A, R],  # every change kept
    ],
)
def test_channel_runs_of_inverts_chunk_channels(channels: list[int]) -> None:
    runs = channel_runs_of(channels)
    assert chunk_channels(runs, len(channels)) == tuple(channels)
    assert (runs == ()) == all(c == A for c in channels)


def test_run_slo_flags_are_slo_sets() -> None:
    assert slo_sets(["ttfo_p99=2s", "ttfo = 3s"]) == ["slo.ttfo_p99=2s", "slo.ttfo=3s"]
    for bad in ("ttfo_p99", "=2s", "ttfo_p99=", "slo.ttfo=2s"):
        with pytest.raises(UsageError, match="--slo"):
            slo_sets([bad])


VIRTUAL = """
name = "think"
seed = 3
[workload]
prompt_tokens = {{ dist = "uniform", min = 64, max = 128 }}
output_tokens = {{ dist = "fixed", value = 96 }}
ignore_eos = true
{tools}
[[phases]]
name = "main"
duration = "4s"
arrival = {{ process = "poisson", rate = 4.0 }}
[sim]
gpu = "H200"
model = "Qwen2.5-7B-Instruct"
{sim}
"""


def test_the_virtual_clock_streams_reasoning_then_the_answer_or_a_tool_call(
    write_scenario,
) -> None:
    path = write_scenario(
        VIRTUAL.format(
            tools='tools = 1\ntool_choice = "auto"',
            sim="reasoning_tokens = 32\ntool_call_share = 0.5",
        )
    )
    recs = [r for r in simulate(load_scenario(path)).records if r.ok]
    assert len(recs) > 8
    calls = [r for r in recs if r.ttft_tool_ns is not None]
    answers = [r for r in recs if r.ttfo_ns is not None]
    assert calls and answers and len(calls) + len(answers) == len(recs)  # one or the other
    for r in recs:
        ch = r.channels
        assert ch[:32] == (R,) * 32 and len(set(ch[32:])) == 1  # 32 thoughts, then one kind
        assert r.usage_reasoning_tokens == 32
        first_out = r.ttfo_ns if r.ttfo_ns is not None else r.ttft_tool_ns
        assert first_out is not None and r.ttft_ns is not None and first_out > r.ttft_ns


def test_the_virtual_clock_without_reasoning_has_no_channels(write_scenario) -> None:
    path = write_scenario(VIRTUAL.format(tools="", sim=""))
    recs = simulate(load_scenario(path)).records
    assert recs and all(r.channel_runs == () and r.usage_reasoning_tokens is None for r in recs)
    assert all(r.ttfo_ns == r.ttft_ns for r in recs if r.ok)


def test_a_capacity_probe_on_the_virtual_clock_judges_ttfo_not_the_first_thought(
    write_scenario,
) -> None:
    from harness.analysis.capacity import judge, parse_slo
    from harness.analysis.steady import steady_part
    from harness.orchestrate.virtual_capacity import run_at

    path = write_scenario(VIRTUAL.format(tools="", sim="reasoning_tokens = 64"))
    _, vp = run_at(str(path), [], 4.0, 4.0)
    part = steady_part(vp.columns, vp.span_ns, vp.measured)
    slos = [parse_slo("ttfo_p99=60s"), parse_slo("ttft_p99=60s")]
    v = judge(part, slos)
    assert v.passed and v.binding == "ttfo_p99"
    ttfo, ttft = v.values["ttfo_p99"], v.values["ttft_p99"]
    assert ttfo is not None and ttft is not None and ttfo > ttft  # 64 thoughts come first
