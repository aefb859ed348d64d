"""`--html` and `--out` are checked before the work starts: a destination that cannot be written
(a read-only place, a folder under a file, a folder where a file goes) is one line naming the
flag and the path, exit 2, before any request is sent or any server started. (An `--html` into
an unwritable place used to fail after the run, with a traceback.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import cli

DATA = Path(__file__).parents[1] / "data" / "results"
SCENARIO = (
    '[workload]\nprompt_tokens = { dist = "fixed", value = 8 }\n'
    'output_tokens = { dist = "fixed", value = 4 }\n'
    '[[phases]]\nname = "m"\nrequests = 2\narrival = { process = "constant", rate = 1 }\n'
)


def bad_places(tmp: Path) -> list[tuple[str, str]]:
    """(path, words of the refusal): /proc takes no new files even for root; a path under a
    regular file cannot be made; a folder cannot be written as a file."""
    (tmp / "a-file").write_text("x")
    (tmp / "a-folder").mkdir(exist_ok=True)
    return [
        ("/proc/report.html", "/proc"),
        (str(tmp / "a-file" / "r.html"), "cannot create folder"),
        (str(tmp / "a-folder"), "is a folder"),
    ]


def check(rc: int, err: str, flag: str, words: str) -> None:
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {flag} ") and words in lines[0], err


def test_run_checks_html_and_out_before_it_starts(tmp_path, capsys, monkeypatch):
    (tmp_path / "s.toml").write_text(SCENARIO)
    monkeypatch.chdir(tmp_path)
    for flag in ("--html", "--out"):
        for place, words in bad_places(tmp_path):
            other = ["--out", str(tmp_path / "ok" / "r.json")] if flag == "--html" else []
            # a target nobody listens on: had the run started, it would have written a journal
            # --html takes a path not ending in .html only as --html=PATH (issue 24)
            given = [f"{flag}={place}"] if flag == "--html" else [flag, place]
            rc = cli.main(
                ["run", "s.toml", "--quiet", "--target", "http://127.0.0.1:9", *other, *given]
            )
            check(rc, capsys.readouterr().err, flag, words)
    assert not list(tmp_path.rglob("*.journal.jsonl")), "nothing may run"


def test_report_and_compare_check_theirs_before_reading(tmp_path, capsys):
    for suffix in (".json", ".journal.jsonl"):
        shutil.copy(DATA / ("v2" + suffix), tmp_path / ("r" + suffix))
    r = str(tmp_path / "r.json")
    for place, words in bad_places(tmp_path):
        rc = cli.main(["report", r, "--html", place])
        out, err = capsys.readouterr()
        check(rc, err, "--html", words)
        assert "TTFT" not in out  # refused before the report was printed
        check(cli.main(["report", r, "--out", place]), capsys.readouterr().err, "--out", words)
        check(
            cli.main(["compare", r, r, "--html", place]), capsys.readouterr().err, "--html", words
        )


@pytest.mark.parametrize("flag", ["--html"])
def test_sweep_checks_html_before_any_point(tmp_path, capsys, monkeypatch, flag):
    (tmp_path / "base.toml").write_text(SCENARIO)
    (tmp_path / "sw.toml").write_text('scenario = "base.toml"\n[load]\nrate = [1]\n')
    monkeypatch.chdir(tmp_path)
    place, words = bad_places(tmp_path)[1]
    rc = cli.main(["sweep", "sw.toml", "--quiet", "--out", str(tmp_path / "sw"), flag, place])
    check(rc, capsys.readouterr().err, flag, words)
    assert not (tmp_path / "sw" / "summary.json").exists()
