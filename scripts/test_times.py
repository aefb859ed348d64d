"""Per-file wall time of a pytest run, from its JUnit XML (docs/testing.md's tables).

    python -m pytest --junitxml=/tmp/run.xml ...
    python scripts/test_times.py /tmp/run.xml [--top 40] [--against /tmp/before.xml]
    python scripts/test_times.py /tmp/run.xml --write-durations tests/durations.json

`--write-durations` keeps every test of a second or more (node id -> seconds), which
tests/conftest.py uses to hand the longest tests to pytest-xdist's workers first.

A test case's time in pytest's JUnit XML is its setup + call + teardown, so a module-scoped
fixture (a server started once for a file) is counted in the first test that uses it. Under
pytest-xdist the per-file sums add up to more than the wall time (workers run side by side);
the suite's wall time is the `time` of the <testsuite> element, which the table prints last.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def file_times(path: Path) -> tuple[dict[str, tuple[int, float]], float]:
    """Map test file -> (number of test cases, seconds), and the suite's wall time in seconds."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    per_file: dict[str, list[float]] = defaultdict(list)
    wall_s = 0.0
    for suite in suites:
        wall_s += float(suite.get("time", "0"))
        for case in suite.iter("testcase"):
            classname = case.get("classname", "")
            per_file[_file_of(classname)].append(float(case.get("time", "0")))
    return {f: (len(ts), sum(ts)) for f, ts in per_file.items()}, wall_s


def node_times(path: Path) -> dict[str, float]:
    """Map pytest node id -> seconds (setup + call + teardown) for every test case."""
    out: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        file = _file_of(case.get("classname", ""))
        depth = file.count("/") + 1  # the dotted parts that name the file
        node = "::".join([file, *parts[depth:], case.get("name", "")])
        out[node] = out.get(node, 0.0) + float(case.get("time", "0"))
    return out


def _file_of(classname: str) -> str:
    """tests.client.test_sse.TestX -> tests/client/test_sse.py (a class part is dropped)."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        candidate = "/".join(parts[:i]) + ".py"
        if Path(candidate).is_file():
            return candidate
    return "/".join(parts) + ".py"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml", type=Path)
    ap.add_argument("--top", type=int, default=40, help="files listed, slowest first")
    ap.add_argument("--against", type=Path, help="a second run's XML (the 'before' column)")
    ap.add_argument("--write-durations", type=Path, help="write node id -> s (tests >= 1 s) here")
    args = ap.parse_args(argv)
    if args.write_durations:
        kept = {k: round(v, 1) for k, v in sorted(node_times(args.xml).items()) if v >= 1.0}
        args.write_durations.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
        print(f"{len(kept)} tests of 1 s or more -> {args.write_durations}")
        return 0
    times, wall_s = file_times(args.xml)
    before, before_wall_s = file_times(args.against) if args.against else ({}, 0.0)
    total_s = sum(s for _, s in times.values())
    head = "| file | tests | s |" + (" s before |" if before else "")
    print(head)
    print("|---|---:|---:|" + ("---:|" if before else ""))
    ranked = sorted(times.items(), key=lambda kv: -kv[1][1])
    for name, (n, s) in ranked[: args.top]:
        row = f"| `{name}` | {n} | {s:.1f} |"
        if before:
            row += f" {before.get(name, (0, 0.0))[1]:.1f} |"
        print(row)
    rest = ranked[args.top :]
    if rest:
        n_rest = sum(n for _, (n, _) in rest)
        s_rest = sum(s for _, (_, s) in rest)
        row = f"| {len(rest)} other files | {n_rest} | {s_rest:.1f} |"
        if before:
            names = {name for name, _ in rest}
            row += f" {sum(s for f, (_, s) in before.items() if f in names):.1f} |"
        print(row)
    n_all = sum(n for n, _ in times.values())
    row = f"| **sum of test times** | {n_all} | {total_s:.1f} |"
    if before:
        row += f" {sum(s for _, s in before.values()):.1f} |"
    print(row)
    row = f"| **wall time** | | {wall_s:.1f} |"
    if before:
        row += f" {before_wall_s:.1f} |"
    print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
