"""A shortened soak (scenarios/soak.toml at a higher rate for a few seconds): the client's
memory stays flat while thousands of requests pass, because finished records go to the journal
and nothing per request is kept in memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from relhelp import REPO, SimProcess, free_port, load, run_inprocess

pytestmark = pytest.mark.slow

SOAK_S = 6.0
RATE = 100.0
# RSS may rise while pools, caches and the allocator warm up (the first third), then stay flat:
# what it gains over the last two thirds is bounded. A client that kept each request's Record
# (~1-2 KiB with its stamps) would grow ~0.5-1 MiB per second here and several MiB over the run.
LATE_GROWTH_LIMIT_BYTES = 6 * 1024 * 1024


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import resource

    return pages * resource.getpagesize()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProcess]:
    s = SimProcess(free_port(), tmp_path / "sim.log", "--speedup", "50")
    yield s
    s.kill()


def test_short_soak_has_flat_memory(
    tmp_path: Path, sim: SimProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), _rss_bytes()))
            time.sleep(0.1)

    th = threading.Thread(target=sample, daemon=True)
    out = tmp_path / "r.json"
    th.start()
    try:
        rc, _ = run_inprocess(
            monkeypatch,
            REPO / "scenarios" / "soak.toml",
            out,
            sim.url,
            sets=[
                "phases.0.duration=500ms",
                f"phases.1.duration={SOAK_S}s",
                f"phases.1.arrival.rate={RATE}",
                'workload.output_tokens={ dist = "uniform", min = 16, max = 64 }',
            ],
        )
    finally:
        stop.set()
        th.join()
    assert rc == 0
    r = load(out)
    done = r["summary"]["requests"]["completed"]
    assert done >= 0.8 * SOAK_S * RATE and r["summary"]["errors"] == {}
    t_first, t_last = samples[0][0], samples[-1][0]
    third = t_first + (t_last - t_first) / 3
    after = [rss for t, rss in samples if t >= third]
    growth = max(after) - after[0]
    print(
        f"RSS {samples[0][1] / 2**20:.1f} -> {after[0] / 2**20:.1f} -> {max(after) / 2**20:.1f} MiB, {done} requests"
    )
    assert growth < LATE_GROWTH_LIMIT_BYTES, (
        f"RSS grew {growth / 2**20:.1f} MiB over the last two thirds"
    )
