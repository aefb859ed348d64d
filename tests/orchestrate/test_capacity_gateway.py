"""capacity against a gateway whose limit is a rate limit, not latency: the strict stand-in
(`api_style = "openai-strict"`) with a tokens-per-minute limit answers 429 above it while its
latency stays flat. The answer must come from the error_share SLO, sit at or just below the
limit, and name error_share as what binds it."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from harness.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROMPT_TOKENS, MAX_TOKENS = 100, 50
TPM_LIMIT = 90_000
# The simulator charges prompt + max_tokens per request, as OpenAI counts: 90,000 tokens a
# minute is 1,500 a second, 10 requests of 150 tokens.
LIMIT_RPS = TPM_LIMIT / 60 / (PROMPT_TOKENS + MAX_TOKENS)
TOLERANCE = 0.15

SCENARIO = f"""
name = "tpm_capacity"
seed = 3
[workload]
prompt_tokens = {{ dist = "fixed", value = {PROMPT_TOKENS} }}
output_tokens = {{ dist = "fixed", value = {MAX_TOKENS} }}
[[phases]]
name = "main"
duration = "6s"
arrival = {{ process = "constant", rate = 6.0 }}
[sim]
api_style = "openai-strict"
tpm_limit = {TPM_LIMIT}
# A quarter-second bucket: with the default second's worth, 5 % over the limit empties it only
# after ~20 s, so a 6 s probe at 10.5 req/s passed now and then (once, on a loaded machine)
rate_limit_burst_s = 0.25
speedup = 10
"""


def test_capacity_of_a_tpm_limited_gateway_is_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    scenario = tmp_path / "tpm.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    out = tmp_path / "cap"
    rc = main(
        [
            "capacity",
            str(scenario),
            "--slo",
            # 20 s of model time is 2 s of real time at speedup 10: the gateway's latency is flat
            # below and above its limit, and a latency SLO must not bind before the 429s do. (2 s
            # of model time, 0.2 s real, bound a full run's probes on a loaded 2-core machine.)
            "ttft_p99=20s",
            "--probe-duration",
            "6s",
            "--max-probe-duration",
            "12s",
            "--confirm-runs",
            "0",
            "--tolerance",
            "8%",
            "--max-probes",
            "7",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    rep = json.loads((out / "capacity.json").read_text())
    answer = rep["answer_requests_per_s"]
    assert rc == 0 and answer is not None, rep["probes"]
    assert (1 - TOLERANCE) * LIMIT_RPS <= answer <= LIMIT_RPS * 1.01, rep["probes"]
    assert rep["binding_slo"] == "error_share"
    failed = rep["evidence"]["failed"]
    assert failed is not None and failed["rate"] > answer
    assert (
        failed["ratios"]["error_share"] > 1 and failed["ratios"]["ttft_p99"] < 1
    )  # latency stayed flat
    refused = orjson.loads((out / failed["result"]).read_bytes())
    assert refused["summary"]["errors"].get("http_429", 0) > 0, refused["summary"]["errors"]
    # the run adapted to the strict gateway rather than failing on ignore_eos
    assert {a["parameter"] for a in refused["request_adaptations"]} >= {"ignore_eos"}
    # ...and said so once, not once per probe
    assert len(rep["probes"]) > 2
    assert capsys.readouterr().err.count("warning: ignore_eos refused by the target") == 1


def test_a_target_that_fails_the_first_request_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first probe cannot even start (nothing listens): one line naming the probe and the
    target's failure, exit 1, no traceback (the probe has no journal to read)."""
    from tests.reliability.relhelp import free_port

    monkeypatch.chdir(tmp_path)
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    rc = main(
        [
            "capacity",
            str(scenario),
            "--slo",
            "ttft_p99=1s",
            "--target",
            f"http://127.0.0.1:{free_port()}",
            "--model",
            "m",
            "--out",
            str(tmp_path / "cap"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert (
        err[0].startswith("error: the probe at 6 req/s could not run: the target")
        and "failed a first" in err[0]
    )
