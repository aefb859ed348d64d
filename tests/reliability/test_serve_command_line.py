"""`serve` prints the server's command line quoted (issue 44): pasted into a shell, the printed
line runs exactly the argv and environment that were started, however odd the values."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from harness.commands.serve import command_line


def test_command_line_round_trips_through_a_shell() -> None:
    env = [("NOTE", "a b; echo pwned"), ("EMPTY", ""), ("Q", "it's")]
    argv = ["/opt/my env/bin/python", "-m", "vllm", "--model", "my model", "--x", "$(id)"]
    line = command_line(env, argv)
    assert line == (
        "NOTE='a b; echo pwned' EMPTY='' Q='it'\"'\"'s' "
        "'/opt/my env/bin/python' -m vllm --model 'my model' --x '$(id)'"
    )
    words = shlex.split(line)
    assert words == [f"{k}={v}" for k, v in env] + argv


def test_a_shell_runs_what_was_printed(tmp_path: Path) -> None:
    """The printed line, run by bash, gets the same environment value and argv."""
    show = "import json, os, sys; print(json.dumps([os.environ['NOTE'], sys.argv[1:]]))"
    env = [("NOTE", "a b; echo pwned $HOME")]
    argv = [sys.executable, "-c", show, "my model", "$(touch pwned)", "it's", "*"]
    out = subprocess.run(
        ["bash", "-c", command_line(env, argv)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout) == ["a b; echo pwned $HOME", argv[3:]]
    assert not (tmp_path / "pwned").exists()


def test_controls_in_the_command_line_are_escaped() -> None:
    line = command_line([], ["vllm", "--served-model-name", "m\u202e\x1b[2J"])
    assert line == "vllm --served-model-name 'm\\u202e\\u001b[2J'"


def test_serve_dry_run_prints_the_quoted_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[server]\nengine = "sim"\nenv = { NOTE = "a b; echo pwned" }\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "harness", "serve", "--dry-run", "--port", "8123"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    line = out.stdout.splitlines()[0]
    assert line == (
        f"command: NOTE='a b; echo pwned' {shlex.quote(sys.executable)} -m harness sim "
        "--host 127.0.0.1 --port 8123"
    )
    assert shlex.split(line.removeprefix("command: "))[0] == "NOTE=a b; echo pwned"
