"""Framing and shapes the run and the pre-run check must read alike (issue 44).

Per behaviour of tests/hostile/framing_server.py and per HTTP client, a real `run` of N
requests: the exact record of each request (its class, its tokens, the cause its detail names);
and, where the check has a say, `check` against the same server: it refuses what the run
refuses and passes what the run measures (a `Content-Length` past the body is not waited on).
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

import framing_server as fs  # noqa: E402

N = 4
MAX_TOKENS = 4
LIMIT_S = 60.0

SCENARIO = f"""name = "framing"
seed = 5
[workload]
prompt_tokens = {{ dist = "fixed", value = 8 }}
output_tokens = {{ dist = "fixed", value = {MAX_TOKENS} }}
[[phases]]
name = "main"
requests = {N}
arrival = {{ process = "constant", rate = 20 }}
"""
CONFIG = '[timeout]\nconnect = "2s"\nread = "3s"\n'

# behaviour -> (endpoint, what each record must be: (class, output tokens or None, detail part))
RUN_CASES: dict[str, tuple[str, tuple[str, int | None, str]]] = {
    "switching": ("chat", ("malformed", None, "101 Switching Protocols")),
    "long_length": ("chat", ("ok", MAX_TOKENS, "")),
    # the lean client's words (http1.BOTH_LENGTHS) and aiohttp's both name the two headers
    "te_and_cl": ("chat", ("malformed", None, "Content-Length")),
    "done_after_completed": ("responses", ("ok", MAX_TOKENS, "")),
    "padded_error": ("chat", ("http_500", None, "HTTP 500: " + fs.PADDED_MESSAGE)),
    "emb_dup_index": ("embeddings", ("malformed", None, "not a permutation of 0..1: [0]")),
    "emb_out_of_range": ("embeddings", ("malformed", None, "not a permutation of 0..0: [1]")),
    "emb_empty": ("embeddings", ("malformed", None, "an embedding is empty")),
    "emb_ragged": ("embeddings", ("malformed", None, "differ in length")),
    "emb_oversized": ("embeddings", ("body_too_large", None, "went on past")),
}


def harness(argv: list[str], folder: Path) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if "PYTEST" not in k}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        timeout=LIMIT_S,
        check=False,
    )


def record_class(d: dict[str, Any]) -> str:
    err = d.get("err")
    return "ok" if not err else f"http_{d.get('st')}" if err == "http_status" else str(err)


@pytest.mark.parametrize("client", ["fast", "aiohttp"])
@pytest.mark.parametrize("behaviour", list(RUN_CASES))
def test_the_run_records_each_answer_exactly(behaviour: str, client: str, tmp_path: Path) -> None:
    endpoint, (kind, tokens, detail) = RUN_CASES[behaviour]
    server = fs.FramingServer(behaviour).start()
    try:
        (tmp_path / "s.toml").write_text(SCENARIO)
        (tmp_path / "config.toml").write_text(CONFIG)
        argv = ["run", "s.toml", "--target", server.url("f"), "--model", fs.hs.MODEL]
        argv += ["--no-probe", "--http-client", client, "--out", "r.json"]
        argv += ["--config", "config.toml", "--endpoint", endpoint]
        done = harness(argv, tmp_path)
    finally:
        server.stop()
    assert b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
    lines = (tmp_path / "r.journal.jsonl").read_text().splitlines()
    records = [d for d in map(json.loads, lines) if d.get("t") == "rec" and not d.get("r")]
    assert sorted(r["seq"] for r in records) == list(range(N))
    for r in records:
        assert record_class(r) == kind, r
        if tokens is not None:
            assert r.get("ot") == tokens, r
        assert detail in str(r.get("msg", "")), r
    assert done.returncode == (0 if kind == "ok" else 1), done.stderr.decode()[-800:]


# behaviour -> (endpoint, check's exit, a line of its output that must appear)
CHECK_CASES = {
    "long_length": ("chat", None, "streaming request"),
    "done_after_completed": ("responses", None, "streaming request"),
    "switching": ("chat", 1, "101"),
    "te_and_cl": ("chat", 1, "Transfer-Encoding"),
    "emb_oversized": ("embeddings", 1, "went on past"),  # the run's words and bound
}


@pytest.mark.parametrize("behaviour", list(CHECK_CASES))
def test_check_reads_framing_as_the_run_does(behaviour: str, tmp_path: Path) -> None:
    endpoint, rc, needle = CHECK_CASES[behaviour]
    server = fs.FramingServer(behaviour).start()
    try:
        (tmp_path / "config.toml").write_text(CONFIG)
        argv = ["check", "--target", server.url("f"), "--model", fs.hs.MODEL]
        argv += ["--config", "config.toml", "--endpoint", endpoint]
        done = harness(argv, tmp_path)
    finally:
        server.stop()
    out = (done.stdout + done.stderr).decode()
    assert "Traceback" not in out
    assert needle in out, out
    if rc is None:  # the run measures it: the check's streaming steps pass
        lines = [ln for ln in out.splitlines() if "stream" in ln or "request shape" in ln]
        assert lines and not any("FAIL" in ln for ln in lines), out
    else:
        assert done.returncode == rc, out
