"""Helpers for the reliability tests: a simulator in a background thread (so its truth is
readable), a simulator subprocess that can be killed, and an in-process `run` with short
client timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from harness.orchestrate import run as runner
from harness.record.journal import Journal, read_journal
from harness.sim.app import SimServer, start_sim_server
from harness.sim.settings import SimSettings

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
FAKE_KEY = "sk-rel-SECRETSECRET-7f3a9c1e5b2d4a60"  # first 6 chars "sk-rel" may appear, never more


class SimThread:
    """The simulator on its own event loop in a daemon thread; `truth` is its request log."""

    def __init__(self, port: int = 0, api_key: str | None = None, **settings: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.settings = SimSettings(**{"speedup": 20.0, **settings})
        self.api_key = api_key
        self.server: SimServer = self._call(
            start_sim_server(self.settings, port=port, api_key=api_key)
        )

    def _call(self, coro: Any, timeout: float = 15.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def url(self) -> str:
        return self.server.base_url

    def truth_by_seq(self) -> dict[int, list[Any]]:
        """seq -> the truths of its attempts (request ids are `<prefix>-<seq>-<attempt>`)."""
        out: dict[int, list[Any]] = {}
        for t in self.server.truth.values():
            parts = t.request_id.rsplit("-", 2)
            if len(parts) == 3 and parts[1].isdigit():
                out.setdefault(int(parts[1]), []).append(t)
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextlib.contextmanager
def sim_thread(**kw: Any) -> Iterator[SimThread]:
    s = SimThread(**kw)
    try:
        yield s
    finally:
        s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=1) as r:
            if r.status == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{url} not healthy")


class SimProcess:
    """`python -m harness sim` on a fixed port, as a child process that can be SIGKILLed."""

    def __init__(self, port: int, log: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [PY, "-m", "harness", "sim", "--port", str(port), *args],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=REPO,
                env=env,
                process_group=0,  # killpg, and the caller's autogroup (launcher._spawn)
            )
        wait_healthy(self.url)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def write_scenario(
    path: Path,
    *,
    rate: float = 20.0,
    duration: str = "2s",
    output_tokens: int = 32,
    extra: str = "",
    name: str = "rel",
) -> Path:
    path.write_text(f"""
name = "{name}"
seed = 11
[workload]
prompt_tokens = {{ dist = "fixed", value = 64 }}
output_tokens = {{ dist = "fixed", value = {output_tokens} }}
[[phases]]
name = "main"
duration = "{duration}"
arrival = {{ process = "constant", rate = {rate} }}
{extra}
""")
    return path


def run_inprocess(
    monkeypatch: Any,
    scenario: Path,
    out: Path,
    target: str | None,
    *,
    idle_s: float | None = None,
    first_token_s: float | None = None,
    probe: bool = False,
    grace_s: float = 2.0,
    sets: list[str] | None = None,
    http_client: str = "auto",
) -> tuple[int, float]:
    """`run` in this process (so a test can read the simulator's truth); returns (exit, wall s).
    `http_client`: the transport (fast, aiohttp; auto: fast for http://).

    Runs in the result's folder, so no ./config.toml or ./settings.json of the checkout leaks in.
    """
    monkeypatch.chdir(out.parent)
    if idle_s is not None or first_token_s is not None:

        def short(t: Any) -> Any:
            if t is None:
                return t
            to = replace(
                t.timeouts,
                idle_s=idle_s or t.timeouts.idle_s,
                first_token_s=first_token_s or t.timeouts.first_token_s,
            )
            return replace(t, timeouts=to)

        if hasattr(runner, "resolve_run"):
            orig_run = runner.resolve_run

            def resolve_run(args: Any, scn: Any, *a: Any) -> Any:
                res = orig_run(args, scn, *a)
                res.target = short(res.target)
                return res

            monkeypatch.setattr(runner, "resolve_run", resolve_run)
        else:
            orig = runner.resolve_target
            monkeypatch.setattr(runner, "resolve_target", lambda args, scn: short(orig(args, scn)))
    t0 = time.monotonic()
    rc = runner.run_command(
        runner.RunArgs(
            scenario=str(scenario),
            target=target,
            out=str(out),
            quiet=True,
            probe=probe,
            grace_s=grace_s,
            sets=sets or [],
            http_client=http_client,
        )
    )
    return rc, time.monotonic() - t0


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(path.read_bytes())


def journal_of(out: Path) -> Journal:
    return read_journal(runner.journal_path_for(out))


def final_records(j: Journal) -> dict[int, Any]:
    """seq -> its final record (retried attempts left out); asserts one final record per seq."""
    out: dict[int, Any] = {}
    for r in j.records:
        if r.retried:
            continue
        assert r.seq not in out, f"seq {r.seq} has two final records"
        out[r.seq] = r
    return out


def harness_cmd(*args: str) -> list[str]:
    return [PY, "-m", "harness", *args]
