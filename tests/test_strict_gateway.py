"""Gateways as they are: every shipped scenario against the simulator's OpenAI-strict stand-in
(refused vLLM extensions, natural EOS, usage only at the end, coalesced chunks, `: ping`
keep-alives), on both HTTP stacks; `check` and `--strict-request`; a run where every request
failed; per-token vs per-chunk ITL under coalescing; the 429 path under a TPM limit."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.orchestrate import run as runner
from harness.record.journal import read_journal
from harness.sim.app import SimServer, start_sim_server
from harness.sim.settings import SimSettings

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
MODEL = "Qwen2.5-7B-Instruct"
# A 128k-context model: the Mooncake excerpt's prompts reach 67k tokens.
GATEWAY_MODEL = "Llama-3.1-8B-Instruct"
# A gateway as users meet one: strict validation, tokens coalesced 1-4 per chunk, keep-alives.
GATEWAY = {
    "api_style": "openai-strict",
    "model": GATEWAY_MODEL,
    "chunk_tokens": ((1, 0.6), (2, 0.25), (4, 0.15)),
    "keepalive_s": 0.5,
    "speedup": 20.0,
}


class StandIn:
    """The simulator on its own event loop in a daemon thread, so its truth stays readable."""

    def __init__(self, **settings: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(start_sim_server(SimSettings(**settings)), self.loop)
        self.server: SimServer = fut.result(15)
        self.url = self.server.url

    def truth(self) -> list[Any]:
        """The run's requests (ids `<prefix>-<seq>-<attempt>`), not the probe's."""
        return [
            t
            for t in self.server.truth.values()
            if t.request_id.rsplit("-", 2)[-1].isdigit()
            and not t.request_id.startswith(("chatcmpl-", "cmpl-"))
        ]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextlib.contextmanager
def stand_in(**settings: Any) -> Iterator[StandIn]:
    s = StandIn(**settings)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def gateway() -> Iterator[StandIn]:
    with stand_in(**GATEWAY) as s:
        yield s


def run_scenario(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    scenario: Path,
    url: str,
    sets: list[str],
    client: str = "auto",
    **kw: Any,
) -> tuple[int, dict[str, Any]]:
    monkeypatch.chdir(tmp)  # no ./settings.json or ./config.toml of the checkout leaks in
    out = tmp / "r.json"
    rc = runner.run_command(
        runner.RunArgs(
            scenario=str(scenario),
            target=url,
            out=str(out),
            sets=sets,
            quiet=True,
            http_client=client,
            **kw,
        )
    )
    return rc, orjson.loads(out.read_bytes()) if out.exists() else {}


MIN_RATE = 6.0  # requests/s: a shortened phase still sends a few


def shortened(path: Path) -> list[str]:
    """`--set`s that make a scenario last a few seconds without changing its request shape."""
    doc = tomllib.loads(path.read_text())
    sets = []
    for i, ph in enumerate(doc["phases"]):
        if "duration" in ph:
            sets.append(f"phases.{i}.duration=1s")
            if (
                float(ph["arrival"].get("rate", MIN_RATE)) < MIN_RATE
            ):  # a few requests in that second
                sets.append(f"phases.{i}.arrival.rate={MIN_RATE}")
        if "requests" in ph:
            sets.append(f"phases.{i}.requests={min(int(ph['requests']), 24)}")
        if ph["arrival"].get("process") == "trace":
            sets.append(f"phases.{i}.arrival.time_scale=0.04")
    return sets


RUN_SCENARIOS = sorted(
    p for p in (REPO / "scenarios").glob("*.toml") if "scenario" not in tomllib.loads(p.read_text())
)  # sweep files name one


def test_the_shipped_scenarios_are_all_here() -> None:
    names = {p.stem for p in RUN_SCENARIOS}
    assert {
        "burst",
        "steady",
        "ramp",
        "closed_loop",
        "trace",
        "max_num_seqs",
        "soak",
        "llamacpp_parallel",
        "sweep_base",
    } <= names


@pytest.mark.parametrize("scenario", RUN_SCENARIOS, ids=[p.stem for p in RUN_SCENARIOS])
def test_every_shipped_scenario_runs_against_the_strict_stand_in(
    scenario: Path, gateway: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = ("fast", "aiohttp")[RUN_SCENARIOS.index(scenario) % 2]  # both HTTP stacks
    rc, r = run_scenario(tmp_path, monkeypatch, scenario, gateway.url, shortened(scenario), client)
    assert rc == 0
    planned = sum(ph["requests"]["planned_or_due"] for ph in r["phases"])
    completed = sum(ph["requests"]["completed"] for ph in r["phases"])
    assert planned > 0 and completed / planned >= 0.99, [ph["errors"] for ph in r["phases"]]
    doc = tomllib.loads(scenario.read_text())
    wl = doc["workload"]
    endpoint = doc.get("target", {}).get("endpoint", "chat")
    refused = {a["parameter"] for a in r["request_adaptations"]}
    want = set(wl.get("extra_body", {}))
    if endpoint in ("chat", "completions"):  # the chunk API's stream_options
        want.add("stream_options.continuous_usage_stats")
    if wl.get("ignore_eos", True) and endpoint != "embeddings":
        want.add("ignore_eos")
    assert refused == want
    assert r["options"]["http_client"] == client
    if endpoint == "embeddings":  # answers come whole: latency and rates, no tokens out
        e = r["summary"]["embeddings"]
        assert e["latency_ms"]["e2e"]["count"] == r["summary"]["requests"]["completed"] > 0
        assert e["inputs_per_s"] == pytest.approx(e["requests_per_s"] * wl["batch"])
        return
    assert r["output_lengths_forced"] is False
    tok = r["summary"]["tokens"]
    assert tok["output_count_source"] == "usage" and tok["itl_per"] == "chunk"
    assert tok["output_lengths"]["reached_planned_share"] < 0.5  # EOS ends answers early


# ---- before and after: the refusal is found, named and worked around ----------------------

STEADY = REPO / "scenarios" / "steady.toml"
SHORT = ["phases.0.duration=1s", "phases.1.duration=2s"]


def test_without_the_probe_every_request_fails_and_the_run_says_so(
    gateway: StandIn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, r = run_scenario(
        tmp_path, monkeypatch, STEADY, gateway.url, SHORT, probe=False, model=GATEWAY_MODEL
    )
    assert rc == 1 and r["complete"]
    err = capsys.readouterr().err
    n = r["summary"]["requests"]["failed"] + r["phases"][0]["requests"]["failed"]
    assert (
        f"error: every request failed ({n} of {n}); nothing was measured: http_400 ×{n}: Unrecognized "
        "request arguments supplied: ignore_eos, stream_options.continuous_usage_stats"
    ) in err
    assert r["summary"]["error_messages"]["http_400"][0]["message"] == (
        "Unrecognized request arguments supplied: ignore_eos, stream_options.continuous_usage_stats"
    )


def test_strict_request_stops_with_exit_2_and_the_same_explanation(
    gateway: StandIn, tmp_path: Path
) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(STEADY),
            "--target",
            gateway.url,
            "--strict-request",
            *[x for s in SHORT for x in ("--set", s)],
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: --strict-request: ")
    assert (
        "ignore_eos refused by the target: output lengths now follow the model's EOS; planned vs actual "
        "lengths are reported (server: HTTP 400: Unrecognized request arguments supplied: ignore_eos"
        in p.stderr
    )
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "r.json").exists()


def test_a_run_prints_the_adaptation_and_check_reports_the_same(
    gateway: StandIn, tmp_path: Path
) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(STEADY),
            "--target",
            gateway.url,
            *[x for s in SHORT for x in ("--set", s)],
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    line = (
        "ignore_eos refused by the target: output lengths now follow the model's EOS; planned vs actual "
        "lengths are reported"
    )
    assert f"warning: {line}" in p.stderr.splitlines()
    assert "output lengths (EOS decides): planned mean 128.0" in p.stdout
    c = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "check",
            "--target",
            gateway.url,
            "--model",
            GATEWAY_MODEL,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert c.returncode == 0, c.stdout
    assert f"  WARN  run's request shape: {line}" in c.stdout.splitlines()
    assert (
        "the target refuses ignore_eos: HTTP 400: Unrecognized request arguments supplied: ignore_eos, "
        "stream_options.continuous_usage_stats" in c.stdout
    )
    assert (
        "fix:   a run leaves it out and records that in its result (request_adaptations); "
        "--strict-request stops instead" in c.stdout
    )
    # a scenario's own extras are checked too
    c = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "check",
            "--target",
            gateway.url,
            "--model",
            GATEWAY_MODEL,
            "--scenario",
            str(REPO / "scenarios" / "llamacpp_parallel.toml"),
            "--endpoint",
            "completions",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert "run's request shape: cache_prompt refused by the target" in c.stdout


# ---- coalesced chunks: per-token ITL where usage allows, per chunk where it does not -------


@pytest.mark.parametrize("client", ["fast", "aiohttp"])
@pytest.mark.parametrize("style", ["vllm", "openai-strict"])
def test_coalesced_chunks_give_per_token_itl_only_where_usage_allows(
    style: str, client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stand_in(api_style=style, chunk_tokens=((3, 1.0),), speedup=20.0) as s:
        rc, r = run_scenario(tmp_path, monkeypatch, STEADY, s.url, SHORT, client)
        truth = s.truth()
    assert rc == 0
    tok, lat = r["summary"]["tokens"], r["summary"]["latency_ms"]
    recs = [x for x in read_journal(tmp_path / "r.journal.jsonl").records if x.ok and x.phase == 1]
    out_tokens = sum(x.output_tokens for x in recs)
    assert (
        out_tokens
        == tok["output_total"]
        == sum(
            t.completion_tokens
            for t in truth
            if t.request_id.split("-")[-2] in {str(x.seq) for x in recs}
        )
    )
    if style == "vllm":  # per-chunk usage: each chunk's 3 tokens are 3 ITL samples
        assert tok["output_count_source"] == "usage_per_chunk" and tok["itl_per"] == "token"
        assert lat["itl"]["count"] == out_tokens - sum(x.chunk_tokens[0] for x in recs)
        assert lat["itl"]["count"] > lat["inter_chunk"]["count"]
        assert "ITL (per token)" in runner.render_text(r)
    else:  # final usage only: the gaps are between chunks, and say so
        assert tok["output_count_source"] == "usage" and tok["itl_per"] == "chunk"
        assert (
            lat["itl"]["count"]
            == lat["inter_chunk"]["count"]
            == sum(len(x.chunk_ns) - 1 for x in recs)
        )
        assert 2.5 < tok["tokens_per_chunk_mean"] <= 3.0
        text = runner.render_text(r)
        assert (
            "ITL (per chunk)" in text and "ITL per chunk (chunks may carry several tokens" in text
        )
    # throughput and TPOT count tokens, not chunks, either way
    assert r["summary"]["throughput"]["output_tokens_per_s"] * r["summary"]["throughput"][
        "window_s"
    ] == pytest.approx(sum(r["timeseries"]["output_tokens"][1:3]), rel=0.35)
    tpot = [
        (x.chunk_ns[-1] - x.chunk_ns[0]) / (x.output_tokens - 1) / 1e6
        for x in recs
        if x.output_tokens > 1
    ]
    assert lat["tpot"]["mean"] == pytest.approx(sum(tpot) / len(tpot))


# ---- rate limits: the 429 path under a TPM limit -------------------------------------------


@pytest.mark.parametrize("client", ["fast", "aiohttp"])
@pytest.mark.parametrize("retry", [False, True])
def test_tpm_limit_gives_429s_as_data(
    retry: bool, client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # steady's requests cost ~256 prompt + 128 max_tokens; 60,000 TPM = 1,000 tokens/s: the 4/s
    # Poisson load (1,500 tokens/s) is over the limit
    sets = [*SHORT, "phases.1.duration=3s"]
    if retry:
        sets += ['retry.on=["429"]', "retry.max=4"]
    with stand_in(api_style="openai-strict", tpm_limit=60_000, speedup=20.0) as s:
        rc, r = run_scenario(tmp_path, monkeypatch, STEADY, s.url, sets, client)
        truth = s.truth()
    assert rc == 0
    n429 = sum(1 for t in truth if t.status == 429)
    assert n429 > 0 and sum(r["timeseries"]["http_429"]) == n429  # every 429, retried or not
    j = read_journal(tmp_path / "r.journal.jsonl")
    assert sum(1 for x in j.records if x.error_class == "http_429") == n429
    assert all(
        x.retry_after_s is not None and 0 < x.retry_after_s <= 1.0
        for x in j.records
        if x.error_class == "http_429"
    )  # retry-after-ms, read
    req = sum(ph["requests"]["retried_with_retry_after"] for ph in r["phases"])
    final_429 = sum(ph["errors"].get("http_429", 0) for ph in r["phases"])
    if retry:
        assert req > 0 and req == sum(ph["requests"]["retried_attempts"] for ph in r["phases"])
        assert final_429 < n429
    else:
        assert req == 0 and final_429 == n429
        msgs = r["summary"]["error_messages"]["http_429"]
        assert msgs[0]["message"].startswith(
            f"Rate limit reached for {MODEL} in organization org-harness-sim "
            "on tokens per min (TPM): Limit 60000"
        )
        assert len(msgs) == 1  # the counts in each message differ; they are one message


def test_a_scenarios_sim_table_sets_the_gateway_of_the_built_in_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No target: `[sim] api_style` and `tpm_limit` reach the simulator the run starts (what
    `capacity` and `sweep` start, too), and its 429s come back as data."""
    sets = [
        *SHORT,
        "phases.1.duration=3s",
        'sim.api_style="openai-strict"',
        "sim.tpm_limit=60000",
        "sim.speedup=20",
    ]
    rc, r = run_scenario(tmp_path, monkeypatch, STEADY, None, sets)  # type: ignore[arg-type]
    assert rc == 0 and r["target"]["kind"] == "simulator"
    assert "--api-style openai-strict" in r["target"]["server"]["command"]
    assert "--tpm-limit 60000" in r["target"]["server"]["command"]
    assert {a["parameter"] for a in r["request_adaptations"]} == {
        "ignore_eos",
        "stream_options.continuous_usage_stats",
    }
    assert sum(r["timeseries"]["http_429"]) > 0 and r["summary"]["errors"].get("http_429", 0) > 0
    assert r["summary"]["requests"]["completed"] > 0
