"""Worker processes: shards are disjoint and complete, closed-loop users leave no slot idle,
outcomes merge, and a `--workers 2` run records exactly the single-process set of requests,
on one shared t0 (checked against the server's truth), with a result independent of the order
in which the workers' records reached the journal."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from harness.analysis.result import build_result
from harness.cli import main
from harness.client.shard import closed_users, in_shard, merge_outcomes
from harness.client.workers import auto_workers, parse_workers
from harness.record.journal import Journal, read_journal
from harness.record.records import Record
from harness.workload.plan import Plan, build_plan
from harness.workload.scenario import load_scenario
from tests.fake_sse_server import FakeSSEServer

SCENARIO = """
name = "wk"
seed = 4
[workload]
prompt_tokens = { dist = "fixed", value = 10 }
output_tokens = { dist = "fixed", value = 12 }
[[phases]]
name = "open"
duration = "1.5s"
arrival = { process = "poisson", rate = 20 }
[[phases]]
name = "closed"
requests = 14
arrival = { process = "closed", users = 3 }
"""


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_open_loop_shards_partition_the_plan(n: int) -> None:
    owners = [[w for w in range(n) if in_shard(k, (w, n))] for k in range(100)]
    assert all(len(o) == 1 for o in owners)  # each request in one shard
    counts = np.bincount([o[0] for o in owners], minlength=n)
    assert counts.max() - counts.min() <= 1  # round-robin: even shares


@pytest.mark.parametrize(
    ("users", "n", "want"),
    [
        (3, 2, [[0, 2], [1]]),  # 3 users on 2 workers: 2 + 1, no slot idle
        (4, 4, [[0], [1], [2], [3]]),  # one each
        (1, 2, [[0], []]),  # fewer users than workers: the extra worker has none
    ],
)
def test_closed_users_split(users: int, n: int, want: list[list[int]]) -> None:
    assert [closed_users(users, (w, n)) for w in range(n)] == want


@pytest.mark.parametrize(("value", "want"), [(None, 1), ("1", 1), ("3", 3), (4, 4)])
def test_parse_workers(write_scenario, value: object, want: int) -> None:
    plan = build_plan(load_scenario(write_scenario(SCENARIO), [], None))
    assert parse_workers(value, plan) == want  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["0", "-1", "two", "2000"])
def test_parse_workers_refuses(write_scenario, value: str) -> None:
    plan = build_plan(load_scenario(write_scenario(SCENARIO), [], None))
    with pytest.raises(ValueError, match="auto"):
        parse_workers(value, plan)


def test_auto_workers_bounds(write_scenario) -> None:
    plan = build_plan(load_scenario(write_scenario(SCENARIO), [], None))
    assert auto_workers(plan, cpus=8) == 1  # 20 req/s: one is plenty
    big = plan.phases[1]
    heavy = replace(plan, phases=(replace(big, users=5000),))
    assert auto_workers(heavy, cpus=8) == 5  # 5000 streams / 1000 each
    assert auto_workers(heavy, cpus=2) == 2  # never more than the CPUs


def test_merge_outcomes() -> None:
    a = {
        "end_ns": 5,
        "phase_starts_ns": [0, 3],
        "phase_ends_ns": [3, 5],
        "complete": True,
        "stop_reason": None,
        "cpu_s": 1.0,
        "loop_lag_ns": [2, 9],
    }
    b = {
        "end_ns": 7,
        "phase_starts_ns": [0, 4],
        "phase_ends_ns": [4, 7],
        "complete": False,
        "stop_reason": "interrupted (SIGINT)",
        "cpu_s": 0.5,
        "loop_lag_ns": [1],
    }
    m = merge_outcomes([a, b], 100, 1.5)
    assert (m.end_ns, m.phase_starts_ns, m.phase_ends_ns) == (7, [0, 3], [4, 7])
    assert (m.complete, m.stop_reason, m.cpu_s, m.loop_lag_ns) == (
        False,
        "interrupted (SIGINT)",
        1.5,
        [1, 2, 9],
    )


def test_bad_workers_flag_is_one_line(write_scenario, capsys) -> None:
    rc = main(
        ["run", str(write_scenario(SCENARIO)), "--target", "http://127.0.0.1:9", "--workers", "0"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--workers" in err[0] and "auto" in err[0]


@pytest.mark.slow
@pytest.mark.parametrize("client", ["fast", "aiohttp"])
def test_two_workers_equal_one_process(write_scenario, tmp_path, client: str) -> None:
    scn = write_scenario(SCENARIO)
    plan = build_plan(load_scenario(scn, [], None))
    outs = {}
    with FakeSSEServer(0.02, 0.004) as srv:
        for workers in ("1", "2"):
            out = tmp_path / f"r{workers}.json"
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
                    "--workers",
                    workers,
                    "--http-client",
                    client,
                ]
            )
            assert rc == 0
            outs[workers] = out
        truth = dict(srv.truth)
    j1 = read_journal(tmp_path / "r1.journal.jsonl")
    j2 = read_journal(tmp_path / "r2.journal.jsonl")
    open_n = plan.phases[0].count
    want = list(range(open_n)) + [plan.phases[1].first_seq + k for k in range(14)]
    # The same requests, each exactly once: the union of the shards is the plan.
    assert sorted(r.seq for r in j1.records) == want
    assert sorted(r.seq for r in j2.records) == want
    assert all(r.ok for r in j2.records)
    # Same intended times for the open-loop requests: the arrival shape is the plan's.
    i1 = {r.seq: r.intended_ns for r in j1.records if r.phase == 0}
    i2 = {r.seq: r.intended_ns for r in j2.records if r.phase == 0}
    assert i1 == i2
    # One shared t0: every worker's stamps sit just after the server's writes.
    t0, prefix = j2.end["t0_ns"], j2.end["request_id_prefix"]
    late = []
    for r in j2.records:
        writes = np.asarray(truth[f"{prefix}-{r.seq}-0"], dtype=np.int64) - t0
        late.extend((np.asarray(r.chunk_ns) - writes).tolist())
    assert min(late) >= 0 and np.median(late) < 20e6
    # Exact merge: the result does not depend on the order the workers' records arrived in.
    shuffled = list(j2.records)
    random.Random(1).shuffle(shuffled)
    a = build_result(j2)
    b = build_result(Journal(j2.header, records=shuffled, events=j2.events, end=j2.end))
    assert a["summary"] == b["summary"] and a["histograms"] == b["histograms"]
    assert build_result(j2)["options"]["workers"] == 2
    # What each ran (issue 45): the result says how many, how chosen, each one's share of the
    # requests and its CPU peak; the report's scale-out line says it from the result.
    import orjson

    from harness.analysis.report_text import render_text

    one, two = (orjson.loads(outs[w].read_bytes())["client"]["scale_out"] for w in ("1", "2"))
    assert (one["workers"], one["kind"], one["chosen"]) == (1, "process", "--workers 1")
    assert [r["requests"] for r in one["per_worker"]] == [len(want)]
    assert one["per_worker"][0]["cpu_peak_share"] > 0  # one process samples its peak too
    assert (two["workers"], two["kind"], two["chosen"]) == (2, "processes", "--workers 2")
    rows = two["per_worker"]
    assert [r["name"] for r in rows] == ["harness-worker-0", "harness-worker-1"]
    per_shard = [sum(1 for r in j2.records if _in_shard_of(r, plan, (i, 2))) for i in range(2)]
    assert [r["requests"] for r in rows] == per_shard and sum(per_shard) == len(want)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert all(r["cpu_s"] > 0 and r["cpu_peak_share"] > 0 for r in rows)
    text = render_text(orjson.loads(outs["2"].read_bytes()))
    line = next(ln for ln in text.splitlines() if "scale-out:" in ln)
    assert "2 worker processes (--workers 2)" in line
    assert f"requests {per_shard[0]} (" in line and "CPU peak" in line


def _in_shard_of(r: Record, plan: Plan, shard: tuple[int, int]) -> bool:
    """Whether record r's request belongs to the shard (open loop: by index in its phase;
    closed loop with a count: by its user slot)."""
    from harness.client.shard import closed_request_in_shard

    p = plan.phases[r.phase]
    k = r.seq - p.first_seq
    if p.closed:
        return closed_request_in_shard(k, p.users, shard)
    return in_shard(k, shard)


class _KillingServer(FakeSSEServer):
    """Kills worker process harness-worker-1 (SIGKILL) when its first request arrives."""

    def respond(self, i, request):  # type: ignore[no-untyped-def]
        import multiprocessing
        import os
        import signal

        for p in multiprocessing.active_children():
            if p.name == "harness-worker-1" and p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
        return super().respond(i, request)


@pytest.mark.slow
def test_a_dying_worker_is_a_one_line_abort(write_scenario, tmp_path, capsys) -> None:
    scn = write_scenario(SCENARIO)
    out = tmp_path / "r.json"
    with _KillingServer(0.02, 0.004) as srv:
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
                "--workers",
                "2",
                "--grace",
                "1",
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1, err
    assert len(err) == 1 and err[0].startswith("error: worker harness-worker-1 failed: "), err
    assert "killed by SIGKILL" in err[0] and "r.journal.jsonl" in err[0]
    assert "Traceback" not in err[0]
    # The records shipped before the failure are readable.
    assert read_journal(tmp_path / "r.journal.jsonl").header is not None


def test_a_failing_worker_is_a_one_line_abort(write_scenario) -> None:
    from harness.client.engine import EngineConfig
    from harness.client.workers import run_workers
    from harness.config.target import Target
    from harness.errors import RunAborted

    scn = load_scenario(write_scenario(SCENARIO), [], None)
    plan = build_plan(scn)
    cfg = EngineConfig(
        Target("t", "http://127.0.0.1:9", "m", "chat"), scn.workload, http_client="bogus"
    )
    with pytest.raises(RunAborted) as exc:
        run_workers(plan, cfg, 2, lambda b: None, lambda: None, quiet=True)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("worker harness-worker-")
    assert "ValueError: expected one of auto, fast, aiohttp, got 'bogus'" in msg


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        ("0", "0"),  # no workers
        ("1.5", "1.5"),  # not whole
        ('"many"', "'many'"),  # not "auto"
        ("true", "True"),  # a bool is not a count
    ],
)
def test_config_workers_refused_in_one_line(
    write_scenario, tmp_path, capsys, value: str, bad: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[client]\nworkers = {value}\n")
    rc = main(
        [
            "run",
            str(write_scenario(SCENARIO)),
            "--target",
            "http://127.0.0.1:9",
            "--config",
            str(cfg),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "client.workers" in err[0] and "auto" in err[0] and bad in err[0] and str(cfg) in err[0]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("[client]\nworkers = 3\n", 3),
        ('[client]\nworkers = "auto"\n', "auto"),
        ('[inference]\nmodel = "m"\n', None),  # no [client]: one process
    ],
)
def test_config_workers_parsed(tmp_path, text: str, want: object) -> None:
    from harness.config.configfile import load_config

    p = tmp_path / "config.toml"
    p.write_text(text)
    assert load_config(p).client.workers == want


@pytest.mark.slow
def test_config_workers_run_and_command_line_wins(write_scenario, tmp_path) -> None:
    scn = write_scenario(SCENARIO.replace('duration = "1.5s"', 'duration = "0.5s"'))
    cfg = tmp_path / "config.toml"
    cfg.write_text("[client]\nworkers = 2\n")
    with FakeSSEServer(0.01, 0.002) as srv:
        for extra, want in (([], 2), (["--workers", "1"], 1)):
            out = tmp_path / f"r{want}.json"
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
                    "--config",
                    str(cfg),
                    *extra,
                ]
            )
            assert rc == 0
            assert (
                build_result(read_journal(tmp_path / f"r{want}.journal.jsonl"))["options"][
                    "workers"
                ]
                == want
            )


@pytest.mark.slow
def test_worker_run_scrapes_server_metrics(tmp_path) -> None:
    """`--workers 2` against the built-in simulator: the parent polls /metrics as one process does."""
    import subprocess
    import sys

    import orjson

    from tests.conftest import REPO

    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(REPO / "scenarios" / "burst.toml"),
            "--out",
            str(out),
            "--set",
            "phases.0.duration=1s",
            "--set",
            "phases.1.duration=2s",
            "--set",
            "phases.2.duration=1s",
            "--set",
            "phases.3.duration=1s",
            "--set",
            "sim.speedup=5",  # at x20 a request lasts ~65 ms: a poll could see none running
            "--workers",
            "2",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    r = orjson.loads(out.read_bytes())
    sm = r["server_metrics"]
    assert r["options"]["workers"] == 2
    assert sm["available"] and sm["polls"] >= 3 and sm["peaks"]["running"]["max"] >= 1


PRE = """
name = "pre"
seed = 1
[workload]
prompt_tokens = {{ dist = "fixed", value = 4 }}
output_tokens = {{ dist = "fixed", value = 4 }}
[[phases]]
name = "a"
duration = "{d}"
arrival = {arrival}
{cap}
[[phases]]
name = "b"
duration = "1s"
arrival = {{ process = "closed", users = 50 }}
"""


@pytest.mark.parametrize(
    ("arrival", "cap", "shard", "want"),
    [
        ('{ process = "closed", users = 7 }', "", (0, 1), 7),  # every user at once
        ('{ process = "closed", users = 7 }', "", (1, 2), 3),  # user slots 1, 3, 5
        ('{ process = "constant", rate = 10 }', "", (0, 1), 10),  # arrivals in the first second
        ('{ process = "constant", rate = 10 }', "", (1, 3), 3),  # requests 1, 4, 7 of 0..9
        ('{ process = "constant", rate = 10 }', "max_concurrency = 4", (0, 1), 4),  # the cap
        ('{ process = "constant", rate = 10 }', "max_concurrency = 4", (1, 3), 2),  # its share
    ],
)
def test_preconnect_count(
    write_scenario, arrival: str, cap: str, shard: tuple[int, int], want: int
) -> None:
    from harness.client.engine import preconnect_count

    plan = build_plan(
        load_scenario(write_scenario(PRE.format(arrival=arrival, d="5s", cap=cap)), [], None)
    )
    assert preconnect_count(plan, shard) == want


@pytest.mark.slow
def test_a_slow_parent_never_breaks_a_worker(write_scenario) -> None:
    """Record batches larger than a pipe's buffer while the parent is busy (here: its journal
    write stalls for 3 s) wait in the worker's sender thread; they used to fail as a
    non-blocking write (BlockingIOError) because the event loop watched the same pipe."""
    from harness.client.engine import EngineConfig
    from harness.client.workers import run_workers
    from harness.config.target import Target

    scn = load_scenario(
        write_scenario("""
name = "big"
seed = 2
[workload]
prompt_tokens = { dist = "fixed", value = 4 }
output_tokens = { dist = "fixed", value = 400 }
[[phases]]
name = "closed"
requests = 300
arrival = { process = "closed", users = 8 }
"""),
        [],
        None,
    )
    plan = build_plan(scn)
    got: list[bytes] = []

    def write_lines(b: bytes) -> None:
        if not got:
            import time

            time.sleep(3.0)
        got.append(b)

    with FakeSSEServer(0.0, 0.0) as srv:
        cfg = EngineConfig(Target("t", srv.url, "m", "chat"), scn.workload)
        outcome = run_workers(plan, cfg, 2, write_lines, lambda: None, quiet=True)
    lines = b"".join(got).splitlines()
    assert outcome.complete and len(lines) == 300
    assert sum(len(b) for b in got[1:]) > 1 << 19  # more than a socket buffer waited
