"""Exact prompt lengths from the simulator's /tokenize, through the real `run` path: with
`server_tokenize = "on"` every request's prompt, chat template and system prompt included, counts
exactly its planned tokens on the server; left on "auto", the built-in simulator keeps the
estimate (it counts words) and the result says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.record.journal import read_journal

pytestmark = pytest.mark.slow

SCENARIO = """
name = "exact"
seed = 4
[workload]
prompt_tokens = { dist = "uniform", min = 20, max = 300 }
output_tokens = { dist = "fixed", value = 8 }
system_prompt_tokens = 50
[[phases]]
name = "main"
requests = 30
arrival = { process = "poisson", rate = 20 }
[sim]
speedup = 20
"""


def _run(tmp_path: Path, name: str, *sets: str) -> tuple[dict, object]:
    scn = tmp_path / "s.toml"
    scn.write_text(SCENARIO)
    out = tmp_path / f"{name}.json"
    argv = [sys.executable, "-m", "harness", "run", str(scn), "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()) | {"_stderr": proc.stderr}, read_journal(
        out.with_suffix(".journal.jsonl")
    ).columns()


def test_server_tokenize_makes_every_prompt_count_as_planned(tmp_path):
    r, c = _run(tmp_path, "on", 'workload.server_tokenize="on"')
    lengths = r["plan"]["workload"]["prompt_lengths"]
    # the simulator's chat template: 4 tokens per message (system, user) and 3 to open the answer
    assert lengths["method"] == "server_tokenize" and lengths["template_tokens"] == 2 * 4 + 3, (
        lengths
    )
    assert "prompt lengths: exact, from the target's /tokenize" in r["_stderr"]
    assert c.ok.all() and c.n == 30
    assert np.array_equal(c.prompt_tokens, c.planned_prompt)  # what the server counted
    assert r["summary"]["tokens"]["prompt_synthesis_error"]["mean"] == 0.0


def test_the_built_in_simulator_keeps_the_estimate_on_auto(tmp_path):
    r, c = _run(tmp_path, "auto")
    lengths = r["plan"]["workload"]["prompt_lengths"]
    assert lengths["method"] == "estimate" and "counts words" in lengths["reason"]
    assert (c.prompt_tokens == c.planned_prompt + 11).all()  # the estimate leaves out the template
