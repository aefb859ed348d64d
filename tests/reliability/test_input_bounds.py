"""Input bounds (issue 44): a hostile or mistaken file ends in one line naming it and exit 2,
in bounded memory, never a traceback.

- TOML (scenario, config.toml, sweep, thresholds, preset file), settings.json and `--set` nested
  5,000 deep: refused by the one nesting bound (harness.config.bounded.MAX_NESTING);
- a trace, dataset or length file that is one 100 MB line: refused naming the file and line 1,
  peak RSS of the command under 400 MB (it was 640 MB);
- `/dev/zero` named as a trace, dataset or length file: "not a regular file", not "no such file";
- a 2 GB file of zeros (sparse) as a result to report, compare, export: refused by its size
  unread (it was 4.2 GB RSS); a 10 MB one by its first byte; `/dev/zero` as not a regular file.

Peak RSS is measured in a wrapper process whose only child is the command (getrusage
RUSAGE_CHILDREN), so no earlier child of the test process counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.config.bounded import MAX_NESTING
from harness.errors import ConfigError
from harness.sim.presets import load_presets

DEEP = 5000
NEST_LINE = f"tables and arrays nested more than {MAX_NESTING} deep (the bound on nesting)"
RSS_BOUND_KB = 400 * 1024
BIG_LINE = 100_000_000

SCENARIO = """\
name = "bad"
seed = 1
[workload]
prompt_tokens = { dist = "fixed", value = 64 }
output_tokens = { dist = "uniform", min = 8, max = 16 }
[[phases]]
name = "main"
duration = "1s"
arrival = { process = "poisson", rate = 2 }
"""


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Exit status and the non-blank stderr lines of `python -m harness ARGV`, in process."""
    with pytest.raises(SystemExit) as exc_info:
        raise SystemExit(cli.main(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    code = exc_info.value.code
    assert isinstance(code, int)
    return code, [ln for ln in err.splitlines() if ln.strip()]


def _deep(shape: str) -> str:
    if shape == "arrays":
        return "[" * DEEP + "]" * DEEP
    if shape == "tables":
        return "{a = " * DEEP + "1" + "}" * DEEP
    raise AssertionError(shape)


# -- 1. nesting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "text"),
    [
        ("scenario-arrays", f"v = {_deep('arrays')}\n" + SCENARIO),
        ("scenario-tables", f"v = {_deep('tables')}\n" + SCENARIO),
        ("scenario-dotted", ".".join(["a"] * DEEP) + " = 1\n" + SCENARIO),
    ],
)
def test_deep_scenario_refused(
    what: str,
    text: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("deep.toml").write_text(text)
    code, lines = _cli(["run", "deep.toml", "--out", "out/r.json", "--quiet"], capsys)
    assert (code, lines) == (2, [f"error: deep.toml: {NEST_LINE}"])
    assert not Path("out").exists()


def test_nesting_at_the_bound_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value nested to the bound parses: the refusal is the scenario's own (an unknown key)."""
    monkeypatch.chdir(tmp_path)
    depth = MAX_NESTING - 1  # the document itself is one level
    Path("s.toml").write_text("v = " + "[" * depth + "]" * depth + "\n" + SCENARIO)
    code, lines = _cli(["run", "s.toml", "--out", "out/r.json", "--quiet"], capsys)
    assert code == 2
    assert NEST_LINE not in lines[0] and "unknown key" in lines[0], lines


@pytest.mark.parametrize("entry", ["config", "settings", "sweep", "thresholds", "set"])
def test_deep_file_refused_at_every_entry(
    entry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(SCENARIO)
    deep = _deep("arrays")
    run = ["run", "s.toml", "--out", "out/r.json", "--quiet"]
    argv, where = {
        "config": (run + ["--config", "c.toml"], "c.toml"),
        "settings": (run + ["--settings", "settings.json"], "settings.json"),
        "sweep": (["sweep", "w.toml", "--out", "out"], "w.toml"),
        "thresholds": (["compare", "a.json", "b.json", "--thresholds", "t.toml"], "t.toml"),
        "set": (run + ["--set", f"workload.x={deep}"], "--set: a value with"),
    }[entry]
    files = {  # only the entry's own file: ./settings.json is read whenever present
        "config": f"v = {deep}\n",
        "settings": '{"v": ' + deep + "}",
        "sweep": f'name = "w"\nscenario = "s.toml"\nv = {deep}\n',
        "thresholds": f"[max_regression]\nv = {deep}\n",
    }
    if entry in files:
        Path(where).write_text(files[entry])
    code, lines = _cli(argv, capsys)
    expected = (
        f"error: --set: a value with {NEST_LINE}"
        if entry == "set"
        else f"error: {where}: {NEST_LINE}"
    )
    assert (code, lines) == (2, [expected])
    assert not Path("out").exists()


def test_deep_preset_file_refused(tmp_path: Path) -> None:
    p = tmp_path / "presets.toml"
    p.write_text(f"[gpu.x]\nv = {_deep('tables')}\n")
    with pytest.raises(ConfigError) as e:
        load_presets(str(p))
    assert str(e.value) == f"{p}: tables and arrays nested too deep to read"
    with pytest.raises(ConfigError) as e:
        load_presets("/dev/zero")
    assert str(e.value) == "/dev/zero: cannot read preset file: not a regular file"


# -- 2. data files: one endless line, and not a regular file ---------------------------------


def _peak_rss_kb(argv: list[str], cwd: Path) -> tuple[int, str, int]:
    """(exit status, stderr, peak RSS in KB) of `python -m harness ARGV`, measured in a wrapper
    whose only child is that command."""
    wrapper = (
        "import json, resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps([p.returncode, p.stderr, rss]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, sys.executable, "-m", "harness", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    code, err, rss = json.loads(out.stdout)
    return int(code), str(err), int(rss)


@pytest.fixture(scope="module")
def big_line(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 MB of one line with no newline (written once for the module)."""
    p = tmp_path_factory.mktemp("bigline") / "big.txt"
    with p.open("wb") as f:
        chunk = b"7" * 1_000_000
        for _ in range(BIG_LINE // len(chunk)):
            f.write(chunk)
    return p


ARRIVAL = 'arrival = { process = "poisson", rate = 2 }'
DATA_FILE_SCENARIOS = {
    # kind: (scenario text with FILE for the data file, the key the /dev/zero error names, noun)
    "trace-csv": (
        SCENARIO.replace(
            'duration = "1s"\n' + ARRIVAL,
            'arrival = { process = "trace", file = "FILE", format = "csv", columns = { t = "t" } }',
        ),
        "phases.0.arrival.file",
        "cannot read trace",
    ),
    "trace-auto": (
        SCENARIO.replace(
            'duration = "1s"\n' + ARRIVAL, 'arrival = { process = "trace", file = "FILE" }'
        ),
        "phases.0.arrival.file",
        "cannot read trace",
    ),
    "dataset": (
        SCENARIO.replace(
            "[workload]\n", '[workload]\ndataset = { format = "jsonl", file = "FILE" }\n'
        )
        .replace('prompt_tokens = { dist = "fixed", value = 64 }\n', "")
        .replace('output_tokens = { dist = "uniform", min = 8, max = 16 }\n', ""),
        "workload.dataset.file",
        "cannot read dataset",
    ),
    "lengths": (
        SCENARIO.replace(
            'prompt_tokens = { dist = "fixed", value = 64 }',
            'prompt_tokens = { dist = "empirical", file = "FILE" }',
        ),
        "workload.prompt_tokens.file",
        "cannot read",
    ),
}


@pytest.mark.parametrize("kind", ["trace-csv", "trace-auto", "dataset", "lengths"])
def test_one_endless_line_is_refused_in_bounded_memory(
    kind: str, big_line: Path, tmp_path: Path
) -> None:
    text = DATA_FILE_SCENARIOS[kind][0].replace("FILE", str(big_line))
    (tmp_path / "s.toml").write_text(text)
    code, err, rss = _peak_rss_kb(["run", "s.toml", "--out", "out/r.json", "--quiet"], tmp_path)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert (code, lines) == (
        2,
        [
            f"error: {big_line}:1: line longer than 4 MiB (the bound on one line); "
            "is this the right file?"
        ],
    )
    assert rss < RSS_BOUND_KB, f"peak RSS {rss} KB"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["trace-csv", "trace-auto", "dataset", "lengths"])
def test_device_as_data_file_is_not_a_regular_file(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text, key, noun = DATA_FILE_SCENARIOS[kind]
    monkeypatch.chdir(tmp_path)
    Path("s.toml").write_text(text.replace("FILE", "/dev/zero"))
    code, lines = _cli(["run", "s.toml", "--out", "out/r.json", "--quiet"], capsys)
    assert (code, lines) == (
        2,
        [f"error: s.toml: {key}: {noun} '/dev/zero': not a regular file (a character device)"],
    )


def test_device_as_scenario_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, lines = _cli(["run", "/dev/zero", "--out", "out/r.json", "--quiet"], capsys)
    assert (code, lines) == (
        2,
        ["error: /dev/zero: cannot read: not a regular file (a character device)"],
    )


# -- 3. result files: size and first bytes before parsing ------------------------------------

GIB_LINE = (
    "error: zeros.json: 2.0 GiB is larger than a result can be (the bound is 1 GiB); "
    "is this the right file?"
)


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "zeros.json"],
        ["report", "zeros.json", "--html", "r.html"],
        ["compare", "zeros.json", "zeros.json"],
        ["export", "zeros.json", "--format", "csv", "--out", "o.csv"],
    ],
    ids=["report", "report-html", "compare", "export"],
)
def test_two_gb_of_zeros_is_refused_unread(argv: list[str], tmp_path: Path) -> None:
    z = tmp_path / "zeros.json"
    with z.open("wb") as f:
        f.truncate(2 * 1024**3)  # sparse: no disk
    code, err, rss = _peak_rss_kb(argv, tmp_path)
    assert (code, [ln for ln in err.splitlines() if ln.strip()]) == (2, [GIB_LINE])
    assert rss < RSS_BOUND_KB, f"peak RSS {rss} KB"
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (None, "not JSON: a result starts with '{', this file with byte 0x00"),
        (b"  \n\t[1, 2]", "not JSON: a result starts with '{', this file with byte 0x5b"),
        (b"", "not JSON: the file is empty"),
        (b'  {"schema_version": ', "not valid JSON"),
    ],
    ids=["zeros-10mb", "array", "empty", "truncated"],
)
@pytest.mark.parametrize("command", ["report", "compare", "export"])
def test_result_first_bytes_checked(
    command: str,
    content: bytes | None,
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    p = Path("r.json")
    if content is None:
        with p.open("wb") as f:
            f.truncate(10 * 1024**2)
    else:
        p.write_bytes(content)
    argv = {
        "report": ["report", "r.json"],
        "compare": ["compare", "r.json", "r.json"],
        "export": ["export", "r.json", "--format", "csv", "--out", "o.csv"],
    }[command]
    code, lines = _cli(argv, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: r.json: {line}"), lines


@pytest.mark.parametrize("command", ["report", "compare"])
def test_result_device_or_folder_is_not_a_regular_file(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["report", "/dev/zero"] if command == "report" else ["compare", "/dev/zero", "/dev/zero"]
    code, lines = _cli(argv, capsys)
    assert (code, lines) == (
        2,
        ["error: /dev/zero: cannot read: not a regular file (a character device)"],
    )
