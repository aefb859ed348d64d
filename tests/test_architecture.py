"""The data flow points one way: every package and top-level module sits in a layer and imports
only from layers below it (lazy, function-level imports included), there is no import cycle,
the client never imports the server side, views never import the engine, and no module does
I/O on import.

Layers, lowest first (README "Architecture"):

    units, errors, catalogue, termtext, redact -> config -> workload -> record -> client | server | sim
        -> analysis -> orchestrate (and runner, sweep, calibrate) -> commands -> cli -> __main__
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "harness"

# Each unit (a package, or a top-level module) and its layer. A new package or top-level module
# must be placed here: test_every_module_has_a_layer fails until it is.
LAYERS: dict[str, int] = {
    "harness": 0,
    "harness.units": 0,
    "harness.errors": 0,
    "harness.catalogue": 0,
    "harness.termtext": 0,  # terminal-safe text (escaped controls)
    "harness.redact": 0,  # server text as kept: secrets masked (config's Target builds one)
    "harness.safe_write": 0,  # how every output file is written (one function for all writers)
    "harness.argtable": 0,  # command-line options as tables (commands, config, the sim's CLI)
    "harness.config": 1,
    "harness.workload": 2,
    "harness.record": 3,
    "harness.client": 4,
    "harness.server": 4,
    "harness.sim": 4,
    "harness.analysis": 5,
    "harness.orchestrate": 6,
    "harness.runner": 6,
    "harness.sweep": 6,
    "harness.calibrate": 6,  # runner, sweep: re-exports
    "harness.api": 6,
    "harness.schema": 6,  # published schema files; `python -m harness.schema` reads analysis' types
    "harness.commands": 7,
    "harness.cli": 8,
    "harness.__main__": 9,
}
# Orchestration lives in one layer whose modules call each other (the cycle test still holds).
SAME_LAYER_OK = {
    "harness.orchestrate",
    "harness.runner",
    "harness.sweep",
    "harness.calibrate",
    "harness.api",
}
# Arrows between siblings of one layer that are allowed, with the reason.
SIBLING_OK = {
    # The launcher starts the simulator as one of its engines (as it starts vLLM or llama.cpp) and
    # checks a config.toml model name against the simulator's presets before it does.
    ("harness.server", "harness.sim"),
    # Server text is kept with its control characters escaped exactly as the terminal shows it.
    ("harness.redact", "harness.termtext"),
    # A refused output path is a user's mistake: one line, exit 2 (UsageError).
    ("harness.safe_write", "harness.errors"),
}


def modname(f: Path) -> str:
    parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {modname(f): f for f in PKG.rglob("*.py")}


def _targets(mod: str, f: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
        pkg = pkg[: len(pkg) - node.level + 1]
        base = ".".join(pkg + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def module_imports(mod: str) -> set[str]:
    """Every harness module `mod` imports, anywhere in its body (lazy imports included)."""
    f = MODULES[mod]
    out: set[str] = set()
    for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for t in _targets(mod, f, node):
                if t == "harness" or t.startswith("harness."):
                    while t not in MODULES and "." in t:
                        t = t.rsplit(".", 1)[0]
                    out.add(t)
    return out


# The one arrow up the layers: the package root re-exports the Python API (harness.run, ...)
# from inside `__getattr__`, on first attribute access, once `import harness` is complete; it
# cannot run at import time (tests/test_api.py checks `import harness` loads none of it), so it
# is neither a layer violation nor an import cycle.
LAZY_REEXPORTS = {("harness", "harness.api")}
GRAPH: dict[str, set[str]] = {
    m: module_imports(m) - {m} - {d for r, d in LAZY_REEXPORTS if r == m} for m in MODULES
}


def unit_of(mod: str) -> str | None:
    """The longest LAYERS key that is `mod` or a package holding it."""
    best = None
    for u in LAYERS:
        if (mod == u or mod.startswith(u + ".")) and (best is None or len(u) > len(best)):
            best = u
    if best == "harness" and mod != "harness":
        return None  # a top-level module or package that LAYERS does not name
    return best


def imports_of(package: str) -> set[str]:
    return set().union(
        *(
            GRAPH[m]
            for m in MODULES
            if m == f"harness.{package}" or m.startswith(f"harness.{package}.")
        )
    )


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in MODULES if unit_of(m) is None)
    assert not unplaced, f"place these in LAYERS (tests/test_architecture.py): {unplaced}"


def test_imports_point_down_the_layers():
    bad = []
    for m, deps in GRAPH.items():
        um = unit_of(m)
        for d in deps:
            ud = unit_of(d)
            if um is None or ud is None or um == ud:
                continue
            if LAYERS[ud] < LAYERS[um]:
                continue
            if LAYERS[ud] == LAYERS[um] and (
                (um in SAME_LAYER_OK and ud in SAME_LAYER_OK) or (um, ud) in SIBLING_OK
            ):
                continue
            bad.append(f"{m} -> {d} ({um} is layer {LAYERS[um]}, {ud} is layer {LAYERS[ud]})")
    assert not bad, "imports against the layer order:\n" + "\n".join(sorted(bad))


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_find_cycles_finds_a_cycle():
    # a -> b -> c -> a is one cycle; d -> a hangs off it and is not part of it
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = find_cycles(GRAPH)
    assert not cycles, f"import cycles (lazy imports included): {cycles}"


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("client", ("harness.sim", "harness.server", "harness.analysis")),
        (
            "sim",
            (
                "harness.client",
                "harness.workload",
                "harness.record",
                "harness.analysis",
                "harness.config",
            ),
        ),
        ("analysis", ("harness.client", "harness.server", "harness.sim")),
        (
            "record",
            (
                "harness.client",
                "harness.sim",
                "harness.server",
                "harness.analysis",
                "harness.config",
            ),
        ),
        (
            "workload",
            (
                "harness.client",
                "harness.sim",
                "harness.server",
                "harness.analysis",
                "harness.record",
            ),
        ),
        ("config", ("harness.workload", "harness.record", "harness.runner", "harness.sim")),
        ("server", ("harness.client", "harness.analysis", "harness.workload", "harness.record")),
    ],
)
def test_imports_point_down_the_pipeline(package, forbidden):
    bad = sorted(m for m in imports_of(package) if m.startswith(forbidden))
    assert not bad, f"harness/{package} imports {bad}"


def test_commands_only_parse_and_call():
    """Orchestration never calls back into the command layer (it returns; commands print)."""
    bad = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if unit_of(m) in SAME_LAYER_OK
        for d in deps
        if unit_of(d) in ("harness.commands", "harness.cli")
    )
    assert not bad, bad


NO_IO_PROBE = textwrap.dedent("""
    import builtins, importlib, io, os, socket, sys
    def refuse(what):
        def f(*a, **k):
            raise AssertionError(f"I/O on import: {what} {a[:1]!r}")
        return f
    socket.socket.connect = refuse("socket.connect")
    socket.socket.connect_ex = refuse("socket.connect_ex")
    socket.socket.bind = refuse("socket.bind")
    socket.create_connection = refuse("socket.create_connection")
    real_open = builtins.open
    def guarded_open(file, mode="r", *a, **k):
        if any(c in mode for c in "wax+"):
            raise AssertionError(f"I/O on import: open({file!r}, {mode!r})")
        return real_open(file, mode, *a, **k)
    builtins.open = guarded_open
    io.open = guarded_open
    real_os_open = os.open
    def guarded_os_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC):
            raise AssertionError(f"I/O on import: os.open({path!r}) for writing")
        return real_os_open(path, flags, *a, **k)
    os.open = guarded_os_open
    for name in sys.argv[1:]:
        importlib.import_module(name)
    print("imported", len(sys.argv) - 1)
""")


def test_no_io_on_import():
    """Importing any module opens no socket and writes no file (entry points excluded: running
    them is their job)."""
    names = sorted(m for m in MODULES if not m.endswith("__main__"))
    proc = subprocess.run(
        [sys.executable, "-c", NO_IO_PROBE, *names],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PKG.parent,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"imported {len(names)}"


def test_the_no_io_probe_catches_a_write(tmp_path):
    mod = tmp_path / "writes_on_import.py"
    mod.write_text(f"open({str(tmp_path / 'x')!r}, 'w').write('x')\n")
    proc = subprocess.run(
        [sys.executable, "-c", NO_IO_PROBE, "writes_on_import"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode != 0 and "I/O on import" in proc.stderr


RUN_IMPORTS_PROBE = textwrap.dedent(
    """
    import sys
    from harness.cli import build_parser
    build_parser("run").parse_args(["run"])
    print(" ".join(sorted(m for m in sys.modules if m.startswith("harness.commands."))))
    """
)


def test_one_command_imports_only_its_own_module():
    """`python -m harness run ...` builds only run's part of the command line: it imports no
    other command's module (each imports what it runs; all of them cost a quarter more start-up
    than run's alone). `--help` with no command still lists every command."""
    proc = subprocess.run(
        [sys.executable, "-c", RUN_IMPORTS_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PKG.parent,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(proc.stdout.split())
    others = {f"harness.commands.{c}" for c in ("report", "compare", "plan", "predict", "sweep")}
    assert "harness.commands.run" in loaded and not loaded & others, loaded
    from harness.cli import COMMANDS, build_parser

    listed = build_parser().format_help()
    assert all(c in listed for c in COMMANDS)


# --- Room sizes (issue 46): one concept per module, a function a screen or two -----------------
# A module past MODULE_LINES, or a function past FUNCTION_LINES, says why in its docstring, with
# one of these phrases; scripts/house_numbers.py prints the counts docs/architecture.md gives.
MODULE_LINES = 500
FUNCTION_LINES = 80
MODULE_REASON = "Why one module past ~500 lines:"
FUNCTION_REASON = "One function on purpose"


def oversized(root: Path = PKG) -> tuple[list[str], list[str]]:
    """(modules, functions) past the bounds that give no reason, as 'path (N lines)'."""
    modules, functions = [], []
    for f in sorted(root.rglob("*.py")):
        text = f.read_text(encoding="utf-8")
        tree = ast.parse(text)
        n = len(text.splitlines())
        if n > MODULE_LINES and MODULE_REASON not in (ast.get_docstring(tree) or ""):
            modules.append(f"{f.relative_to(root.parent)} ({n} lines)")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES and FUNCTION_REASON not in (
                    ast.get_docstring(node) or ""
                ):
                    functions.append(f"{f.relative_to(root.parent)}:{node.name} ({length} lines)")
    return modules, functions


def test_rooms_stay_small_or_say_why():
    modules, functions = oversized()
    assert not modules, (
        f"modules over {MODULE_LINES} lines: split them along their seams, or say "
        f"{MODULE_REASON!r} in the module docstring: {modules}"
    )
    assert not functions, (
        f"functions over {FUNCTION_LINES} lines: named steps, or say {FUNCTION_REASON!r} "
        f"in the docstring: {functions}"
    )


def test_the_size_rule_catches_a_long_function(tmp_path):
    pkg = tmp_path / "harness"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES + 1))
    (pkg / "long.py").write_text(f'"""A module."""\n\n\ndef f():\n{body}\n', encoding="utf-8")
    (pkg / "said.py").write_text(
        f'"""A module."""\n\n\ndef f():\n    """{FUNCTION_REASON}: a hot loop."""\n{body}\n',
        encoding="utf-8",
    )
    modules, functions = oversized(pkg)
    assert modules == [] and functions == [f"harness/long.py:f ({FUNCTION_LINES + 2} lines)"]
