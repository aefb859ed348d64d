"""Issue 44, output paths: every command that writes goes through harness.safe_write. A link
planted at a temporary name is never followed; an output, journal or log that is a link, a
device, a fifo or a folder is refused with one line and exit 2, the victim left untouched; two
runs with one `--out` cannot share a journal: the second refuses at its start, naming the
first, before it sends anything; a rerun over a result says `replacing R.json`."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "results"
VICTIM = b"the victim's own bytes\n"
SCENARIO = (
    '[workload]\nprompt_tokens = { dist = "fixed", value = 8 }\n'
    'output_tokens = { dist = "fixed", value = 4 }\n'
    '[[phases]]\nname = "m"\nrequests = 2\narrival = { process = "constant", rate = 50 }\n'
    "[sim]\nspeedup = 20.0\n"
)
NOBODY = "http://127.0.0.1:9"  # had a refused run started, it would have failed to connect


def refusal(path: Path | str, kind: str, flag: str = "") -> str:
    return (
        f"error: {flag + ' ' if flag else ''}{path}: exists and is {kind}, not a regular file; "
        "refusing to write through or over it (remove it or choose another path)"
    )


def one_line(capsys: pytest.CaptureFixture[str], rc: int) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "s.toml").write_text(SCENARIO)
    (tmp_path / "victim").write_bytes(VICTIM)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_writes_past_planted_tmp_links_and_says_replacing(place, capsys):
    for name in ("r.json.tmp", "r.html.tmp"):
        (place / name).symlink_to(place / "victim")
    assert cli.main(["run", "s.toml", "--quiet", "--out", "r.json", "--html"]) == 0
    capsys.readouterr()
    assert (place / "victim").read_bytes() == VICTIM
    for name in ("r.json", "r.html", "r.journal.jsonl"):
        assert stat.S_ISREG(os.lstat(place / name).st_mode), name
    assert cli.main(["run", "s.toml", "--out", "r.json"]) == 0
    assert "replacing r.json" in capsys.readouterr().err.splitlines()
    assert (place / "victim").read_bytes() == VICTIM


@pytest.mark.parametrize("which", ["r.journal.jsonl", "r.json", "r.sim.log"])
def test_run_refuses_a_link_where_it_writes(place, capsys, which):
    (place / which).symlink_to(place / "victim")
    flag = "--out" if which == "r.json" else ""
    # no --target for the log: the simulator it would start writes r.sim.log
    target = [] if which == "r.sim.log" else ["--target", NOBODY]
    line = one_line(capsys, cli.main(["run", "s.toml", "--quiet", "--out", "r.json", *target]))
    assert line == refusal(which, "a symbolic link", flag)
    assert (place / "victim").read_bytes() == VICTIM and (place / which).is_symlink()
    assert not (place / "r.json").exists() or which == "r.json"


def test_devices_fifos_and_folder_links_are_refused_untouched(place, capsys):
    os.mkfifo(place / "fifo.json")
    (place / "dir").mkdir()
    (place / "dirlink.json").symlink_to(place / "dir")
    cases = [
        ("/dev/null", "a character device"),
        ("fifo.json", "a fifo"),
        ("dirlink.json", "a symbolic link"),
    ]
    for out, kind in cases:
        rc = cli.main(["run", "s.toml", "--quiet", "--target", NOBODY, "--out", out])
        assert one_line(capsys, rc) == refusal(out, kind, "--out")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    assert stat.S_ISFIFO(os.lstat(place / "fifo.json").st_mode)
    assert not list(place.glob("*.journal.jsonl")) and not list(place.glob("dir/*"))


def test_report_and_export_write_past_links_and_refuse_devices(place, capsys):
    for suffix in (".json", ".journal.jsonl"):
        shutil.copy(DATA / ("v2" + suffix), place / ("r" + suffix))
    for name in ("o.json.tmp", "o.html.tmp", ".o.json.tmp"):
        (place / name).symlink_to(place / "victim")
    assert cli.main(["report", "r.json", "--out", "o.json", "--html", "o.html"]) == 0
    capsys.readouterr()
    assert (place / "victim").read_bytes() == VICTIM
    assert not (place / "o.json").is_symlink() and not (place / "o.html").is_symlink()
    rc = cli.main(["report", "r.json", "--out", "/dev/null"])
    assert one_line(capsys, rc) == refusal("/dev/null", "a character device", "--out")
    (place / "e.csv").symlink_to(place / "victim")
    for fmt, out in (("csv", "e.csv"), ("jsonl", "/dev/null"), ("vllm", "/dev/null")):
        rc = cli.main(["export", "r.json", "--format", fmt, "--out", out])
        kind = "a symbolic link" if out == "e.csv" else "a character device"
        assert one_line(capsys, rc) == refusal(out, kind)
    assert (place / "victim").read_bytes() == VICTIM
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


HOLDER = """
import sys
from pathlib import Path
from harness.record.journal import JournalWriter
w = JournalWriter(Path(sys.argv[1]), {"scenario_name": "first", "started_at": "2026-01-02T03:04:05Z"})
print("held", flush=True)
sys.stdin.read()
w.close()
"""


def test_a_second_run_with_the_same_out_refuses_naming_the_first(place):
    jpath = place / "r.journal.jsonl"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(jpath)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.0)
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        before = jpath.read_bytes()
        port = listener.getsockname()[1]
        second = subprocess.run(
            [sys.executable, "-m", "harness", "run", "s.toml", "--quiet", "--out", "r.json"]
            + ["--target", f"http://127.0.0.1:{port}"],
            cwd=place,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip().splitlines() == [
            f"error: r.journal.jsonl: the journal is in use by another run (pid {first.pid}, "
            "started 2026-01-02T03:04:05Z); two runs cannot share one --out: wait for it or "
            "give this run another --out"
        ]
        assert jpath.read_bytes() == before  # the first run's journal untouched
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing was sent: not even a connection was opened
        assert not (place / "r.json").exists()
    finally:
        listener.close()
        first.communicate("", timeout=30)
    assert first.returncode == 0
