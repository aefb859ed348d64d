"""`run --ray`: the worker shards as Ray actors on a local Ray instance (ray.init(num_cpus=2)).
The run records exactly the plan's requests, stamped on one start (checked against the server's
truth), with each worker's clock offsets in the result; skew over the bound refuses to start."""

from __future__ import annotations

import numpy as np
import pytest

from harness.cli import main
from harness.client.raycluster import ClockSample, best_offset, check_skew, skew_ms
from harness.errors import UsageError
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


def test_skew_bound_from_the_environment_is_checked(monkeypatch) -> None:
    from harness.client.raycluster import max_skew_ms

    monkeypatch.setenv("HARNESS_RAY_MAX_SKEW_MS", "-1")
    with pytest.raises(UsageError, match="HARNESS_RAY_MAX_SKEW_MS"):
        max_skew_ms()
    monkeypatch.setenv("HARNESS_RAY_MAX_SKEW_MS", "2.5")
    assert max_skew_ms() == 2.5


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'harness[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ray_run_equals_the_plan_on_one_start(local_ray, write_scenario, tmp_path) -> None:
    scn = write_scenario(SCENARIO)
    plan = build_plan(load_scenario(scn, [], None))
    out = tmp_path / "r.json"
    with FakeSSEServer(0.02, 0.004) as srv:
        rc = main(["run", str(scn), "--target", srv.url, "--out", str(out), "--quiet", "--no-probe",
                   "--ray", "auto", "--workers", "2"])
        truth = dict(srv.truth)
    assert rc == 0
    j = read_journal(tmp_path / "r.journal.jsonl")
    want = list(range(plan.phases[0].count)) + [plan.phases[1].first_seq + k for k in range(14)]
    assert sorted(r.seq for r in j.records) == want and all(r.ok for r in j.records)
    # every stamp just after the server wrote the token: both actors share one start instant
    t0, prefix = j.end["t0_ns"], j.end["request_id_prefix"]
    late = []
    for r in j.records:
        writes = np.asarray(truth[f"{prefix}-{r.seq}-0"], dtype=np.int64) - t0
        late.extend((np.asarray(r.chunk_ns) - writes).tolist())
    assert min(late) >= -2_000_000 and np.median(late) < 20e6   # offsets are measured to ~1 ms
    import orjson

    res = orjson.loads(out.read_bytes())
    clock = res["client"]["clock"]
    assert clock["kind"] == "ray" and len(clock["workers"]) == 2
    assert clock["skew_start_ms"] <= clock["max_skew_ms"]
    assert all(abs(w["offset_start_ms"]) < 5 and w["rtt_start_ms"] > 0 for w in clock["workers"])
    assert res["options"]["ray"] == "auto" and res["options"]["workers"] == 2
