"""harness.safe_write, the one way output files are written: exclusive temporary files with
unpredictable names, nothing but a regular file replaced, no link followed, the journal opened
without following links and locked against a second writer."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from harness.errors import RunAborted, UsageError
from harness.record.journal import JournalWriter, read_journal
from harness.safe_write import atomic_file, claim_journal, open_append, refuse_unsafe, write_file

VICTIM = b"the victim's own bytes\n"


def victim(tmp: Path) -> Path:
    v = tmp / "victim"
    v.write_bytes(VICTIM)
    return v


def refusal(path: Path, kind: str) -> str:
    return (
        f"{path}: exists and is {kind}, not a regular file; refusing to write through or over "
        "it (remove it or choose another path)"
    )


def test_write_file_writes_atomically_with_the_umask_mode(tmp_path):
    out = tmp_path / "sub" / "r.json"  # its folder is made
    write_file(out, b"{}")
    assert out.read_bytes() == b"{}"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    out.chmod(0o600)
    write_file(out, "é")  # str: UTF-8; a file replaced keeps its permissions
    assert out.read_bytes() == "é".encode()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]  # no temporary left


@pytest.mark.parametrize("planted", ["r.json.tmp", ".r.json.tmp", "r.tmp"])
def test_a_link_at_a_temporary_name_is_never_followed(tmp_path, planted):
    v = victim(tmp_path)
    (tmp_path / planted).symlink_to(v)
    out = tmp_path / "r.json"
    write_file(out, b"result")
    assert v.read_bytes() == VICTIM
    assert not out.is_symlink() and out.read_bytes() == b"result"
    assert (tmp_path / planted).is_symlink()


def test_an_output_that_is_a_link_is_refused_and_left_alone(tmp_path):
    v = victim(tmp_path)
    out = tmp_path / "r.json"
    out.symlink_to(v)
    with pytest.raises(UsageError) as e:
        write_file(out, b"result")
    assert str(e.value) == refusal(out, "a symbolic link")
    assert out.is_symlink() and v.read_bytes() == VICTIM
    dangling = tmp_path / "d.json"
    dangling.symlink_to(tmp_path / "nowhere")  # a link to a file not yet made: refused too
    with pytest.raises(UsageError):
        write_file(dangling, b"x")
    assert not (tmp_path / "nowhere").exists()


def test_a_device_is_refused_and_stays_a_device():
    null = Path("/dev/null")
    with pytest.raises(UsageError) as e:
        write_file(null, b"result")
    assert str(e.value) == refusal(null, "a character device")
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_folder_and_a_fifo_are_refused(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(UsageError) as e:
        write_file(tmp_path / "dir", b"x")
    assert str(e.value) == refusal(tmp_path / "dir", "a folder")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for write in (lambda: write_file(fifo, b"x"), lambda: claim_journal(fifo)):
        with pytest.raises(UsageError) as e:  # refused at once: nothing opens it to block
            write()
        assert str(e.value) == refusal(fifo, "a fifo")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(UsageError):
        open_append(fifo)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "r.csv"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(out, "w", encoding="utf-8", newline="") as f:
        f.write("half")
        raise RuntimeError("the writer failed midway")
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]


def test_refuse_unsafe_says_whether_a_regular_file_is_replaced(tmp_path):
    assert refuse_unsafe(tmp_path / "new.json") is False
    (tmp_path / "old.json").write_text("{}")
    assert refuse_unsafe(tmp_path / "old.json") is True
    assert refuse_unsafe(tmp_path / "no-folder" / "x" / "r.json") is False


def test_the_journal_is_not_opened_through_a_link(tmp_path):
    v = victim(tmp_path)
    j = tmp_path / "r.journal.jsonl"
    j.symlink_to(v)
    with pytest.raises(UsageError) as e:
        JournalWriter(j, {"scenario_name": "x"})
    assert str(e.value) == refusal(j, "a symbolic link")
    assert v.read_bytes() == VICTIM and j.is_symlink()
    with pytest.raises(UsageError):
        open_append(j)  # the simulator's log the same way
    assert v.read_bytes() == VICTIM


def test_a_held_journal_refuses_a_second_writer_and_keeps_its_bytes(tmp_path):
    j = tmp_path / "r.journal.jsonl"
    first = JournalWriter(j, {"scenario_name": "x", "started_at": "2026-01-02T03:04:05Z"})
    before = j.read_bytes()
    with pytest.raises(UsageError) as e:
        claim_journal(j)
    assert str(e.value) == (
        f"{j}: the journal is in use by another run (pid {os.getpid()}, started "
        "2026-01-02T03:04:05Z); two runs cannot share one --out: wait for it or give this run "
        "another --out"
    )
    assert j.read_bytes() == before  # the refused one truncated nothing
    first.close()
    second = claim_journal(j)  # free again once the first closed
    second.close()
    assert read_journal(j).header["scenario_name"] == "x"


def test_a_claim_outlives_its_writer_until_released(tmp_path):
    j = tmp_path / "r.journal.jsonl"
    j.write_bytes(b"an earlier run's journal\n")
    claim = claim_journal(j)
    assert j.read_bytes() == b"an earlier run's journal\n"  # not emptied until written
    w = JournalWriter(j, {"scenario_name": "x"}, claim)
    w.close()
    assert read_journal(j).header["pid"] == os.getpid()
    with pytest.raises(UsageError, match="in use by another run"):
        claim_journal(j)  # the result is still to be built from it
    claim.close()
    claim.close()  # a second release does nothing
    claim_journal(j).close()
    with pytest.raises(ValueError, match="released"):
        claim.file()


def test_an_unwritable_journal_folder_is_a_run_aborted(tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(RunAborted, match="cannot write the journal"):
        JournalWriter(tmp_path / "a-file" / "r.journal.jsonl", {})
