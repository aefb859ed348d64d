"""Responses nobody asked for, on kept-alive connections, are never a request's answer.

Per behaviour of tests/hostile/keepalive_server.py (a late second response, one glued to the
answer's end, one pushed on an idle connection) and per HTTP client, a real `run` of N requests
spaced 200 ms apart (the late and pushed responses arrive while the connection is idle): every
record completed with the answer's MAX_TOKENS tokens (an unasked response carries one), the run
exits 0, and the result's `accounting.stale_connections` counts the connections closed for
them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import keepalive_server as ka  # noqa: E402

N = 6
MAX_TOKENS = 4
RUN_LIMIT_S = 60.0

SCENARIO = f"""name = "keepalive"
seed = 5
[workload]
prompt_tokens = {{ dist = "fixed", value = 8 }}
output_tokens = {{ dist = "fixed", value = {MAX_TOKENS} }}
[[phases]]
name = "main"
requests = {N}
arrival = {{ process = "constant", rate = 5 }}
"""


def run_against(url: str, client: str, folder: Path) -> tuple[int, list[dict[str, Any]], Any]:
    """`python -m harness run` of SCENARIO against `url`: (exit, final records, result)."""
    folder.mkdir()
    (folder / "s.toml").write_text(SCENARIO)
    (folder / "config.toml").write_text('[timeout]\nconnect = "2s"\nread = "5s"\n')
    argv = [sys.executable, "-m", "harness", "run", "s.toml", "--target", url]
    argv += ["--model", ka.hs.MODEL, "--no-probe", "--http-client", client, "--out", "r.json"]
    argv += ["--config", "config.toml"]
    env = {k: v for k, v in os.environ.items() if "PYTEST" not in k}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        argv, cwd=folder, env=env, capture_output=True, timeout=RUN_LIMIT_S, check=False
    )
    records = [
        d
        for d in map(json.loads, (folder / "r.journal.jsonl").read_text().splitlines())
        if d.get("t") == "rec" and not d.get("r")
    ]
    result = json.loads((folder / "r.json").read_text())
    assert b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
    return done.returncode, records, result


@pytest.mark.parametrize("client", ["fast", "aiohttp"])
@pytest.mark.parametrize("behaviour", ka.BEHAVIOURS)
def test_an_unasked_response_is_never_an_answer(
    behaviour: str, client: str, tmp_path: Path
) -> None:
    server = ka.KeepAliveServer(behaviour).start()
    try:
        rc, records, result = run_against(server.url("ka"), client, tmp_path / "run")
    finally:
        server.stop()
    assert server.errors == []
    assert rc == 0
    assert sorted(r["seq"] for r in records) == list(range(N))
    # each record is its own answer: completed, MAX_TOKENS tokens (never an unasked one's 1)
    assert [(r.get("err"), r.get("st"), r.get("ot")) for r in records] == [
        (None, 200, MAX_TOKENS)
    ] * N
    stale = result["accounting"]["stale_connections"]
    assert stale <= server.pushed
    if behaviour == "trailing":
        assert stale == N  # each answer's read held the unasked response: every one seen
    elif behaviour == "late":
        assert stale >= N - 1  # the last one may come after the run closed its connection
    else:
        assert stale >= 1
