"""`check` warns when settings.json holds a key that others can read or that git tracks."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from harness.cli import main
from harness.config.settings import exposure_warnings

SETTINGS = {"provider": {"base_url": "http://127.0.0.1:9", "api_key": "sk-exposedkey123456"}}


def write(tmp_path, mode: int):
    p = tmp_path / "settings.json"
    p.write_text(json.dumps(SETTINGS))
    p.chmod(mode)
    return p


def test_private_untracked_file_is_fine(tmp_path):
    assert exposure_warnings(write(tmp_path, 0o600)) == []


def test_world_readable_file_warns(tmp_path):
    (w,) = exposure_warnings(write(tmp_path, 0o644))
    assert "readable by other users" in w and "chmod 600" in w


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_tracked_file_warns(tmp_path):
    p = write(tmp_path, 0o600)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "settings.json"], cwd=tmp_path, check=True)
    (w,) = exposure_warnings(p)
    assert "tracked by git" in w and "git rm --cached settings.json" in w


def test_check_prints_the_warning_without_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, 0o644)
    main(["check", "--settings", "settings.json"])
    out = capsys.readouterr().out
    assert "key exposed" in out and "readable by other users" in out
    assert "sk-exposedkey123456" not in out and "exposedkey" not in out
