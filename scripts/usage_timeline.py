"""What each xdist worker did when, from a HARNESS_TEST_USAGE file (tests/conftest.py): the
server tests' span, each worker's idle stretches, and the lower bound on the run's wall time
that docs/testing.md uses (server time + (rest CPU - server time) / 2 on 2 cores).

Where the controller's machine sample U.tsv.cpu is beside it: the whole machine's CPU over the
run (every process, servers and their start-up included), steal, how busy each minute was, and
the bound that demand sets on the wall time: busy core-seconds / cores.

    python scripts/usage_timeline.py U.tsv [U2.tsv ...]
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

IDLE_GAP_S = 5.0  # a worker's gap between two tests longer than this is reported


def _is_server(node: str) -> bool:
    return node.startswith("tests/integration/") and ("vllm" in node or "llamacpp" in node)


def summary(path: Path) -> str:
    rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines(), delimiter="\t"))
    if not rows or len(rows[0]) < 7:
        return f"{path}: no worker and start columns (written before 2026-12-03)"
    t0 = min(float(r[6]) for r in rows)
    end = max(float(r[6]) + float(r[1]) for r in rows) - t0
    server = [r for r in rows if _is_server(r[0])]
    server_wall = sum(float(r[1]) for r in server)
    server_end = max((float(r[6]) + float(r[1]) - t0 for r in server), default=0.0)
    rest_cpu = sum(float(r[2]) + float(r[3]) for r in rows if not _is_server(r[0]))
    lines = [
        f"{path}: {len(rows)} tests, first start to last end {end:.0f} s; server tests "
        f"{server_wall:.0f} s (done at {server_end:.0f} s); rest {rest_cpu:.0f} CPU-s; "
        f"lower bound on 2 cores {server_wall + max(rest_cpu - server_wall, 0) / 2:.0f} s"
    ]
    lent = [r for r in rows if len(r) > 7 and r[7] and not _is_server(r[0])]
    if lent:
        every = max(lent, key=lambda r: len(r[7].split(",")))[7]
        held = [r for r in lent if r[7] != every]
        if held:
            lines.append(
                f"  {len(held)} tests held to cores {held[0][7]} (the others on {every}): "
                f"{sum(float(r[1]) for r in held):.0f} s of tests"
            )
    for worker in sorted({r[5] for r in rows}):
        mine = sorted((r for r in rows if r[5] == worker), key=lambda r: float(r[6]))
        gaps, busy_until = [], 0.0
        for r in mine:
            start = float(r[6]) - t0
            if start - busy_until > IDLE_GAP_S:
                gaps.append(f"{busy_until:.0f}-{start:.0f}")
            busy_until = max(busy_until, start + float(r[1]))
        idle = sum(float(b) - float(a) for a, b in (g.split("-") for g in gaps))
        lines.append(
            f"  {worker}: busy {sum(float(r[1]) for r in mine):.0f} s, idle {idle:.0f} s"
            + (f" ({', '.join(gaps)})" if gaps else "")
        )
    return "\n".join(lines)


def machine(path: Path, per_s: float = 60.0) -> str:
    """The machine's CPU over the run, from the controller's /proc/stat samples (PATH.cpu)."""
    rows = [
        [float(x) for x in line.split("\t")]
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    if len(rows) < 2:
        return f"{path}: fewer than two samples"
    hz = float(os.sysconf("SC_CLK_TCK"))  # /proc/stat's clock ticks per second
    ncpu = int(rows[-1][9])

    def busy_idle(a: list[float], b: list[float]) -> tuple[float, float, float]:
        d = [(y - x) / hz for x, y in zip(a[1:9], b[1:9], strict=True)]
        idle = d[3] + d[4]  # idle + iowait
        return sum(d) - idle - d[7], idle, d[7]  # busy (not steal), idle, steal

    busy, idle, steal = busy_idle(rows[0], rows[-1])
    wall = rows[-1][0] - rows[0][0]
    lines = [
        f"{path}: machine {busy:.0f} core-s busy, {idle:.0f} idle, {steal:.0f} stolen over "
        f"{wall:.0f} s on {ncpu} CPUs ({busy / max(busy + idle + steal, 1e-9):.0%} busy); "
        f"that demand alone takes {busy / ncpu:.0f} s on {ncpu} cores"
    ]
    buckets: list[str] = []
    start = rows[0]
    for row in rows[1:]:
        if row[0] - start[0] >= per_s or row is rows[-1]:
            b, i, st = busy_idle(start, row)
            buckets.append(f"{b / max(b + i + st, 1e-9):.0%}")
            start = row
    lines.append(f"  busy per {per_s:.0f} s: " + " ".join(buckets))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("usage", nargs="+", type=Path)
    for path in ap.parse_args().usage:
        print(summary(path))
        cpu = path.with_name(path.name + ".cpu")
        if cpu.is_file():
            print(machine(cpu))


if __name__ == "__main__":
    main()
