"""The suite's own scheduling (tests/conftest.py): work units, their order, the exclusive lock."""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DURATIONS, GROUPS, OWN_UNITS, REPO, work_unit


def test_every_group_names_a_test_file_that_exists() -> None:
    for path in GROUPS:
        assert (REPO / path).is_file(), path


def test_every_own_unit_names_a_test_of_a_grouped_file() -> None:
    for nodeid in OWN_UNITS:
        path, name = nodeid.split("::")
        assert path in GROUPS, nodeid  # otherwise it is a unit of its own anyway
        assert re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M), nodeid


@pytest.mark.parametrize(
    ("nodeid", "unit"),
    [
        # a test of a grouped file: the group
        ("tests/integration/test_vllm.py::test_run_at_max_num_seqs_8", "vllm"),
        # a parametrized test of a grouped file: the group too
        ("tests/reliability/test_faults.py::test_fault_kind[http500-http_500-fast]", "faults"),
        # the grouped file's exception: alone
        (
            "tests/integration/test_vllm.py::test_sweep_starts_vllm_from_config_with_a_served_name",
            "tests/integration/test_vllm.py::test_sweep_starts_vllm_from_config_with_a_served_name",
        ),
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


def test_exclusive_units_come_last() -> None:
    files = ["tests/integration/test_llamacpp_argv.py", "tests/integration/test_llamacpp.py"]
    ids = _collected(*files)
    # the llama.cpp runs (a minute or more each, exclusive) after the argv unit tests (not
    # exclusive, under 1 s)
    runs = [i for i in ids if i.startswith("tests/integration/test_llamacpp.py::")]
    assert len(runs) >= 2 and ids[-len(runs) :] == runs
    assert all(i.startswith("tests/integration/test_llamacpp_argv.py::") for i in ids[: -len(runs)])


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
