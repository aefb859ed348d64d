"""`check` against the simulator set up to fail each way, and once set up to pass."""

from __future__ import annotations

import asyncio
import socket

import pytest

from harness.client.check import FAIL, PASS, SKIP, run_checks
from harness.config.target import Secret, Target, Timeouts
from harness.sim.app import start_sim_server
from harness.sim.settings import SimSettings

FAST = {"speedup": 200.0}
MODEL = "Qwen2.5-7B-Instruct"


def _target(
    base: str, model: str | None = MODEL, key: str | None = None, read_s: float = 30.0
) -> Target:
    return Target(
        "http",
        base,
        model,
        "chat",
        Secret(key) if key else None,
        "env TEST_KEY" if key else "",
        timeouts=Timeouts(connect_s=2.0, first_token_s=read_s, idle_s=read_s),
    )


def _check(settings: dict | None = None, api_key: str | None = None, path: str = "", **tkw):
    async def go():
        server = await start_sim_server(
            SimSettings(**{**FAST, **(settings or {})}), api_key=api_key
        )
        try:
            t = _target(server.url + path, **tkw)
            return await run_checks(
                t, health_path="/health", max_tokens=8, read_timeout_s=t.timeouts.first_token_s
            )
        finally:
            await server.close()

    return {s.name: s for s in asyncio.run(go())}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_all_pass():
    steps = _check()
    assert [s.status for s in steps.values()] == [PASS] * 5, steps
    assert (
        "accepted (stream_options.continuous_usage_stats, ignore_eos); per-chunk usage reported"
        in steps["run's request shape"].detail
    )
    assert "TTFT" in steps["streaming request"].detail
    assert "usage: " in steps["non-streaming request"].detail


@pytest.mark.slow
def test_wrong_key_is_401_with_cause():
    steps = _check(api_key="sk-right-key-000", key="sk-wrong-key-111")
    s = steps["GET /v1/models"]
    assert s.status == FAIL and "401" in s.detail
    assert "missing, wrong, or has stray whitespace" in s.cause and "sk-wro***" in s.cause
    assert "wrong-key" not in s.cause + s.fix + s.detail


@pytest.mark.slow
def test_missing_key_is_401():
    steps = _check(api_key="sk-right-key-000")
    assert (
        steps["GET /v1/models"].status == FAIL
        and "no key was sent" in steps["GET /v1/models"].cause
    )


@pytest.mark.slow
def test_root_path_missing_from_base_url_is_404_path():
    steps = _check({"root_path": "/api"})  # server under /api, client without it
    s = steps["GET /v1/models"]
    assert s.status == FAIL and "404" in s.detail and "base URL's path" in s.cause
    ok = _check({"root_path": "/api"}, path="/api")  # with /api: all pass
    assert all(x.status == PASS for x in ok.values())


@pytest.mark.slow
def test_unknown_model():
    steps = _check(model="no-such-model")
    s = steps["GET /v1/models"]
    assert (
        s.status == FAIL and "'no-such-model' is not in the list" in s.detail and MODEL in s.detail
    )
    assert (
        steps["non-streaming request"].status == FAIL
        and "model" in steps["non-streaming request"].cause
    )


@pytest.mark.slow
def test_no_model_configured_uses_first_listed():
    steps = _check(model=None)
    assert steps["GET /v1/models"].status == PASS and MODEL in steps["GET /v1/models"].detail
    assert steps["streaming request"].status == PASS


def test_closed_port_is_connection_refused():
    async def go():
        t = _target(f"http://127.0.0.1:{_free_port()}")
        return await run_checks(t, health_path="/health", max_tokens=8, read_timeout_s=5)

    steps = asyncio.run(go())
    assert steps[0].status == FAIL and steps[0].detail == "connection refused"
    assert "not up or listens on another port" in steps[0].cause
    assert steps[-1].status == SKIP and len(steps) == 2  # no point going on


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "fragment"),
    [
        ("http429", "rate limited (Retry-After: 1 s)"),
        ("http500", "the server failed (HTTP 500)"),
    ],
)
def test_fault_status(fault, fragment):
    steps = _check({"faults": {fault: 1.0}})
    s = steps["non-streaming request"]
    assert s.status == FAIL and fragment in s.cause


@pytest.mark.slow
def test_fault_disconnect_fails_the_stream():
    steps = _check({"faults": {"disconnect": 1.0}})
    s = steps["streaming request"]
    assert s.status == FAIL and ("cut" in s.detail or "[DONE]" in s.detail), s


@pytest.mark.slow
def test_fault_malformed_event():
    steps = _check({"faults": {"malformed": 1.0}})
    s = steps["streaming request"]
    assert s.status == FAIL and "bad event" in s.detail


@pytest.mark.slow
def test_read_timeout_names_the_setting():
    steps = _check({"faults": {"slow_headers": 1.0}, "speedup": 1.0}, read_s=0.5)
    s = steps["non-streaming request"]
    assert s.status == FAIL and s.detail == "read timeout" and "[timeout] read" in s.fix


@pytest.mark.slow
def test_cli_exit_codes(tmp_path, monkeypatch, capsys):
    from harness.cli import main
    from harness.server.launcher import start_sim

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TEST_KEY", "sk-clitestkey42")
    (tmp_path / "settings.json").write_text(
        '{"base_url": "http://127.0.0.1:1", "env_fallback": "TEST_KEY"}'
    )
    with start_sim(["--speedup", "200"], tmp_path / "sim.log", api_key="sk-clitestkey42") as sim:
        rc = main(["check", "--target", sim.base_url + "/v1/", "--model", MODEL])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert "sk-cli***" in out and "clitestkey" not in out and "env TEST_KEY" in out
    rc = main(["check"])  # settings.json's closed port
    out = capsys.readouterr().out
    assert rc == 1 and "connection refused" in out and "FAILED" in out
