"""Shared fixtures (paths, a helper to write scenario files) and the suite's scheduling.

The suite runs on pytest-xdist's workers (pyproject.toml: `-n 6`). The work units are this
file's, not xdist's (`pytest_xdist_make_scheduler` below): the tests of a file in GROUPS share
an expensive module-scoped fixture (a vLLM server, a simulator run that several tests read, a
Ray cluster), so one worker runs them all, in file order, and the fixture is built once. Every
other test is a unit of its own.
(xdist's own `--dist loadgroup` groups by a suffix it writes into each node id, which pytest
9.2 no longer keeps: the groups silently fell apart, one vLLM server per worker.)

Kinds of test, by marker (`kind_of`), decide what may run beside what:
- **server** (`vllm`, `llamacpp`): a real server takes a core for its engine and a good part
  of the other. No other server test runs beside it, and no slow test beside one that needs
  every core (vLLM's): run beside one, the simulator's real-time tests were starved of CPU and
  failed (docs/testing.md). All of them are one work unit (GROUPS), so one worker runs them one
  after another, those that need every core first. A `one_core` server test (llama.cpp: its one
  thread and its HTTP side held to a core of their own, `CpuSplit`) lends the other cores: the
  other workers' slow tests run beside it, each held to those cores (four at most:
  BESIDE_SERVER).
- **slow** (`slow`, the rest, and `timing`: a short test whose pauses must hold): real-time
  runs against the simulator, servers started; they run beside each other and beside light
  tests, and on lent cores.
- **every_core**: a slow test that needs its share of the machine (a capacity search that
  may answer UNRELIABLE when starved, a CPU-share or timing check that failed on a crowded
  lent core): never beside a server test that needs every core, and on lent cores only with
  no other slow test there (one at a time, `_server_lock_shared`).
- **light** (no marker, or `virtual`: slow but on the virtual clock): pure code and short
  loopback tests, which measure no time. Beside a server test they run at the scheduler's idle
  priority (SCHED_IDLE: CPU the server leaves unused, never CPU it wants), where the worker can
  come back from it; where it cannot (no privilege), they wait like slow tests.
- **alone** (`exclusive`): nothing beside it (a test that compares clocks to a few ms).

The locks (`pytest_runtest_protocol`) make that hold whatever order the tests come in. The
order is the scheduler's (`Scheduler`, in the controller), so that no worker is handed a test
that would only wait (it holds it, and the tests queued behind it, until it may run): while a
server test that needs every core runs, it hands out light units; while a `one_core` one runs,
slow units, then (none of them left) one every_core unit at a time, then light ones;
after the server tests, the every_core units first (the longest),
then slow, light, and the alone ones last; behind an every_core unit, any other first. Within
a kind, the collection order (`pytest_collection_modifyitems`): the longest first
(tests/durations.json, measured; docs/testing.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Property tests check what code does, never how fast: hypothesis's default 200 ms deadline per
# example and its too-slow health check are timing asserts, and on the shared 2-core machine
# (light tests run at idle priority beside the server tests) they failed tests that were right.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

REPO = Path(__file__).resolve().parent.parent

# Bytecode, as an installed harness has it. This machine kind sets PYTHONDONTWRITEBYTECODE, so
# with the editable install every `python -m harness` a test starts compiled the package from
# source (1.2 CPU-s for `run --help` against 0.8 with bytecode), and every xdist worker rewrote
# and compiled every test module (collection 14 CPU-s against 4.6; docs/testing.md). Set here,
# in the process that starts the workers, it reaches them and every process the tests start.
# (The assertion rewriter reads the flag per module, after this file is loaded.)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_TEST_S = 0.5  # a test not in durations.json (new, or under a second when measured)


# file -> group: the file's tests run on one worker, in file order (module-scoped fixtures)
SERVERS = "servers"  # every test that starts a real server: one after another, on one worker
GROUPS = {
    "tests/integration/test_llamacpp.py": SERVERS,  # the runs at --parallel 1, 4, 8
    "tests/integration/test_llamacpp_capacity.py": SERVERS,
    "tests/integration/test_vllm.py": SERVERS,  # one vLLM server; the last test kills it
    "tests/integration/test_vllm_embeddings.py": SERVERS,  # vLLM's pooling runner
    "tests/reliability/test_faults.py": "faults",  # the fault-free run every test compares to
    "tests/test_api.py": "api",
    "tests/client/test_raycluster.py": "ray",  # one local Ray cluster
    "tests/analysis/test_result_types.py": "result_types",
    "tests/analysis/test_html.py": "html",
}


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled in: its file's group, or the test alone."""
    return GROUPS.get(nodeid.split("::", 1)[0], nodeid)


SERVER, SLOW, LIGHT, ALONE = "server", "slow", "light", "alone"
EVERY_CORE, ONE_CORE = "every_core", "one_core"  # a slow test never lent; a lending server test
VIRTUAL_TIMEOUT_S = 1200


def kind_of(item: pytest.Item) -> str:
    """server, alone, slow or light, by the test's markers (this file's docstring)."""
    if any(item.get_closest_marker(m) is not None for m in ("vllm", "llamacpp")):
        return SERVER
    if item.get_closest_marker("exclusive") is not None:
        return ALONE
    if item.get_closest_marker("timing") is not None:
        return SLOW  # short, but its pauses must hold: not at idle priority
    if item.get_closest_marker("virtual") is not None:
        return LIGHT
    return SLOW if item.get_closest_marker("slow") is not None else LIGHT


def schedule_kind(item: pytest.Item) -> str:
    """What the scheduler needs to know of a test: its kind, with a server test that lends
    cores (`one_core`) and a slow test that is never lent (`every_core`) told apart."""
    kind = kind_of(item)
    if kind == SERVER and item.get_closest_marker(ONE_CORE) is not None:
        return ONE_CORE
    if kind == SLOW and item.get_closest_marker(EVERY_CORE) is not None:
        return EVERY_CORE
    return kind


def unit_kind(kinds: list[str]) -> str:
    """A unit is what its heaviest test is: alone > server > every_core > slow > light."""
    if any(k in (SERVER, ONE_CORE) for k in kinds) and ALONE not in kinds:
        return SERVER
    return max(kinds, key=[LIGHT, SLOW, EVERY_CORE, ALONE].index)


# What may start, by what the server unit is doing ("every": a server test that needs every
# core; "lend": a one_core one; "free": no server test left), each kind in order of preference.
# Beside a one_core test an every_core unit goes out only once no slow one is left to hand out,
# and one at a time: it takes the lent core when the slow tests there end (`_server_lock_shared`).
STARTS = {
    "every": (LIGHT,),
    "lend": (SLOW, EVERY_CORE, LIGHT),
    "free": (EVERY_CORE, SLOW, LIGHT, ALONE),
}


# Workers, besides the servers' own, that hold units while a server test runs. Four: more slow
# tests on a lent core crowd it (docs/testing.md), and beside vLLM the light ones at idle
# priority are what moved its capacity answer. A sixth worker (`-n 6`) waits through the server
# tests and takes the sixth of the long tests that start when they end.
BESIDE_SERVER = 4


def may_take_a_unit(phase: str, holds: bool, others_busy: int) -> bool:
    """Whether a worker may be handed a unit: always after the server tests (`phase` "free") and
    where it holds one already (its next: xdist runs a held test only once it holds another);
    beside a server test, only while fewer than BESIDE_SERVER other workers (the servers' own
    not counted) hold any."""
    return phase == "free" or holds or others_busy < BESIDE_SERVER


# The shortest light units, kept back while longer ones are left: the next one of a worker whose
# held test waits for a next one (xdist's protocol) where nothing else may start.
FILLERS = 40


def next_unit(
    queue: list[tuple[str, str]],
    phase: str,
    behind: str = "",
    running: tuple[str, ...] = (),
    fillers: int = FILLERS,
) -> str | None:
    """The unit to hand a worker: `queue` is (unit, unit kind) in collection order (the longest
    first within a kind), `running` the kinds of the units handed out and not yet done, `behind`
    the kind of the test the worker holds and has not started (empty: it holds none). A server
    unit first; then the first unit of the phase's most preferred kind that has one; alone units
    only when nothing else is left; beside a one_core server test, an every_core unit once no
    slow one is queued, one at a time (it takes the lent core when the slow tests there have
    ended, `_server_lock_shared`). None: nothing may start now (the next finished test asks
    again).

    A worker runs a test only once it holds the next one (xdist's protocol), so a test handed
    out waits until its worker is handed another. Two runs showed what that costs:
    - a slow test held beside llama.cpp's tests with only every_core units left, which did not
      go out beside a running one, waited 81 s for the server tests to end;
    - every_core units handed out as the next of workers that ran one waited 70 s behind them,
      while two workers were free (2026-12-04).
    So the last `fillers` light units (the shortest) are kept back while anything else is left,
    and a worker whose held test is not light gets one of them where nothing else may start;
    behind an every_core test, a worker gets any other kind first, a filler next, and where
    none is left, the shortest every_core unit, so that the long ones go to workers as they
    come free."""
    for unit, kind in queue:
        if kind == SERVER:
            return unit
    lights = [unit for unit, kind in queue if kind == LIGHT]
    if phase == "free" and not any(k in (EVERY_CORE, SLOW) for _, k in queue):
        fillers = 0  # nothing long left to hold a worker: the kept ones go as any other
    reserve = lights[len(lights) - fillers :] if fillers else []
    kept = set(reserve)
    main = [(unit, kind) for unit, kind in queue if unit not in kept]
    held = behind not in ("", LIGHT)  # a test that ought to start now
    if behind == EVERY_CORE:
        others = [(unit, kind) for unit, kind in main if kind not in (EVERY_CORE, ALONE)]
        if (picked := _first_of(others, phase, running)) is not None:
            return picked
        if reserve:
            return reserve[0]
        if phase == "free":  # only every_core ones left: the shortest waits, not the longest
            for unit, kind in reversed(main):
                if kind == EVERY_CORE:
                    return unit
    picked = _first_of(main, phase, running)
    if picked is None and held:
        if reserve:
            return reserve[0]
        # none left: an every_core unit beside llama.cpp's rather than the held test waiting
        picked = _first_of(main, phase, tuple(k for k in running if k != EVERY_CORE))
    return picked


def _first_of(queue: list[tuple[str, str]], phase: str, running: tuple[str, ...]) -> str | None:
    """`next_unit`'s rule by kind, without the server unit and the kept fillers."""
    lent_free = EVERY_CORE not in running and not any(k == SLOW for _, k in queue)
    for kind in STARTS[phase]:
        if kind == ALONE and any(k != ALONE for _, k in queue):
            continue
        if kind == EVERY_CORE and phase == "lend" and not lent_free:
            continue
        for unit, k in queue:
            if k == kind:
                return unit
    return None


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduler, with this file's work units as its scopes, handing out units by
    what may start now (`next_unit`) rather than in queue order: a worker handed a test that
    must wait holds it, and the tests queued behind it, until it may run.

    HARNESS_SUITE_PLAIN=1 leaves only the work units (xdist's own scope scheduler, no locks, no
    idle priority, no lent cores): the measurement of why the rest stays (docs/testing.md)."""
    from xdist.scheduler import LoadScopeScheduling

    if os.environ.get("HARNESS_SUITE_PLAIN"):

        class Plain(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return work_unit(nodeid)

        return Plain(config, log)  # type: ignore[arg-type]

    class Scheduler(LoadScopeScheduling):
        _kinds: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _kind(self, nodeid: str) -> str:
            if self._kinds is None:  # written by the workers as they collected
                paths = _lock_paths(getattr(config.option, "testrunuid", None) or "")
                try:
                    self._kinds = json.loads(paths[6].read_text(encoding="utf-8")) if paths else {}
                except (OSError, ValueError):
                    self._kinds = {}
            return self._kinds.get(nodeid, LIGHT)

        def _unit_kind(self, unit: dict[str, bool]) -> str:
            return unit_kind([self._kind(nodeid) for nodeid in unit])

        def _phase(self) -> str:
            for assigned in self.assigned_work.values():
                if SERVERS in assigned:
                    todo = [nodeid for nodeid, done in assigned[SERVERS].items() if not done]
                    if not todo:
                        return "free"
                    return "lend" if self._kind(todo[0]) == ONE_CORE else "every"
            return "every" if SERVERS in self.workqueue else "free"

        def _open_units(self) -> list[dict[str, bool]]:
            return [
                unit
                for assigned in self.assigned_work.values()
                for unit in assigned.values()
                if not all(unit.values())
            ]

        def _assign_work_unit(self, node: Any) -> None:
            queue = [(name, self._unit_kind(unit)) for name, unit in self.workqueue.items()]
            mine = [u for u in self.assigned_work.get(node, {}).values() if not all(u.values())]
            behind = self._unit_kind(mine[0]) if mine else ""
            open_units = self._open_units()
            running = tuple(self._unit_kind(unit) for unit in open_units)
            phase = self._phase()
            others_busy = sum(
                1
                for other, assigned in self.assigned_work.items()
                if other is not node
                and SERVERS not in assigned
                and any(not all(unit.values()) for unit in assigned.values())
            )
            if not may_take_a_unit(phase, bool(mine), others_busy):
                return
            name = next_unit(queue, phase, behind, running)
            if name is None and not open_units:
                name = queue[0][0]  # nothing runs that could change the answer: the next one
            if name is not None:
                self.workqueue.move_to_end(name, last=False)
                super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            """xdist's, but a worker holds two tests at most (the one it runs and the next),
            not three: a unit handed out early is one committed to a worker that may be busy
            for minutes, while another worker is free. It is handed units until it holds two
            (xdist: one per call, so a unit handed to a free worker waited for some test to
            end before its worker got a next one), and shut down once nothing is left."""
            if node.shutting_down:
                return
            while self._pending_of(self.assigned_work.get(node, {})) < 2 and self.workqueue:
                left = len(self.workqueue)
                self._assign_work_unit(node)
                if len(self.workqueue) == left:
                    break  # nothing may start now
            if not self.workqueue:
                node.shutdown()  # what it holds runs without waiting for a next one

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            for other in self.nodes:  # what may start has changed for every worker
                if other is not node:
                    self._reschedule(other)

    return Scheduler(config, log)  # type: ignore[arg-type]


def _lock_paths(run_id: str = "") -> tuple[Path, ...] | None:
    """The files shared by this run's xdist workers (and its controller): the turnstile and lock
    that `alone` tests take exclusively, those that server tests take exclusively, the mark that
    server tests are still to come (`pytest_collection_modifyitems`), the cores a `one_core`
    server test lends to slow tests (`_ServerHold`), each test's `schedule_kind` for the
    controller's scheduler, and the lock on the lent cores (shared by the slow tests there,
    exclusive for an every_core one); None when not under xdist."""
    run_id = run_id or os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    if not run_id:
        return None
    base = Path(tempfile.gettempdir()) / f"harness-pytest-{run_id}"
    return (
        base.with_suffix(".turnstile"),
        base.with_suffix(".lock"),
        base.with_suffix(".server-turnstile"),
        base.with_suffix(".server-lock"),
        base.with_suffix(".servers-pending"),
        base.with_suffix(".lent-cores"),
        base.with_suffix(".kinds"),
        base.with_suffix(".lent-lock"),
    )


@contextlib.contextmanager
def _rw_lock(turnstile_path: Path, lock_path: Path, exclusive: bool) -> Iterator[None]:
    """A readers-writer lock across the workers. The turnstile gives a waiting writer precedence:
    it holds the turnstile while it waits and runs, and a reader passes the turnstile before it
    takes its shared lock, so no stream of short tests can keep a writer waiting. flock locks go
    with the process: a worker that dies releases them."""
    with open(turnstile_path, "a+b") as turnstile, open(lock_path, "a+b") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


def _server_busy(turnstile_path: Path, pending: Path | None = None) -> bool:
    """A server test runs or waits to (it holds the server turnstile), or server tests are still
    to come (`pending` exists: at the start, before their worker takes the turnstile)."""
    if pending is not None and pending.exists():
        return True
    with open(turnstile_path, "a+b") as turnstile:
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        return False


def _can_idle() -> bool:
    """Whether a thread here can go to SCHED_IDLE and back (Linux; coming back needs privilege
    or a permissive RLIMIT_NICE). Tried on a thread of its own, which then ends."""
    if not hasattr(os, "sched_setscheduler") or not hasattr(os, "SCHED_IDLE"):
        return False
    ok: list[bool] = []

    def attempt() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            ok.append(True)
        except OSError:
            ok.append(False)

    t = threading.Thread(target=attempt)
    t.start()
    t.join()
    return ok == [True]


CAN_IDLE = _can_idle()


@contextlib.contextmanager
def _idle_priority() -> Iterator[None]:
    """This thread (and what it starts meanwhile) at SCHED_IDLE, then back."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _cores_to_lend() -> list[int] | None:
    """The cores a `one_core` server test leaves: those `CpuSplit` does not give its server.
    None where it gives the server nothing of its own (one core, or no `taskset`)."""
    from tests.integration.capacity_runs import CpuSplit

    split = CpuSplit()
    return None if split.engine is None else split.rest


def _lent_cores(path: Path) -> list[int] | None:
    try:
        return [int(c) for c in path.read_text(encoding="ascii").split(",")]
    except (OSError, ValueError):
        return None


# The locks as the servers unit's worker holds them, from its first server test to its last:
# released in between, they let slow tests in, which the next server test then waited for
# (minutes of the run spent on neither).
class _ServerHold:
    def __init__(self) -> None:
        self._alone: contextlib.ExitStack | None = None
        self._server: contextlib.ExitStack | None = None
        self._lent: list[int] | None = None

    def take(self, paths: tuple[Path, ...], lend: list[int] | None = None) -> None:
        """The `alone` lock shared, then the server lock, in that order: taken again between two
        server tests, the alone lock could wait for an alone test that waits for a slow test
        that waits for the server lock (a cycle).

        The server lock is exclusive for a test that needs every core. For a `one_core` test
        (`lend`: the cores its server leaves) it is taken exclusively once, so that no slow test
        runs on every core, then the lent cores are written down and it is let go: slow tests
        start beside it, each held to those cores (`pytest_runtest_protocol`). A test that
        needs every core after it takes the lock again, and waits for them to end."""
        if self._alone is None:
            self._alone = contextlib.ExitStack()
            self._alone.enter_context(_rw_lock(paths[0], paths[1], exclusive=False))
        if lend is not None and lend == self._lent:
            return  # lent already: the slow tests beside go on
        if self._server is None:
            self._server = contextlib.ExitStack()
            self._server.enter_context(_rw_lock(paths[2], paths[3], exclusive=True))
        self._lent = lend
        if lend is None:
            paths[5].unlink(missing_ok=True)
            return
        paths[5].write_text(",".join(map(str, lend)), encoding="ascii")
        self._server.close()
        self._server = None

    def release(self, paths: tuple[Path, ...]) -> None:
        paths[4].unlink(missing_ok=True)  # the light tests after these run at normal priority
        paths[5].unlink(missing_ok=True)  # the slow tests after these on every core
        self._lent = None
        for stack in (self._server, self._alone):
            if stack is not None:
                stack.close()
        self._server = self._alone = None


_server_hold = _ServerHold()
LENT_POLL_S = 1.0


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    """`path` flock-ed in `mode` (LOCK_NB in it: BlockingIOError where it is held)."""
    with open(path, "a+b") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _server_lock_shared(
    held: contextlib.ExitStack, paths: tuple[Path, ...], every_core: bool
) -> list[int] | None:
    """The server lock, shared, into `held`; returns the cores lent meanwhile (the test is to
    hold itself to them), or None. Where cores are lent, the lent-core lock too: shared for a
    slow test, exclusive for an `every_core` one, which needs its share of a core and so runs
    on lent cores only with no slow test there (on one crowded with four, such tests failed or
    answered UNRELIABLE, docs/testing.md). While slow tests hold it, an every_core test lets
    both locks go and polls (it holds no lock while it waits) until it gets the lent cores to
    itself or nothing is lent. The scheduler hands one out beside a one_core server test only
    when no slow unit is left to hand out; this holds where another scheduler does."""
    while True:
        lock = contextlib.ExitStack()
        lock.enter_context(_rw_lock(paths[2], paths[3], exclusive=False))
        lent = _lent_cores(paths[5])  # written under the lock held exclusively
        if not lent:
            held.enter_context(lock)
            return None
        try:
            mode = fcntl.LOCK_EX | fcntl.LOCK_NB if every_core else fcntl.LOCK_SH
            lock.enter_context(_flock(paths[7], mode))
        except BlockingIOError:
            lock.close()
            time.sleep(LENT_POLL_S)
            continue
        held.enter_context(lock)
        return lent


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: lock waits are not timed
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Held from a test's setup to its teardown: the `alone` lock (exclusive for an alone test,
    shared for every other), then the server lock (exclusive for server tests; shared for a
    slow test, and for a light one that cannot go idle beside a server test). Server tests hold
    both from the first to the last of a row; a `one_core` one lends the other cores, and a slow
    test that starts meanwhile runs on those. Always in this order, so no two workers wait for
    each other."""
    paths = _lock_paths()
    if paths is None or os.environ.get("HARNESS_SUITE_PLAIN"):
        yield
        return
    kind = schedule_kind(item)
    with contextlib.ExitStack() as held:
        if kind in (SERVER, ONE_CORE):
            _server_hold.take(paths, _cores_to_lend() if kind == ONE_CORE else None)
            if nextitem is None or kind_of(nextitem) != SERVER:
                held.callback(_server_hold.release, paths)
            yield
            return
        held.enter_context(_rw_lock(paths[0], paths[1], exclusive=kind == ALONE))
        if kind == LIGHT and CAN_IDLE and _server_busy(paths[2], paths[4]):
            held.enter_context(_idle_priority())
        elif kind != ALONE:
            lent = _server_lock_shared(held, paths, kind == EVERY_CORE)
            if lent:
                from tests.integration.capacity_runs import on_cores

                held.enter_context(on_cores(lent))
        yield


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order of this file's docstring, each group's tests kept in file order.

    Deterministic (every xdist worker must collect the same order), and harmless without xdist:
    tests do not depend on the order of modules. `--no-loadscope-reorder` in pyproject.toml keeps
    xdist from re-sorting the units by their number of tests.

    A `virtual` test (long, on the virtual clock) runs at idle priority beside the server tests,
    on the CPU they leave: its hang guard is VIRTUAL_TIMEOUT_S, not the suite's 300 s (the
    validation recompute, 80 s on its own, passed 300 s there once the machine was shared)."""
    for item in items:
        if item.get_closest_marker("virtual") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(VIRTUAL_TIMEOUT_S))
    paths = _lock_paths()
    if paths is not None:  # for the controller's scheduler
        kinds = {item.nodeid: schedule_kind(item) for item in items}
        tmp = paths[6].with_suffix(f".kinds-{os.getpid()}")  # every worker writes the same
        tmp.write_text(json.dumps(kinds), encoding="utf-8")
        os.replace(tmp, paths[6])
    try:
        seconds: dict[str, float] = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(work_unit(item.nodeid), []).append(item)
    weight = {
        name: sum(seconds.get(i.nodeid, UNKNOWN_TEST_S) for i in unit)
        for name, unit in units.items()
    }
    rank = {SERVER: 0, LIGHT: 1, SLOW: 2, EVERY_CORE: 2, ALONE: 3}
    kind = {name: unit_kind([schedule_kind(i) for i in unit]) for name, unit in units.items()}
    if paths is not None and SERVER in kind.values():
        # every worker collects the same; the servers' worker removes it after its last one
        paths[4].touch()
    if SERVER in kind.values():
        # Placed last (as they were), the server tests ran alone for minutes while the other
        # workers idled; first, with the light tests beside them, that time is shared.
        ranked = sorted(units, key=lambda name: (rank[kind[name]], -weight[name]))
    else:
        ranked = sorted(units, key=lambda name: (kind[name] == ALONE, -weight[name]))
    if SERVERS in units:  # those that need every core first: the rest lend cores to slow tests
        units[SERVERS].sort(key=lambda item: schedule_kind(item) == ONE_CORE)  # stable
    items[:] = [item for name in ranked for item in units[name]]


@pytest.fixture
def write_scenario(tmp_path: Path):
    """Write a scenario TOML into tmp_path and return its path."""

    def write(text: str, name: str = "s.toml") -> Path:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return p

    return write


def _policy() -> int | None:
    return os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None


# Where the suite's time goes (docs/testing.md): with HARNESS_TEST_USAGE=FILE set, every test
# appends one tab-separated line to FILE: its node id, wall seconds (setup + call + teardown,
# not the wait for the lock above), CPU seconds of this process, and CPU seconds of child
# processes reaped meanwhile (servers and `python -m harness` subprocesses; one started by a
# module-scoped fixture is counted when it is reaped, at the module's end), and "idle" or
# "normal": the priority it ran at (idle: a light test beside a server test), then the xdist
# worker and the wall-clock time (Unix seconds) it started at: a timeline of the run; last, the
# cores it was held to (comma-separated). Each xdist worker appends its own lines.
_CPU_SAMPLER = pytest.StashKey[tuple[threading.Event, threading.Thread]]()


class _UsageRecorder:
    def __init__(self, path: str) -> None:
        self.path = path

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        wall0, started = time.perf_counter(), time.time()
        policy = "idle" if _policy() == getattr(os, "SCHED_IDLE", None) else "normal"
        on = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        cores = ",".join(map(str, on))
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        yield
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_self = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
        cpu_kids = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
        wall = time.perf_counter() - wall0
        with open(self.path, "a", encoding="utf-8") as f:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            f.write(
                f"{item.nodeid}\t{wall:.3f}\t{cpu_self:.3f}\t{cpu_kids:.3f}\t{policy}"
                f"\t{worker}\t{started:.3f}\t{cores}\n"
            )


# With HARNESS_TEST_USAGE=FILE the controller also samples the whole machine's CPU every
# CPU_SAMPLE_S into FILE.cpu: the Unix time, then /proc/stat's first line's counters (user, nice,
# system, idle, iowait, irq, softirq, steal; clock ticks, cumulative), and the number of CPUs.
# What every process used, servers included, and what the hypervisor took (steal): the run's
# CPU demand, which bounds its wall time on this many cores (scripts/usage_timeline.py).
CPU_SAMPLE_S = 5.0


def _sample_cpu(path: str, stop: threading.Event) -> None:
    ncpu = os.cpu_count() or 1
    while True:
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                ticks = stat.readline().split()[1:9]
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"{time.time():.3f}\t" + "\t".join(ticks) + f"\t{ncpu}\n")
        except OSError:
            return  # no /proc (not Linux): nothing to sample
        if stop.is_set():  # that was the sample at the run's end
            return
        stop.wait(CPU_SAMPLE_S)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("HARNESS_TEST_USAGE", "").strip()
    if path:
        config.pluginmanager.register(_UsageRecorder(path), "harness-test-usage")
        if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
            stop = threading.Event()
            sampler = threading.Thread(
                target=_sample_cpu, args=(path + ".cpu", stop), name="cpu-sampler", daemon=True
            )
            sampler.start()
            config.stash[_CPU_SAMPLER] = (stop, sampler)
    # The xdist controller names the run (the workers see it as PYTEST_XDIST_TESTRUNUID), so
    # that it can remove the lock files at the end.
    if not hasattr(config, "workerinput") and getattr(config.option, "testrunuid", "") is None:
        config.option.testrunuid = uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    running = config.stash.get(_CPU_SAMPLER, None)
    if running is not None:  # one last sample: the run's end
        running[0].set()
        running[1].join(timeout=5)
    run_id = getattr(config.option, "testrunuid", None)
    if not hasattr(config, "workerinput") and run_id:
        for path in _lock_paths(run_id) or ():
            path.unlink(missing_ok=True)
