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


def _paths(tmp_path: Path) -> tuple[Path, ...]:
    return tuple(
        tmp_path / n for n in ("t", "l", "st", "sl", "pending", "lent", "kinds", "lent-lock")
    )


def test_the_server_hold_keeps_both_locks_until_released(tmp_path: Path) -> None:
    from tests.conftest import _ServerHold

    paths = _paths(tmp_path)
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
        assert not paths[5].exists()  # and no cores lent
        hold.release(paths)
        assert not paths[4].exists()  # light tests after the row run at normal priority
        fcntl.flock(alone, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(server, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_one_core_server_test_lends_the_other_cores_to_slow_tests(tmp_path: Path) -> None:
    import threading

    from tests.conftest import _lent_cores, _ServerHold

    paths = _paths(tmp_path)
    hold = _ServerHold()
    hold.take(paths)  # a test that needs every core: no slow test beside it
    with open(paths[1], "a+b") as alone, open(paths[3], "a+b") as server:
        with pytest.raises(BlockingIOError):
            fcntl.flock(server, fcntl.LOCK_SH | fcntl.LOCK_NB)
        hold.take(paths, [1])  # then a one_core one: the server lock let go, core 1 lent
        assert _lent_cores(paths[5]) == [1]
        fcntl.flock(server, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a slow test starts beside it
        hold.take(paths, [1])  # the next one_core test: lent already, nothing waited for
        with pytest.raises(BlockingIOError):  # alone tests still wait for the whole row
            fcntl.flock(alone, fcntl.LOCK_EX | fcntl.LOCK_NB)

        # a test that needs every core again waits for the slow test beside to end
        taken = threading.Event()

        def take_every_core() -> None:
            hold.take(paths)
            taken.set()

        t = threading.Thread(target=take_every_core)
        t.start()
        assert not taken.wait(0.3), "took the server lock while a slow test held it"
        assert _lent_cores(paths[5]) == [1]
        fcntl.flock(server, fcntl.LOCK_UN)  # the slow test ends
        t.join(timeout=30)
        assert taken.is_set() and not paths[5].exists()  # every core its own again
        with pytest.raises(BlockingIOError):
            fcntl.flock(server, fcntl.LOCK_SH | fcntl.LOCK_NB)
        hold.take(paths, [1])  # lent again for a last one_core test ...
        hold.release(paths)  # ... and after the row nothing is lent or held
        assert not paths[5].exists()
        fcntl.flock(alone, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(server, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_lent_cores_are_read_as_written_and_nothing_else(tmp_path: Path) -> None:
    from tests.conftest import _lent_cores

    path = tmp_path / "lent"
    assert _lent_cores(path) is None  # nothing lent
    path.write_text("1,3", encoding="ascii")
    assert _lent_cores(path) == [1, 3]
    path.write_text("", encoding="ascii")  # half-written: not a core list
    assert _lent_cores(path) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_slow_test_held_to_lent_cores_gets_every_core_back() -> None:
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


def test_the_server_tests_that_need_every_core_go_first() -> None:
    # vLLM's tests take every core; llama.cpp's (one_core) lend one to the slow tests, which
    # come after the light ones in the queue: so llama.cpp's go last in the servers unit
    files = ["tests/integration/test_llamacpp.py", "tests/integration/test_vllm_embeddings.py"]
    ids = _collected(*files)
    servers = [i for i in ids if i.startswith("tests/integration/")]
    llama = _collected(files[0])
    assert servers == _collected(files[1]) + llama  # each file in its own order


@pytest.mark.parametrize(
    ("phase", "want"),
    [
        # vLLM's tests (every core) run: only light units start beside them, at idle priority
        ("every", "light-1"),
        # llama.cpp's (one core, the rest lent): slow units first, on the lent cores
        ("lend", "slow-1"),
        # no server test left: the every_core units first, the longest queued first
        ("free", "every-1"),
    ],
)
def test_the_scheduler_hands_out_what_may_start_now(phase: str, want: str) -> None:
    from tests.conftest import next_unit

    queue = [
        ("light-1", "light"),
        ("slow-1", "slow"),
        ("alone-1", "alone"),
        ("every-1", "every_core"),
        ("slow-2", "slow"),
    ]
    assert next_unit(queue, phase, fillers=0) == want
    assert next_unit([("servers", "server"), *queue], phase) == "servers"  # always first


def test_the_scheduler_holds_back_what_would_only_wait() -> None:
    from tests.conftest import next_unit

    # beside vLLM's tests no slow unit is handed out: its worker would hold it, and what is
    # queued behind it, until they end
    assert next_unit([("slow-1", "slow"), ("every-1", "every_core")], "every") is None
    # beside llama.cpp's, an every_core unit once no slow one is queued (it takes the lent core
    # when the slow ones there end), one at a time
    assert next_unit([("every-1", "every_core"), ("slow-1", "slow")], "lend") == "slow-1"
    assert next_unit([("every-1", "every_core")], "lend", running=("server", "slow")) == "every-1"
    assert next_unit([("every-2", "every_core")], "lend", running=("every_core",)) is None
    queue = [("every-2", "every_core"), ("light-1", "light")]
    assert next_unit(queue, "lend", running=("every_core",), fillers=0) == "light-1"
    # an alone unit only when nothing else is left: it waits for every other test to end
    assert next_unit([("alone-1", "alone"), ("light-1", "light")], "free") == "light-1"
    assert next_unit([("alone-1", "alone")], "free") == "alone-1"
    assert next_unit([], "free") is None


def test_beside_a_server_test_four_workers_hold_units_and_after_it_all() -> None:
    from tests.conftest import BESIDE_SERVER, may_take_a_unit

    assert BESIDE_SERVER == 4  # the lent core's slow tests, as with five workers (docs/testing.md)
    # beside vLLM's or llama.cpp's tests a free worker gets a unit while fewer than four others
    # (the servers' worker not counted) hold one; a sixth waits
    for phase in ("every", "lend"):
        assert may_take_a_unit(phase, holds=False, others_busy=3)
        assert not may_take_a_unit(phase, holds=False, others_busy=4)
        # a worker that holds a test gets its next one whatever the count: xdist runs a held
        # test only once the worker holds another
        assert may_take_a_unit(phase, holds=True, others_busy=4)
    # after the server tests every worker takes units: the six long tests that start then
    # (five virtual-capacity searches and test_capacity_converges) start together
    assert may_take_a_unit("free", holds=False, others_busy=5)


def test_a_held_test_that_waits_for_a_next_one_gets_a_filler() -> None:
    from tests.conftest import next_unit

    # a worker runs a test only once it holds the next one: the shortest light units are kept
    # back for that while longer ones are left
    lights = [("light-long", "light"), ("light-short", "light")]
    queue = [("every-2", "every_core"), *lights]
    running = ("server", "every_core")
    # beside llama.cpp's with an every_core unit out: a free worker gets no filler (it would
    # only hold it), the longer light unit
    assert next_unit(queue, "lend", running=running, fillers=1) == "light-long"
    short = queue[:1] + lights[1:]
    assert next_unit(short, "lend", running=running, fillers=1) is None
    # a worker holding a slow test gets the filler, which lets the slow test start (a full run
    # of 2026-12-04: four slow tests so held waited 81 s for the server tests to end)
    assert next_unit(short, "lend", "slow", running, fillers=1) == "light-short"
    # ... and with no filler left, the every_core unit rather than nothing
    assert next_unit(queue[:1], "lend", "slow", running, fillers=1) == "every-2"
    # a worker holding a light test (a filler) gets none: it holds nothing that ought to start
    assert next_unit(short, "lend", "light", running, fillers=1) is None
    # during vLLM's tests, likewise: the filler for a held server test, not for a held light one
    assert next_unit(short, "every", "server", fillers=1) == "light-short"
    assert next_unit(short, "every", "light", fillers=1) is None
    # after the server tests, once nothing long is left, the kept ones go as any other
    assert next_unit(lights[1:], "free", fillers=1) == "light-short"
    assert next_unit([*lights[1:], ("alone-1", "alone")], "free", fillers=1) == "light-short"


def test_an_every_core_unit_is_not_queued_behind_another_while_others_are_left() -> None:
    from tests.conftest import next_unit

    queue = [("every-2", "every_core"), ("slow-1", "slow"), ("light-1", "light")]
    # a worker holds its every_core test until it holds the next one, and that one until the
    # every_core one ends: any other kind first
    assert next_unit(queue, "free", behind="every_core") == "slow-1"
    assert next_unit(queue, "free", behind="slow") == "every-2"  # elsewhere, the longest first
    # a kept filler before another every_core unit (a full run of 2026-12-04: three every_core
    # units handed out behind running ones waited 70 s while two workers were free)
    queue = [("every-2", "every_core"), ("every-3", "every_core"), ("light-1", "light")]
    assert next_unit(queue, "free", behind="every_core", fillers=1) == "light-1"
    assert next_unit(queue, "free", behind="light", fillers=1) == "every-2"
    # nor an alone unit, while any other is left: it would stop every worker until it ran
    # (a full run of 2026-12-04: handed out behind the bursty capacity test, 25 s of nothing)
    queue = [("every-2", "every_core"), ("alone-1", "alone")]
    assert next_unit(queue, "free", behind="every_core") == "every-2"
    # with nothing else left it still gets one (a worker holding one test cannot run it): the
    # shortest, queued last (a full run of 2026-12-04 queued the 66 s one behind a 72 s one
    # while a worker sat free for 71 s)
    assert next_unit([("every-2", "every_core")], "free", behind="every_core") == "every-2"
    queue = [("every-66s", "every_core"), ("every-4s", "every_core"), ("alone-1", "alone")]
    assert next_unit(queue, "free", behind="every_core") == "every-4s"
    assert next_unit(queue, "free", behind="light") == "every-66s"  # a free worker: the longest


@pytest.mark.parametrize(
    ("kinds", "unit"),
    [
        (["light", "slow", "light"], "slow"),
        (["slow", "every_core"], "every_core"),
        (["server", "one_core"], "server"),  # vLLM's and llama.cpp's tests: one unit
        (["one_core"], "server"),
        (["light", "alone"], "alone"),
    ],
)
def test_a_unit_is_its_heaviest_test(kinds: list[str], unit: str) -> None:
    from tests.conftest import unit_kind

    assert unit_kind(kinds) == unit


def test_an_every_core_test_has_the_lent_cores_to_itself_or_every_core(tmp_path: Path) -> None:
    import contextlib
    import threading

    from tests.conftest import _server_lock_shared, _ServerHold

    paths = _paths(tmp_path)
    hold = _ServerHold()
    hold.take(paths, [1])  # a one_core test lends core 1
    slow = contextlib.ExitStack()  # a slow test runs there
    assert _server_lock_shared(slow, paths, every_core=False) == [1]
    got: list[list[int] | None] = []

    def every_core_test() -> None:
        with contextlib.ExitStack() as held:
            got.append(_server_lock_shared(held, paths, every_core=True))
            if got[-1] is not None:  # on the lent core: meanwhile no slow test starts there
                with open(paths[7], "a+b") as lent_lock, pytest.raises(BlockingIOError):
                    fcntl.flock(lent_lock, fcntl.LOCK_SH | fcntl.LOCK_NB)

    t = threading.Thread(target=every_core_test)
    t.start()
    t.join(timeout=2.5)  # more than two polls
    assert t.is_alive() and not got, "an every_core test shared the lent core with a slow one"
    slow.close()  # the slow test ends: the lent core is the every_core test's
    t.join(timeout=30)
    assert got == [[1]]

    got.clear()
    slow = contextlib.ExitStack()
    assert _server_lock_shared(slow, paths, every_core=False) == [1]
    t = threading.Thread(target=every_core_test)
    t.start()
    t.join(timeout=2.5)
    assert t.is_alive() and not got
    hold.release(paths)  # the server tests are done: nothing lent
    t.join(timeout=30)
    assert got == [None]  # it ran, on every core
    slow.close()
