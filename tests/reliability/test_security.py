"""Security: a recognisable fake key never leaks beyond its first 6 characters into anything
any command prints or writes; TLS certificates are verified unless --insecure says otherwise,
and --insecure shows in the result and the report."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from relhelp import FAKE_KEY, PY, SimProcess, free_port, load, wait_healthy, write_scenario

pytestmark = pytest.mark.slow

KEY_ENV = "REL_TEST_API_KEY"
VISIBLE = 6


def leaks(text: str | bytes) -> list[str]:
    """Pieces of the key longer than its visible prefix found in `text`."""
    data = text.encode() if isinstance(text, str) else text
    found = []
    for i in range(len(FAKE_KEY) - VISIBLE):
        piece = FAKE_KEY[i : i + VISIBLE + 1].encode()
        if piece in data:
            found.append(piece.decode())
    return found


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    env.update(extra)
    return env


def _files(root: Path, skip: set[Path]) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.is_file() and p not in skip:
            yield p


def test_no_command_leaks_the_key(tmp_path: Path) -> None:
    port = free_port()
    sim = SimProcess(
        port, tmp_path / "sim-server.log", "--speedup", "20", env=_env(HARNESS_SIM_API_KEY=FAKE_KEY)
    )
    env = _env(**{KEY_ENV: FAKE_KEY})
    write_scenario(
        tmp_path / "s.toml",
        rate=10,
        duration="1s",
        extra=f'[target]\nurl = "{sim.url}"\napi_key_env = "{KEY_ENV}"\n',
    )
    (tmp_path / "sweep.toml").write_text(
        f'name = "sw"\nscenario = "s.toml"\n[server]\nkind = "external"\ntarget = "{sim.url}"\n[load]\nrate = [5]\n'
    )
    settings = tmp_path / "settings.json"  # holds the key on purpose: never scanned, never echoed
    settings.write_text(
        f'{{"base_url": "{sim.url}", "api_key": "{FAKE_KEY}", "default_model": "Qwen2.5-7B-Instruct"}}'
    )
    outputs: list[tuple[str, str]] = []

    def cmd(*args: str, ok: bool = True, **kw: str) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            [PY, "-m", "harness", *args],
            cwd=tmp_path,
            env={**env, **kw},
            capture_output=True,
            text=True,
            timeout=120,
        )
        outputs.append((" ".join(args), p.stdout + p.stderr))
        if ok:
            assert p.returncode == 0, (args, p.stdout[-1500:], p.stderr[-1500:])
        return p

    try:
        cmd(
            "run", "s.toml", "--out", "r.json", "--settings", "/dev/null/none", ok=False
        )  # a bad flag
        cmd("run", "s.toml", "--out", "r.json")
        assert load(tmp_path / "r.json")["target"]["api_key"] == FAKE_KEY[:VISIBLE] + "***"
        cmd("run", "s.toml", "--explain")
        cmd("run", "s.toml", "--out", "r2.json", "--settings", "settings.json")
        cmd("report", "r.json", "--html", "r.html")
        cmd("report", "r.journal.jsonl", "--out", "rebuilt.json")
        cmd("compare", "r.json", "r2.json", "--html", "c.html", ok=False)
        cmd(
            "check",
            "--target",
            sim.url,
            "--model",
            "Qwen2.5-7B-Instruct",
            "--settings",
            "settings.json",
            ok=False,
        )
        cmd("check", "--settings", "settings.json", ok=False)
        # a wrong key: the 401 and every message about it must not echo the key either
        cmd("run", "s.toml", "--out", "bad.json", ok=False, **{KEY_ENV: FAKE_KEY[::-1]})
        cmd("sweep", "sweep.toml", "--out", "sweep-out", "--quiet")
        cmd(
            "capacity",
            "s.toml",
            "--slo",
            "ttft_p99=5s",
            "--probe-duration",
            "1s",
            "--confirm-runs",
            "1",
            "--confirm-duration",
            "1s",
            "--max-probes",
            "2",
            "--out",
            "cap-out",
            "--quiet",
            ok=False,
        )
        # the simulator's own command line with the key given as a flag: it prints 6 characters
        sim_port = free_port()
        sp = subprocess.Popen(
            [PY, "-m", "harness", "sim", "--port", str(sim_port), "--api-key", FAKE_KEY],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert sp.stdout is not None
            first = sp.stdout.readline() + sp.stdout.readline()
        finally:
            sp.terminate()
            rest, _ = sp.communicate(timeout=30)
        outputs.append(("sim --api-key", first + rest))
        serve_port = free_port()
        cmd(
            "serve",
            "--engine",
            "sim",
            "--port",
            str(serve_port),
            "--dry-run",
            ok=False,
            HARNESS_SIM_API_KEY=FAKE_KEY,
        )
        _serve_briefly(tmp_path, serve_port, {**env, "HARNESS_SIM_API_KEY": FAKE_KEY}, outputs)
    finally:
        sim.kill()
    bad = [(c, leaks(o)) for c, o in outputs if leaks(o)]
    assert not bad, f"printed: {bad}"
    written = [p for p in _files(tmp_path, {settings}) if leaks(p.read_bytes())]
    assert written == [], f"written: {written}"
    # the files that should exist did get written (so the scan above covered them)
    for name in ("r.json", "r.journal.jsonl", "r.html", "rebuilt.json", "r2.json"):
        assert (tmp_path / name).exists(), name
    assert list((tmp_path / "sweep-out").rglob("*.journal.jsonl"))


def _serve_briefly(
    tmp_path: Path, port: int, env: dict[str, str], outputs: list[tuple[str, str]]
) -> None:
    """`serve --engine sim` until healthy, then Ctrl-C; its output and log are scanned too."""
    log = tmp_path / "serve.log"
    p = subprocess.Popen(
        [PY, "-m", "harness", "serve", "--engine", "sim", "--port", str(port), "--log", str(log)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with contextlib.suppress(TimeoutError):
            wait_healthy(f"http://127.0.0.1:{port}", 20)
    finally:
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
    outputs.append(("serve", out))


# -- TLS -----------------------------------------------------------------------------------


@contextlib.contextmanager
def https_sim(tmp_path: Path) -> Iterator[str]:
    """The simulator's app behind a self-signed certificate on 127.0.0.1."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    from aiohttp import web

    from harness.sim.app import SimState, build_app
    from harness.sim.settings import SimSettings

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    state = SimState(SimSettings(speedup=20.0).resolved(), None)

    async def start() -> tuple[web.AppRunner, int]:
        runner = web.AppRunner(build_app(state), access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        state.engine.start()
        return runner, runner.addresses[0][1]

    runner, port = asyncio.run_coroutine_threadsafe(start(), loop).result(15)
    try:
        yield f"https://127.0.0.1:{port}"
    finally:

        async def stop() -> None:
            await state.engine.stop()
            await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        th.join(10)
        loop.close()


def test_tls_verified_by_default_and_insecure_is_recorded(tmp_path: Path) -> None:
    scn = write_scenario(tmp_path / "s.toml", rate=10, duration="1s")
    with https_sim(tmp_path) as url:

        def run(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [PY, "-m", "harness", "run", str(scn), "--target", url, *extra],
                cwd=tmp_path,
                env=_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )

        p = run("--out", "strict.json")
        assert p.returncode != 0 and "Traceback" not in p.stderr
        assert "certificate" in p.stderr.lower(), p.stderr
        assert not (tmp_path / "strict.json").exists()
        t0 = time.monotonic()
        p = run("--out", "insecure.json", "--insecure")
        assert p.returncode == 0, p.stderr[-2000:]
        assert time.monotonic() - t0 < 60
    r = load(tmp_path / "insecure.json")
    assert r["target"]["tls_verify"] is False
    assert r["summary"]["requests"]["completed"] == 10
    assert "TLS certificate verification was OFF" in p.stdout
