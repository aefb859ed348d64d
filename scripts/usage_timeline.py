"""What each xdist worker did when, from a HARNESS_TEST_USAGE file (tests/conftest.py): the
server tests' span, each worker's idle stretches, and the lower bound on the run's wall time
that docs/testing.md uses (server time + (rest CPU - server time) / 2 on 2 cores).

    python scripts/usage_timeline.py U.tsv [U2.tsv ...]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

IDLE_GAP_S = 5.0  # a worker's gap between two tests longer than this is reported


def _is_server(node: str) -> bool:
    return node.startswith("tests/integration/") and ("vllm" in node or "llamacpp" in node)


def summary(path: Path) -> str:
    rows = list(csv.reader(path.open(encoding="utf-8"), delimiter="\t"))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("usage", nargs="+", type=Path)
    for path in ap.parse_args().usage:
        print(summary(path))


if __name__ == "__main__":
    main()
