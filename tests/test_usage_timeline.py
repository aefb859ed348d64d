"""scripts/usage_timeline.py: the machine's CPU over a test run from the controller's /proc/stat
samples (tests/conftest.py, HARNESS_TEST_USAGE), and the bound that demand sets."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "usage_timeline", REPO / "scripts" / "usage_timeline.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_machine_cpu_counts_busy_idle_and_steal_and_bounds_the_wall_time(tmp_path: Path) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal, cumulative; 2 CPUs; 100 s apart each
    rows = [
        (0.0, [0, 0, 0, 0, 0, 0, 0, 0]),
        (100.0, [150 * hz, 0, 10 * hz, 30 * hz, 0, 0, 0, 10 * hz]),  # 160 busy, 30 idle, 10 stolen
        (200.0, [170 * hz, 0, 10 * hz, 210 * hz, 0, 0, 0, 10 * hz]),  # 20 busy, 180 idle
    ]
    cpu = tmp_path / "u.tsv.cpu"
    cpu.write_text("".join(f"{t}\t" + "\t".join(map(str, c)) + "\t2\n" for t, c in rows))
    text = _script().machine(cpu, per_s=100.0)
    assert "machine 180 core-s busy, 210 idle, 10 stolen over 200 s on 2 CPUs (45% busy)" in text
    assert "that demand alone takes 90 s on 2 cores" in text
    assert text.splitlines()[1] == "  busy per 100 s: 80% 10%"


def test_one_sample_is_not_a_run(tmp_path: Path) -> None:
    cpu = tmp_path / "u.tsv.cpu"
    cpu.write_text("0\t1\t0\t0\t1\t0\t0\t0\t0\t2\n")
    assert "fewer than two samples" in _script().machine(cpu)


def test_tests_held_to_lent_cores_are_counted(tmp_path: Path) -> None:
    usage = tmp_path / "u.tsv"
    rows = [  # node, wall, cpu, children's cpu, priority, worker, start, cores
        ("tests/integration/test_llamacpp.py::test_a", 60, 1, 50, "normal", "gw0", 0, "0,1"),
        ("tests/test_e2e.py::test_b", 10, 1, 1, "normal", "gw1", 5, "1"),
        ("tests/test_e2e.py::test_c", 20, 1, 1, "normal", "gw2", 8, "1"),
        ("tests/test_e2e.py::test_d", 5, 1, 1, "normal", "gw1", 70, "0,1"),
    ]
    usage.write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
    text = _script().summary(usage)
    assert "2 tests held to cores 1 (the others on 0,1): 30 s of tests" in text
    # written before the cores column: no such line
    usage.write_text("".join("\t".join(map(str, r[:7])) + "\n" for r in rows))
    assert "held to cores" not in _script().summary(usage)
