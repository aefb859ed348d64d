"""Integration: `capacity` against a real continuous-batching server, llama.cpp's llama-server.

Starts llama-server (Gemma 3 270M Q4_K_M, cached by scripts/install_llamacpp.sh) on 127.0.0.1
with 4 slots and one thread on its own core, searches the highest constant rate of short
completions that meets a TTFT and an ITL SLO, and verifies the answer as the issue asks: a run
at the answer meets the SLOs, a run at 1.3x it does not (`capacity --verify`). One confirmation
run at the answer first (a failed confirmation moves the answer down to the next rate that
passed). The server's own waiting queue (`llamacpp:requests_deferred`) feeds the runaway
detector. `capacity_runs.py` says why the arrivals are constant, why the thread has a core to
itself, and what is checked when the server's speed changed during the command.

Skipped with the reason when the server or model is missing, unless HARNESS_REQUIRE_LLAMACPP
is set (CI sets it after installing them): then missing is a failure. About two minutes on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.server import launcher, llamacpp
from tests.integration.capacity_runs import CpuSplit, check_verified, verified_capacity
from tests.reliability.relhelp import free_port

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.one_core,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]

SLOTS = 4
SCENARIO = """
name = "llamacpp_capacity"
seed = 21
[target]
endpoint = "completions"
[workload]
prompt_tokens = { dist = "uniform", min = 24, max = 48 }
output_tokens = { dist = "fixed", value = 16 }
ignore_eos = true
extra_body = { cache_prompt = false }
[[phases]]
name = "warmup"
requests = 2
arrival = { process = "constant", rate = 1.0 }
warmup = true
[[phases]]
name = "main"
duration = "12s"
arrival = { process = "constant", rate = 2.0 }
"""
# The knee is where the 4 slots fill and requests queue: TTFT binds there. Measured with the
# thread on its own core (15 s runs, constant arrivals): the server serves 1.9-2.3 req/s; TTFT
# p90 0.2-0.9 s up to 2.1 req/s, 1.8-2.8 s at 2.4, 2.6-5.3 s at 2.7-3. p90, not p99: a probe
# holds a few dozen requests, whose p99 is their slowest one. ITL on a shared 2-core machine
# swings with other processes, so its limit is loose.
SLOS = ["ttft_p90=1.5s", "itl_p99=1s"]
# The search starts at 2.0 req/s and stops within 25 % (it took six probes from 1.0 within 15 %:
# 1.0, 2.0, 4.0, 2.83, 2.38, 2.18 on 2026-12-02; from 1.4, five on a faster machine of 2026-12-04:
# 1.4, 2.8, 5.6, 3.96, 3.33; from 2.0 there, 2.0, 4.0, 2.83, 2.38 and, where 2.83 sat at the knee
# and passed or failed by chance, runs again of it: 6-10 in all). 25 % keeps the verification
# sound: an answer at most 25 % under the knee times 1.3 is above it.
THREADS = 1  # one thread, on a core of its own: nothing else can stall every step


def test_capacity_of_llamacpp_verified_at_the_answer_and_above(
    llama_ready: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no config.toml / settings.json from the repository root
    scenario = tmp_path / "cap.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    server = llamacpp.resolve(parallel=SLOTS, port=free_port(), ctx_per_slot=256, threads=THREADS)
    split = CpuSplit()
    engine = [] if split.engine is None else [split.engine]
    with (
        launcher.start_server(
            [*split.server_prefix(engine), *server.argv()],
            health_url=server.health_url,
            base_url=server.origin,
            log_path=tmp_path / "llama-server.log",
            timeout_s=120,
            kind="llama.cpp",
        ),
        split.client(),
    ):
        argv = [
            "capacity",
            str(scenario),
            "--target",
            server.base_url,
            "--model",
            server.model_name,
            "--probe-duration",
            "12s",
            "--max-probe-duration",
            "15s",
            "--tolerance",
            "25%",
            "--confirm-runs",
            "1",
            "--confirm-duration",
            "15s",
            "--max-probes",
            "8",
            "--quiet",
        ]
        for s in SLOS:
            argv += ["--slo", s]
        rc, rep, out = verified_capacity(argv, tmp_path / "cap")
    check_verified(rc, rep)
    assert rep["target_kind"] == "http" and all(
        (out / p["result"]).is_file() for p in rep["probes"]
    )
    # A 16-token answer from 4 slots on 2 cores: a few requests/s, not tens
    assert 0.3 < rep["answer_requests_per_s"] < 20
