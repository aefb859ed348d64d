"""vLLM's pooling runner on CPU serves `/v1/embeddings` for the tiny random model the suite builds
(scripts/make_tiny_model.py, a LlamaForCausalLM): `--runner pooling --convert embed` wraps it as an
embedding model (last-token pooling). One server, one test: `check --endpoint embeddings` passes
and an embeddings run of batches completes every request, with vLLM's `usage.prompt_tokens` per
request and the result's `embeddings` block (issue 25, section 6)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from harness.cli import main
from harness.record.journal import read_journal
from harness.server import launcher
from tests.integration.capacity_runs import CpuSplit
from tests.integration.test_vllm import (  # noqa: F401 - fixtures, found by name
    SERVER_ENV,
    START_TIMEOUT_S,
    _free_port,
    tiny_model,
    vllm_ready,
)

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

BATCH = 4
SCENARIO = f"""
name = "vllm_embed"
seed = 7
[target]
endpoint = "embeddings"
[workload]
prompt_tokens = {{ dist = "uniform", min = 16, max = 96 }}
batch = {BATCH}
[[phases]]
name = "main"
requests = 12
arrival = {{ process = "poisson", rate = 6 }}
"""


def test_embeddings_on_vllms_pooling_runner(
    vllm_ready: Path,  # noqa: F811 - the fixture
    tiny_model: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = _free_port()
    split = CpuSplit()
    bind = {} if split.engine is None else {"VLLM_CPU_OMP_THREADS_BIND": str(split.engine)}
    argv = [
        *split.server_prefix(split.rest),
        str(vllm_ready),
        "-m",
        launcher.VLLM_MODULE,
        "--model",
        str(tiny_model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "1024",
        "--served-model-name",
        "tiny",
        "--enforce-eager",
        "--runner",
        "pooling",
        "--convert",
        "embed",
    ]
    base = f"http://127.0.0.1:{port}"
    monkeypatch.chdir(tmp_path)
    with (
        launcher.start_server(
            argv,
            health_url=base + "/health",
            base_url=base,
            log_path=tmp_path / "vllm.log",
            timeout_s=START_TIMEOUT_S,
            kind="vllm",
            env={**os.environ, **SERVER_ENV, **bind},
        ),
        split.client(),
    ):
        assert main(["check", "--target", base, "--model", "tiny", "--endpoint", "embeddings"]) == 0
        assert "1 embedding(s), usage: " in capsys.readouterr().out
        (tmp_path / "s.toml").write_text(SCENARIO)
        out = tmp_path / "r.json"
        assert main(["run", "s.toml", "--target", base, "--out", str(out), "--quiet"]) == 0
        # The shipped scenario as a user runs it against vLLM, shortened, and with inputs that fit
        # the tiny model's 1,024 positions with its BOS token: every request completes.
        shipped = tmp_path / "shipped.json"
        argv = ["run", str(REPO / "scenarios" / "embeddings.toml"), "--target", base]
        argv += ["--set", "phases.1.duration=3s", "--set", "workload.prompt_tokens.max=512"]
        # the shipped scenario's SLO is for a GPU: on vLLM's CPU build it may be missed (exit 99)
        assert main([*argv, "--out", str(shipped), "--quiet", "--no-slo-exit"]) == 0
    ship = orjson.loads(shipped.read_bytes())["summary"]
    assert ship["requests"]["failed"] == 0 and ship["requests"]["completed"] > 0, ship["errors"]
    assert ship["embeddings"]["batch"] == 16
    r = orjson.loads(out.read_bytes())
    s = r["summary"]
    assert s["requests"]["completed"] == 12 and s["requests"]["failed"] == 0, s["errors"]
    records = read_journal(out.with_suffix(".journal.jsonl")).records
    for rec in records:
        assert rec.ok and rec.chunk_ns == () and rec.output_tokens == 0
        # vLLM's own count of the batch's tokens (its tokenizer, BOS per input): near the plan's
        assert rec.planned_prompt_tokens <= rec.prompt_tokens <= 2 * rec.planned_prompt_tokens
    e = s["embeddings"]
    assert e["batch"] == BATCH and e["latency_ms"]["e2e"]["count"] == 12
    assert e["inputs_per_s"] == pytest.approx(BATCH * e["requests_per_s"])
