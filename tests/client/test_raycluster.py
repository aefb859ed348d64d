"""`run --ray`: the worker shards as Ray actors on a local Ray instance (ray.init(num_cpus=2)).
The run records exactly the plan's requests, one stamp per token the server wrote, with each
worker's clock offsets (start, end, drift) and the skew they add up to in the result; skew over
the bound refuses to start. How close the stamps come to the server's writes is a timing, left
to measurements, not asserted."""

from __future__ import annotations

import math

import pytest

from harness.cli import main
from harness.client.ray_clock import (
    CLOCK_ROUNDS,
    ClockSample,
    best_offset,
    check_skew,
    measure_clocks,
    skew_ms,
)
from harness.client.raycluster import _Actors, _Lines, _ShardActor
from harness.errors import RunAborted, UsageError
from harness.record.journal import read_journal
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario
from tests.client.test_workers import SCENARIO
from tests.fake_sse_server import FakeSSEServer


def test_best_offset_keeps_the_shortest_round_trip() -> None:
    # (local send, driver time, local receive): the second sample has the 2 ms round trip
    s = best_offset([(10.0, 10.5, 10.010), (20.0, 20.504, 20.002), (30.0, 30.4, 30.02)])
    assert s.rtt_s == pytest.approx(0.002) and s.offset_s == pytest.approx(0.503)


def test_skew_over_the_bound_refuses_to_start_in_one_line() -> None:
    ok = [ClockSample(0.001, 0.002), ClockSample(-0.002, 0.001)]
    assert skew_ms(ok) == pytest.approx(2.5)
    check_skew(ok, 10.0)
    with pytest.raises(UsageError) as e:
        check_skew(ok + [ClockSample(-0.050, 0.002)], 10.0)
    msg = str(e.value)
    assert "\n" not in msg and "51.0 ms > 10 ms" in msg and "harness-ray-2" in msg and "NTP" in msg


def test_a_busy_machine_is_measured_again_and_refused_for_its_round_trips_not_its_clock() -> None:
    # A full test run once refused a one-machine Ray run: offset +3 ms, but no round trip of 16
    # under 24 ms, so skew 15 ms > 10. Busy round trips are measured again; each actor keeps its
    # shortest, and the start goes on once the skew is within the bound.
    rounds = iter(
        [
            [ClockSample(0.003, 0.024), ClockSample(0.001, 0.002)],
            [ClockSample(0.0035, 0.030), ClockSample(0.004, 0.050)],
            [ClockSample(0.0031, 0.004), ClockSample(0.002, 0.020)],
        ]
    )
    pauses: list[float] = []
    best = measure_clocks(lambda: next(rounds), 10.0, sleep=pauses.append)
    assert best == [ClockSample(0.0031, 0.004), ClockSample(0.001, 0.002)]
    assert len(pauses) == 2 and pauses[1] > pauses[0] > 0
    assert skew_ms(best) == pytest.approx(5.1)

    # Never short enough: refused after CLOCK_ROUNDS tries, saying the round trip is the cause.
    calls: list[int] = []

    def busy() -> list[ClockSample]:
        calls.append(1)
        return [ClockSample(0.003, 0.024)]

    with pytest.raises(UsageError) as e:
        measure_clocks(busy, 10.0, sleep=lambda _s: None)
    msg = str(e.value)
    assert len(calls) == CLOCK_ROUNDS and "\n" not in msg
    assert "15.0 ms > 10 ms" in msg and "+-12.0 ms" in msg and "24.0 ms" in msg
    assert "too busy" in msg and "NTP" not in msg

    # A clock that is off is refused as such however short its round trips.
    with pytest.raises(UsageError, match=r"offset \+40\.0 ms\): synchronise"):
        measure_clocks(lambda: [ClockSample(0.040, 0.001)], 10.0, sleep=lambda _s: None)


def test_skew_bound_from_the_environment_is_checked(monkeypatch) -> None:
    from harness.client.ray_clock import max_skew_ms

    monkeypatch.setenv("HARNESS_RAY_MAX_SKEW_MS", "-1")
    with pytest.raises(UsageError, match="HARNESS_RAY_MAX_SKEW_MS"):
        max_skew_ms()
    monkeypatch.setenv("HARNESS_RAY_MAX_SKEW_MS", "2.5")
    assert max_skew_ms() == 2.5


class _Lost(Exception):
    """A reply that never arrived (Ray's ObjectLostError and the like are RayErrors)."""


class _FakeRay:
    """ray.get of a `take` reply; the replies listed in `lose` (by call number) are lost."""

    class exceptions:  # noqa: N801 - ray.exceptions' shape
        RayError = _Lost

    def __init__(self, lose: set[int]) -> None:
        self.lose, self.calls = lose, 0

    def get(self, ref):
        self.calls += 1
        if self.calls in self.lose:
            raise _Lost("lost")
        return ref()


class _FakeShard:
    """_ShardActor's take, as a remote method: the batches it ships and keeps until acked."""

    def __init__(self) -> None:
        self.actor = _ShardActor.__new__(_ShardActor)
        self.actor.batches, self.actor.counters = [], {}
        import threading

        self.actor.lock = threading.Lock()
        self.take = self

    def ship(self, number: int) -> None:
        self.actor.batches.append((number, f"line {number}\n".encode()))

    def remote(self, acked: int):
        return lambda: self.actor.take(acked)


def test_a_lost_take_reply_loses_no_lines_and_writes_none_twice() -> None:
    shard = _FakeShard()
    ray = _FakeRay(lose={2, 4, 5})
    written: list[bytes] = []
    lines = _Lines(_Actors(ray, [shard], None, ["h"]), written.append)
    shard.ship(1)
    lines.collect()  # call 1: batch 1 written
    shard.ship(2)
    lines.collect()  # call 2: lost; batch 2 kept by the shard
    shard.ship(3)
    lines.collect()  # call 3: batches 2 and 3
    assert written == [b"line 1\n", b"line 2\n", b"line 3\n"] and lines.missed == [None]
    shard.ship(4)
    lines.finish([4])  # calls 4 and 5 lost, 6 brings batch 4
    assert written[-1] == b"line 4\n" and len(written) == 4
    shard.ship(5)
    ray.lose = set(range(ray.calls + 1, ray.calls + 100))  # every reply lost from now on
    with pytest.raises(RunAborted) as e:
        lines.finish([5])
    assert "harness-ray-0: 1 batches of its records could not be collected" in str(e.value)
    assert "\n" not in str(e.value) and len(written) == 4


class _Journal:
    """The journal execute writes to: only whether it was closed (with no end line)."""

    def __init__(self, path) -> None:  # type: ignore[no-untyped-def]
        self.path, self.closed = path, False

    def write_line(self, _doc) -> None:  # type: ignore[no-untyped-def]
        pass

    write_encoded = write_line

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_a_failed_ray_worker_is_one_line_naming_the_journal(monkeypatch, tmp_path) -> None:
    # as for worker processes: the records shipped before it stay in the journal, read as an
    # interrupted run, and the one line says where they are
    import harness.client.raycluster as rc
    from harness.orchestrate.sharded import execute

    def failed(*_a, **_k):  # type: ignore[no-untyped-def]
        raise RunAborted("a Ray worker failed: harness-ray-1: the actor died")

    monkeypatch.setattr(rc, "run_ray", failed)
    journal = _Journal(tmp_path / "r.journal.jsonl")
    with pytest.raises(RunAborted) as e:
        execute(None, None, 2, journal, True, "auto")  # type: ignore[arg-type]
    msg = str(e.value)
    assert (
        journal.closed and "\n" not in msg and msg.startswith("a Ray worker failed: harness-ray-1")
    )
    assert f"the records before it are in {journal.path} (python -m harness report" in msg


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'harness[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_auto_never_joins_another_process_s_private_ray(local_ray) -> None:
    # CI once saw `run --ray auto` exit 1 with nothing said but Ray's "Attempting to recover 1
    # lost objects": Ray's own address="auto" joins any Ray running on the machine (here this
    # test process's ray.init), and its actors and objects die with that process's Ray. `auto`
    # starts its own where no RAY_ADDRESS or `ray start` cluster names one.
    import os
    import subprocess
    import sys
    from pathlib import Path

    ours = local_ray.get_runtime_context().gcs_address
    code = (
        "from harness.client.raycluster import connect; "
        "print(connect('auto').get_runtime_context().gcs_address)"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = done.stdout.strip().splitlines()[-1]
    assert theirs and theirs != ours


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ray_run_equals_the_plan_on_one_start(local_ray, write_scenario, tmp_path) -> None:
    scn = write_scenario(SCENARIO)
    plan = build_plan(load_scenario(scn, [], None))
    out = tmp_path / "r.json"
    with FakeSSEServer(0.02, 0.004) as srv:
        rc = main(
            [
                "run",
                str(scn),
                "--target",
                srv.url,
                "--out",
                str(out),
                "--quiet",
                "--no-probe",
                "--ray",
                "auto",
                "--workers",
                "2",
            ]
        )
        truth = dict(srv.truth)
    assert rc == 0
    j = read_journal(tmp_path / "r.journal.jsonl")
    want = list(range(plan.phases[0].count)) + [plan.phases[1].first_seq + k for k in range(14)]
    assert sorted(r.seq for r in j.records) == want and all(r.ok for r in j.records)
    # every request the server answered, one stamp per token event it wrote, in order, none
    # before the request went out (how late a stamp came is a timing: not asserted here)
    prefix = j.end["request_id_prefix"]
    for r in j.records:
        writes = truth[f"{prefix}-{r.seq}-0"]
        assert len(r.chunk_ns) == len(writes) > 0, r.seq
        assert (
            list(r.chunk_ns) == sorted(r.chunk_ns)
            and r.sent_ns is not None
            and r.chunk_ns[0] >= r.sent_ns
        )
    import orjson

    res = orjson.loads(out.read_bytes())
    clock = res["client"]["clock"]
    workers = clock["workers"]
    assert clock["kind"] == "ray" and [w["name"] for w in workers] == [
        "harness-ray-0",
        "harness-ray-1",
    ]
    for w in workers:  # each actor's offsets measured at the start and the end, and finite
        assert w["host"] and all(
            math.isfinite(w[k])
            for k in ("offset_start_ms", "rtt_start_ms", "offset_end_ms", "rtt_end_ms", "drift_ms")
        )
        assert w["rtt_start_ms"] > 0 and w["rtt_end_ms"] > 0
        assert w["drift_ms"] == pytest.approx(w["offset_end_ms"] - w["offset_start_ms"])
    for edge in ("start", "end"):  # skew = max over actors of |offset| + half the round trip
        assert clock[f"skew_{edge}_ms"] == pytest.approx(
            max(abs(w[f"offset_{edge}_ms"]) + w[f"rtt_{edge}_ms"] / 2 for w in workers)
        )
    assert (
        clock["skew_start_ms"] <= clock["max_skew_ms"]
    )  # else the run would have refused to start
    assert res["options"]["ray"] == "auto" and res["options"]["workers"] == 2
    # Scale-out says what it did (issue 45): the actors, how many were asked for, each one's
    # share of the requests, CPU peak and clock, and the skew against the bound it held
    from harness.analysis.report_text import render_text

    so = res["client"]["scale_out"]
    assert (so["kind"], so["workers"], so["chosen"], so["ray"]) == ("ray", 2, "--workers 2", "auto")
    rows = so["per_worker"]
    assert [r["name"] for r in rows] == ["harness-ray-0", "harness-ray-1"]
    assert sum(r["requests"] for r in rows) == len(want) and all(r["requests"] for r in rows)
    assert all(r["cpu_peak_share"] > 0 and r["host"] == workers[0]["host"] for r in rows)
    assert [r["offset_start_ms"] for r in rows] == [w["offset_start_ms"] for w in workers]
    assert (so["skew_start_ms"], so["max_skew_ms"]) == (
        clock["skew_start_ms"],
        clock["max_skew_ms"],
    )
    line = next(ln for ln in render_text(res).splitlines() if "scale-out:" in ln)
    assert "2 Ray actors on 1 host (--workers 2); clock skew " in line
    assert f"(bound {clock['max_skew_ms']:g} ms held)" in line and "CPU peak" in line
