"""The live runaway watch over real HTTP against the simulator (--speedup): a healthy run is
never stopped, a runaway is, with its evidence in numbers; and the series it sampled is the one
`series_of` rebuilds from the journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.orchestrate.probe_monitor import ProbeMonitor, waiting_of
from harness.orchestrate.run import RunArgs, run_command
from harness.orchestrate.virtual_capacity import probe_form
from harness.workload.scenario import load_scenario
from tests.virtual_shapes import service_rate

SCENARIO = """
name = "watch"
seed = 5
[workload]
prompt_tokens = { dist = "lognormal", mean = 256, sigma = 0.4, min = 16, max = 2048 }
output_tokens = { dist = "fixed", value = 32 }
ignore_eos = true
[[phases]]
name = "warmup"
duration = "1s"
arrival = { process = "constant", rate = 2.0 }
warmup = true
[[phases]]
name = "main"
duration = "8s"
arrival = { process = "poisson", rate = 4.0 }
[sim]
gpu = "L4"
max_num_seqs = 8
speedup = 5.0
"""


def test_the_waiting_gauge_of_vllm_and_llamacpp() -> None:
    assert waiting_of({"vllm:num_requests_waiting": 3.0, "vllm:num_requests_running": 8.0}) == 3.0
    assert waiting_of({"llamacpp:requests_deferred": 2.0}) == 2.0
    assert waiting_of({"vllm:num_requests_running": 8.0}) is None and waiting_of(None) is None


@pytest.mark.parametrize(("scrape_interval_s", "want"), [(5.0, 7.0), (1.0, None)])
def test_a_gauge_is_stale_after_three_of_the_runs_own_scrape_intervals(
    scrape_interval_s, want
) -> None:
    """A poll 4 s old is fresh when /metrics is polled every 5 s, stale when every second."""
    import asyncio
    from types import SimpleNamespace

    counters = SimpleNamespace(phase="main", sent=0, in_flight=0)
    control = SimpleNamespace(stopped=False)
    monitor = ProbeMonitor(1.0, [0], "main", interval_s=0.01)

    async def go() -> None:
        task = asyncio.create_task(
            monitor.watch(
                counters,
                control,
                lambda: ({"vllm:num_requests_waiting": 7.0}, 4.0),
                scrape_interval_s,
            )
        )
        while len(monitor.samples) < 3:
            await asyncio.sleep(0.01)
        control.stopped = True
        await task

    asyncio.run(go())
    assert {smp.waiting for smp in monitor.samples} == {want}


def _run(path: Path, tmp_path: Path, rate: float) -> tuple[ProbeMonitor, dict]:  # type: ignore[type-arg]
    import json

    scn = load_scenario(str(path))
    monitor = ProbeMonitor(rate, [1], "main")
    out = tmp_path / f"r-{rate:g}.json"
    run_command(
        RunArgs(scenario=str(path), out=str(out), adapt=probe_form(scn).at(rate, None), quiet=True),
        monitor=monitor,
    )
    return monitor, json.loads(out.read_text())


@pytest.mark.slow
def test_a_healthy_run_is_never_stopped_and_a_runaway_is(tmp_path: Path) -> None:
    path = tmp_path / "watch.toml"
    path.write_text(SCENARIO)
    mu = service_rate(path, 100.0)  # what this simulator serves, from its virtual clock
    healthy, r = _run(path, tmp_path, 0.5 * mu)
    assert healthy.evidence is None and r["complete"], r["stop_reason"]
    assert len(healthy.samples) > 20 and healthy.samples[-1].done > 0
    assert any(s.waiting is not None for s in healthy.samples)  # the simulator's /metrics was read
    runaway, r = _run(path, tmp_path, 3.0 * mu)
    assert runaway.evidence is not None, "a queue that grows at 2x the service rate was not stopped"
    assert not r["complete"] and "queue grows without bound" in r["stop_reason"]
    ev = runaway.evidence
    assert ev.in_flight_to > ev.in_flight_from and ev.served_per_s < ev.offered_per_s
    # stopped before its planned end: the main phase's arrivals cut short (a count, not a time;
    # 124 of 352 begun on a quiet machine), each begun request still its one record
    main = r["accounting"]["phases"][1]
    assert main["name"] == "main" and main["begun"] < main["planned"]
    assert main["recorded"] == main["begun"] and r["accounting"]["balanced"]
