"""The data flow points one way: the client never imports the server side, views never import
the engine, and pure modules do no I/O on import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "harness"


def imports_of(package: str) -> set[str]:
    found: set[str] = set()
    for f in (PKG / package).rglob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("client", ("harness.sim", "harness.server", "harness.analysis")),
        ("sim", ("harness.client", "harness.workload", "harness.record", "harness.analysis")),
        ("analysis", ("harness.client.engine", "harness.client.fasthttp", "harness.sim")),
        ("record", ("harness.client", "harness.sim", "harness.server", "harness.analysis")),
        ("workload", ("harness.client", "harness.sim", "harness.server", "harness.analysis", "harness.record")),
    ],
)
def test_imports_point_down_the_pipeline(package, forbidden):
    bad = sorted(m for m in imports_of(package) if m.startswith(forbidden))
    assert not bad, f"harness/{package} imports {bad}"
