"""Scale-out says what it did (issue 45): how the number of workers was chosen, each shard's CPU
peak, and the result's `client.scale_out` block and its one report line (one process, worker
processes, Ray). Pure: no process is started here (the runs are in test_workers.py and
test_raycluster.py)."""

from __future__ import annotations

import pytest

from harness.analysis.scale_out import scale_out_block, scale_out_line
from harness.client.shard import CpuPeak
from harness.client.workers import auto_choice, choose_workers
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario
from tests.client.test_workers import SCENARIO

HEAVY = SCENARIO.replace("rate = 20", "rate = 9000")


@pytest.mark.parametrize(
    ("samples", "want"),
    [
        ([], None),  # nothing measured
        ([(0.0, 0.0)], None),  # one sample: no span
        ([(0.0, 0.0), (0.5, 0.1)], 0.2),  # shorter than a second: the whole run, 0.1 s / 0.5 s
        # a busy second between quiet ones: 0.9 s of CPU from 1.0 to 2.0 s
        ([(0.0, 0.0), (1.0, 0.1), (2.0, 1.0), (3.0, 1.1)], 0.9),
        # samples every 0.2 s: each span reaches back to the newest sample a second before it
        ([(t / 5, min(t, 5) * 0.1) for t in range(11)], 0.5),
    ],
)
def test_cpu_peak_is_the_busiest_second(samples: list[tuple[float, float]], want) -> None:
    peak = CpuPeak()
    for wall, cpu in samples:
        peak.sample(wall, cpu)
    assert peak.peak == (None if want is None else pytest.approx(want))


def test_auto_says_how_it_chose(write_scenario) -> None:
    plan = build_plan(load_scenario(write_scenario(SCENARIO), [], None))
    heavy = build_plan(load_scenario(write_scenario(HEAVY), [], None))
    # 20 req/s needs one worker; the simulator's CPU is left aside and said so
    c = auto_choice(plan, cpus=2, reserved=1)
    assert c.n == 1 and c.why.startswith("auto: 2 CPUs, 1 left for the simulator; ")
    assert " req/s) needs 1" in c.why and c.why.endswith("needs 1")
    # 9000 req/s needs 3 (4000 a worker): 8 CPUs give them, 2 CPUs less the simulator's cap it
    assert auto_choice(heavy, cpus=8).n == 3 and "left for" not in auto_choice(heavy, cpus=8).why
    capped = auto_choice(heavy, cpus=2, reserved=1)
    assert capped.n == 1 and capped.why.endswith("needs 3, capped at 1")
    assert auto_choice(heavy, cpus=1, reserved=1).n == 1  # never fewer than one
    # the other ways: a number (from the flag or the config file) and the default
    assert choose_workers("3", plan, "--workers").why == "--workers 3"
    assert choose_workers(2, plan, "config.toml [client] workers =").why.endswith("= 2")
    assert choose_workers(None, plan, "--workers") == choose_workers(None, plan, "x")
    assert choose_workers(None, plan, "--workers").n == 1


def _account(index: int, count: int, recorded: list[int], **cpu) -> dict:
    return {"shard": [index, count], "begun": recorded, "recorded": recorded, **cpu}


def test_one_process_line() -> None:
    end = {"cpu_s": 0.4, "accounts": [_account(0, 1, [30, 10], cpu_s=0.4, cpu_peak_share=0.08)]}
    block = scale_out_block({"workers": 1, "workers_chosen": "one process, the default"}, end, None)
    assert block["kind"] == "process" and block["per_worker"] == [
        {"name": "main", "requests": 40, "share": 1.0, "cpu_s": 0.4, "cpu_peak_share": 0.08}
    ]
    result = {"client": {"scale_out": block, "cpu_share_of_one_core": 0.03}}
    assert scale_out_line(result) == (
        "scale-out: 1 process (one process, the default); CPU peak 8% of one core (mean 3%)"
    )
    # a journal from before the peak (its end line's account has no CPU): the run's CPU, mean
    old = scale_out_block({"workers": 1}, {"cpu_s": 0.4, "accounts": [_account(0, 1, [40])]}, None)
    assert old["per_worker"][0]["cpu_s"] == 0.4
    assert scale_out_line({"client": {"scale_out": old, "cpu_share_of_one_core": 0.03}}) == (
        "scale-out: 1 process; CPU 3% of one core (mean; a journal from before the peak)"
    )
    assert scale_out_line({"client": {}}) is None  # a result from before schema 9
    predicted = {**result, "target": {"kind": "prediction"}}
    assert scale_out_line(predicted) is None  # `predict` ran no client


def test_worker_processes_line_lists_each_share_and_peak() -> None:
    end = {
        "cpu_s": 1.0,
        "accounts": [  # shard 1 listed first: rows follow the shard index
            _account(1, 2, [10], cpu_s=0.4, cpu_peak_share=0.31),
            _account(0, 2, [30], cpu_s=0.6, cpu_peak_share=0.52),
        ],
    }
    block = scale_out_block({"workers": 2, "workers_chosen": "--workers 2"}, end, None)
    assert [r["name"] for r in block["per_worker"]] == ["harness-worker-0", "harness-worker-1"]
    assert [r["share"] for r in block["per_worker"]] == [0.75, 0.25]
    assert scale_out_line({"client": {"scale_out": block}}) == (
        "scale-out: 2 worker processes (--workers 2); requests 30 (75%), 10 (25%); "
        "CPU peak 52%, 31% of one core"
    )


def test_ray_line_says_hosts_skew_bound_and_offsets() -> None:
    clock = {
        "max_skew_ms": 10.0,
        "skew_start_ms": 0.5,
        "skew_end_ms": 0.75,
        "workers": [
            {"name": "harness-ray-0", "host": "a", "offset_start_ms": 0.25},
            {"name": "harness-ray-1", "host": "b", "offset_start_ms": -1.5},
        ],
    }
    end = {"accounts": [_account(i, 2, [20], cpu_s=0.1, cpu_peak_share=0.1) for i in (0, 1)]}
    opts = {"workers": 2, "ray": "auto", "workers_chosen": "auto: 2 CPUs; needs 1, capped"}
    block = scale_out_block(opts, end, clock)
    assert block["per_worker"][1]["host"] == "b" and block["max_skew_ms"] == 10.0
    assert scale_out_line({"client": {"scale_out": block}}) == (
        "scale-out: 2 Ray actors on 2 hosts (auto: 2 CPUs; needs 1, capped); clock skew "
        "0.50 ms at the start, 0.75 ms at the end (bound 10 ms held); requests 20 (50%), "
        "20 (50%); CPU peak 10%, 10% of one core; offsets +0.25, -1.50 ms"
    )


def test_many_workers_are_summarised() -> None:
    accounts = [_account(i, 8, [10 + i], cpu_peak_share=0.1 * (i + 1)) for i in range(8)]
    block = scale_out_block(
        {"workers": 8, "workers_chosen": "--workers 8"}, {"accounts": accounts}, None
    )
    line = scale_out_line({"client": {"scale_out": block}})
    assert line is not None and line.endswith(
        "requests 10-17 per worker (9%-16%); CPU peak 10%-80% of one core (highest harness-worker-7)"
    )
