"""The suite's own scheduling (tests/conftest.py): work units, their order, the exclusive lock."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import (
    CAN_IDLE,
    DURATIONS,
    GROUPS,
    REPO,
    SERVERS,
    _idle_priority,
    _server_busy,
    work_unit,
)


def test_every_group_names_a_test_file_that_exists() -> None:
    for path in GROUPS:
        assert (REPO / path).is_file(), path


def test_every_file_with_a_real_server_test_is_in_the_servers_group() -> None:
    # one worker runs them one after another; a server test in a unit of its own would wait on
    # another worker, holding the server turnstile, for minutes
    marked = {
        str(p.relative_to(REPO))
        for p in (REPO / "tests").rglob("test_*.py")
        if re.search(r"pytest\.mark\.(vllm|llamacpp)\b", p.read_text(encoding="utf-8"))
    }
    assert marked == {f for f, g in GROUPS.items() if g == SERVERS}


@pytest.mark.parametrize(
    ("nodeid", "unit"),
    [
        # a test of a grouped file: the group
        ("tests/integration/test_vllm.py::test_run_at_max_num_seqs_8", SERVERS),
        ("tests/integration/test_llamacpp_capacity.py::test_x", SERVERS),
        # a parametrized test of a grouped file: the group too
        ("tests/reliability/test_faults.py::test_fault_kind[http500-http_500-fast]", "faults"),
        # any other test: alone
        ("tests/client/test_sse.py::test_x", "tests/client/test_sse.py::test_x"),
    ],
)
def test_work_unit(nodeid: str, unit: str) -> None:
    assert work_unit(nodeid) == unit


def test_the_measured_durations_name_files_that_exist() -> None:
    seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    assert seconds and all(isinstance(v, float | int) and v >= 1.0 for v in seconds.values())
    missing = {k.split("::")[0] for k in seconds} - {
        str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
    }
    assert not missing, f"tests/durations.json names files that are gone: {sorted(missing)}"


def _collected(*args: str) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_the_longest_unit_is_collected_first_and_a_group_keeps_file_order() -> None:
    seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    files = ["tests/client/test_sse.py", "tests/reliability/test_faults.py", "tests/test_e2e.py"]
    ids = _collected(*files)
    in_file_order = [i for f in files for i in _collected(f)]
    assert sorted(ids) == sorted(in_file_order)
    # the faults group (its tests summed) outweighs any single test here, so it comes first,
    # whole and in file order
    faults = [i for i in in_file_order if i.startswith("tests/reliability/test_faults.py")]
    assert ids[: len(faults)] == faults
    rest = ids[len(faults) :]
    weights = [seconds.get(i, 0.5) for i in rest]
    assert weights == sorted(weights, reverse=True)  # then the single tests, longest first


def test_server_units_first_then_light_then_slow_and_alone_last() -> None:
    files = [
        "tests/integration/test_llamacpp_argv.py",  # light: unit tests, under 1 s
        "tests/integration/test_llamacpp.py",  # server: a minute or more
        "tests/test_e2e.py",  # slow: real-time runs on the simulator
        "tests/test_bench_tools.py",  # light, and one alone (the truth-log clock test)
    ]
    ids = _collected(*files)
    alone = "tests/test_bench_tools.py::test_plain_client_records_match_the_truth_log"

    def kind(nodeid: str) -> str:
        if nodeid.startswith("tests/integration/test_llamacpp.py::"):
            return "server"
        if nodeid == alone:
            return "alone"
        return "slow" if nodeid.startswith("tests/test_e2e.py::") else "light"

    kinds = [kind(i) for i in ids]
    order = ["server", "light", "slow", "alone"]
    assert kinds == sorted(kinds, key=order.index), kinds
    assert set(kinds) == set(order)
    # the server group keeps its file order
    servers = [i for i in ids if kind(i) == "server"]
    assert servers == _collected("tests/integration/test_llamacpp.py")


def test_without_a_server_unit_the_longest_go_first_and_alone_last() -> None:
    seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    ids = _collected("tests/test_e2e.py", "tests/test_bench_tools.py")
    alone = "tests/test_bench_tools.py::test_plain_client_records_match_the_truth_log"
    assert ids[-1] == alone
    weights = [seconds.get(i, 0.5) for i in ids[:-1]]
    assert weights == sorted(weights, reverse=True)


def test_a_light_test_sees_a_server_test_by_its_turnstile(tmp_path: Path) -> None:
    turnstile = tmp_path / "t"
    assert not _server_busy(turnstile)
    with open(turnstile, "a+b") as held:  # a server test waiting or running holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        assert _server_busy(turnstile)
        fcntl.flock(held, fcntl.LOCK_UN)
    assert not _server_busy(turnstile)


@pytest.mark.skipif(not CAN_IDLE, reason="this machine does not let a thread leave SCHED_IDLE")
def test_idle_priority_is_left_after_the_test() -> None:
    import os

    # (the test itself may run idle: beside a server test under xdist)
    with _idle_priority():
        assert os.sched_getscheduler(0) == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_an_exclusive_lock_waits_for_a_shared_one(tmp_path: Path) -> None:
    # The mechanism the conftest's readers-writer lock rests on: flock on one file from two
    # open() calls (as two workers hold it) excludes across them.
    lock = tmp_path / "l"
    with open(lock, "a+b") as shared, open(lock, "a+b") as other:
        fcntl.flock(shared, fcntl.LOCK_SH)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared beside shared is fine
        fcntl.flock(other, fcntl.LOCK_UN)
        fcntl.flock(shared, fcntl.LOCK_UN)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_server_hold_keeps_both_locks_until_released(tmp_path: Path) -> None:
    from tests.conftest import _ServerHold

    paths = tuple(tmp_path / n for n in ("t", "l", "st", "sl", "pending"))
    paths[4].touch()
    hold = _ServerHold()
    hold.take(paths)
    hold.take(paths)  # a second server test in the row: nothing more taken
    with open(paths[1], "a+b") as alone, open(paths[3], "a+b") as server:
        with pytest.raises(BlockingIOError):  # an alone test cannot start ...
            fcntl.flock(alone, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(alone, fcntl.LOCK_SH | fcntl.LOCK_NB)  # ... others may share it
        fcntl.flock(alone, fcntl.LOCK_UN)
        with pytest.raises(BlockingIOError):  # no slow test beside the server tests
            fcntl.flock(server, fcntl.LOCK_SH | fcntl.LOCK_NB)
        hold.release(paths[4])
        assert not paths[4].exists()  # light tests after the row run at normal priority
        fcntl.flock(alone, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(server, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_thread_held_to_some_cores_gets_every_core_back() -> None:
    # capacity_runs.on_cores: CpuSplit's client (the tests against real servers) runs on it
    from tests.integration.capacity_runs import on_cores

    before = os.sched_getaffinity(0)
    one = min(before)
    with on_cores([one]):
        assert os.sched_getaffinity(0) == {one}
        child = subprocess.run(  # what it starts meanwhile is held there too
            [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.stdout.strip() == f"[{one}]"
    assert os.sched_getaffinity(0) == before
