"""Shared fixtures (paths, a helper to write scenario files) and the suite's scheduling.

The suite runs on pytest-xdist's workers (pyproject.toml: `-n 4`). The work units are this
file's, not xdist's (`pytest_xdist_make_scheduler` below): the tests of a file in GROUPS share
an expensive module-scoped fixture (a vLLM server, a simulator run that several tests read, a
Ray cluster), so one worker runs them all, in file order, and the fixture is built once. Every
other test is a unit of its own. The longest units go first (tests/durations.json, measured;
docs/testing.md), so the minute-long tests start at once and the short ones fill the gaps;
exclusive units (below) go last.
(xdist's own `--dist loadgroup` groups by a suffix it writes into each node id, which pytest
9.2 no longer keeps: the groups silently fell apart, one vLLM server per worker.)

A test that loads the whole machine (a real vLLM or llama.cpp server: markers `vllm`,
`llamacpp`, or `exclusive`) runs alone: while it runs, no other worker starts a test. Run
beside it, the simulator's real-time tests were starved of CPU and failed (docs/testing.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_TEST_S = 0.5  # a test not in durations.json (new, or under a second when measured)


# file -> group: the file's tests run on one worker, in file order (module-scoped fixtures)
GROUPS = {
    "tests/integration/test_vllm.py": "vllm",  # one vLLM server; the last test kills it
    "tests/reliability/test_faults.py": "faults",  # the fault-free run every test compares to
    "tests/test_api.py": "api",
    "tests/client/test_raycluster.py": "ray",  # one local Ray cluster
    "tests/analysis/test_result_types.py": "result_types",
    "tests/analysis/test_html.py": "html",
}
# ... except these tests, units of their own
OWN_UNITS = {
    # starts its own vLLM server from config.toml: on another worker than the module's server
    "tests/integration/test_vllm.py::test_sweep_starts_vllm_from_config_with_a_served_name",
}


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled in: its file's group, or the test alone."""
    if nodeid in OWN_UNITS:
        return nodeid
    return GROUPS.get(nodeid.split("::", 1)[0], nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduler, with this file's work units as its scopes."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduler(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return Scheduler(config, log)  # type: ignore[arg-type]


EXCLUSIVE_MARKERS = ("exclusive", "vllm", "llamacpp")


def _lock_paths(run_id: str = "") -> tuple[Path, Path] | None:
    """The two lock files shared by this run's xdist workers; None when not under xdist."""
    run_id = run_id or os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    if not run_id:
        return None
    base = Path(tempfile.gettempdir()) / f"harness-pytest-{run_id}"
    return base.with_suffix(".turnstile"), base.with_suffix(".lock")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: lock waits are not timed
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A readers-writer lock across the workers, held from a test's setup to its teardown.

    Every test holds `.lock` shared; an exclusive test holds it exclusively. The turnstile gives
    a waiting exclusive test precedence: it holds the turnstile while it waits and runs, and a
    shared test passes the turnstile before it takes its shared lock, so no stream of short
    tests can keep an exclusive one waiting. flock locks go with the process: a worker that
    dies releases them."""
    paths = _lock_paths()
    if paths is None:
        yield
        return
    exclusive = any(item.get_closest_marker(m) is not None for m in EXCLUSIVE_MARKERS)
    with open(paths[0], "a+b") as turnstile, open(paths[1], "a+b") as lock:
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest work unit first (a group's tests summed), exclusive units last, each group's tests
    kept in file order.

    Deterministic (every xdist worker must collect the same order), and harmless without xdist:
    tests do not depend on the order of modules. `--no-loadscope-reorder` in pyproject.toml keeps
    xdist from re-sorting the units by their number of tests."""
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
    exclusive = {
        name: any(i.get_closest_marker(m) is not None for i in unit for m in EXCLUSIVE_MARKERS)
        for name, unit in units.items()
    }
    # Exclusive units last: by the time a worker reaches one, the others are finishing the
    # shortest shared tests, so the machine drains fast and the exclusive tests then run one
    # after another. Placed first, they interleaved with minute-long shared tests, and every
    # exclusive test waited for one to finish while the other workers idled.
    ranked = sorted(units, key=lambda name: (exclusive[name], -weight[name]))  # stable
    items[:] = [item for name in ranked for item in units[name]]


@pytest.fixture
def write_scenario(tmp_path: Path):
    """Write a scenario TOML into tmp_path and return its path."""

    def write(text: str, name: str = "s.toml") -> Path:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return p

    return write


# Where the suite's time goes (docs/testing.md): with HARNESS_TEST_USAGE=FILE set, every test
# appends one tab-separated line to FILE: its node id, wall seconds (setup + call + teardown,
# not the wait for the lock above), CPU seconds of this process, and CPU seconds of child
# processes reaped meanwhile (servers and `python -m harness` subprocesses; one started by a
# module-scoped fixture is counted when it is reaped, at the module's end). Each xdist worker
# appends its own lines.
class _UsageRecorder:
    def __init__(self, path: str) -> None:
        self.path = path

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        wall0 = time.perf_counter()
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        yield
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_self = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
        cpu_kids = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
        wall = time.perf_counter() - wall0
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{item.nodeid}\t{wall:.3f}\t{cpu_self:.3f}\t{cpu_kids:.3f}\n")


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("HARNESS_TEST_USAGE", "").strip()
    if path:
        config.pluginmanager.register(_UsageRecorder(path), "harness-test-usage")
    # The xdist controller names the run (the workers see it as PYTEST_XDIST_TESTRUNUID), so
    # that it can remove the lock files at the end.
    if not hasattr(config, "workerinput") and getattr(config.option, "testrunuid", "") is None:
        config.option.testrunuid = uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    run_id = getattr(config.option, "testrunuid", None)
    if not hasattr(config, "workerinput") and run_id:
        for path in _lock_paths(run_id) or ():
            path.unlink(missing_ok=True)
