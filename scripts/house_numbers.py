"""The house's numbers for docs/architecture.md: modules over 500 lines, functions over 80 (with
and without a stated reason), the largest of each, and every doc's length.

    python scripts/house_numbers.py

Duplicate pairs come from the `duplicates` tool where it exists (not a dependency); the suite's
time from docs/testing.md's table.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES, FUNCTION_LINES = 500, 80


def main() -> int:
    modules, functions = [], []
    for f in sorted((ROOT / "harness").rglob("*.py")):
        text = f.read_text(encoding="utf-8")
        n = len(text.splitlines())
        name = str(f.relative_to(ROOT))
        if n > MODULE_LINES:
            modules.append((n, name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    functions.append((length, f"{name}:{node.name}"))
    lines = sum(
        len(f.read_text(encoding="utf-8").splitlines()) for f in (ROOT / "harness").rglob("*.py")
    )
    print(f"harness/: {lines} lines in {len(list((ROOT / 'harness').rglob('*.py')))} modules")
    print(f"modules over {MODULE_LINES} lines: {len(modules)}")
    for n, name in sorted(modules, reverse=True):
        print(f"  {n:5d}  {name}")
    print(f"functions over {FUNCTION_LINES} lines: {len(functions)}")
    for n, name in sorted(functions, reverse=True):
        print(f"  {n:5d}  {name}")
    print("docs (lines):")
    for f in [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]:
        print(f"  {len(f.read_text(encoding='utf-8').splitlines()):5d}  {f.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
