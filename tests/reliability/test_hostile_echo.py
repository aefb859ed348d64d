"""A server that echoes what it was sent and answers in terminal controls: the key, a
settings.json header and control characters must not reach any artefact or the terminal.

The server (aiohttp.web on 127.0.0.1, in a thread of this test) puts the request's
`Authorization` and `api-key` headers, with ESC/OSC/CSI/OSC 52/C1/bidi sequences, into its model
id, its HTTP error bodies (JSON and plain), in-stream `error` events, events that are not JSON,
a Retry-After and /tokenize's error; its /metrics labels carry controls. The commands run in
this process (`harness.cli.main`) on both transports: run, report (text, HTML, journal rebuild),
export, compare, check, and a run whose probe fails. Every file written and everything printed
is searched for any 7 characters of either secret and for any control character a terminal
would obey. Masked forms and escapes must show up too, so the server did echo and the test
cannot pass by the echo never happening.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from relhelp import FAKE_KEY

from harness.cli import main
from harness.redact import mask

pytestmark = pytest.mark.slow

HDR = "hdr-SECRET-9d8c7b6a5f4e3d2c1b0a"  # the value of a settings.json header
CONTROLS = "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x9b31m\u202e\rX"
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
PROBE_PROMPT = "Say hello."  # harness.client.probe's: the probe gets a good answer


def leaks(data: str | bytes) -> list[str]:
    """7-character pieces of the key or the header value found in `data`."""
    raw = data.encode() if isinstance(data, str) else data
    return [
        s[i : i + 7]
        for s in (FAKE_KEY, HDR)
        for i in range(len(s) - 6)
        if s[i : i + 7].encode() in raw
    ]


def unsafe_bytes(data: bytes) -> list[str]:
    """Control characters a terminal obeys, as raw bytes in a file (ESC, other C0, C1 in UTF-8);
    CR aside, which CSV line ends carry."""
    text = data.decode("utf-8", "replace")
    return sorted({f"U+{ord(c):04X}" for c in UNSAFE.findall(text)} - {"U+000D"})


def _sse(*events: str) -> bytes:
    return "".join(f"data: {e}\n\n" for e in events).encode()


GOOD = _sse(
    json.dumps({"choices": [{"index": 0, "delta": {"content": "hi"}}]}),
    json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
    "[DONE]",
)


class EchoServer:
    """The hostile server; `base` is its URL. Under /probefail every request fails (401)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.modes = itertools.cycle(range(6))
        app = web.Application()
        for prefix in ("", "/probefail"):
            app.router.add_get(prefix + "/health", self.health)
            app.router.add_get(prefix + "/v1/models", self.models)
            app.router.add_post(prefix + "/v1/chat/completions", self.chat)
            app.router.add_post(prefix + "/tokenize", self.tokenize)
            app.router.add_get(prefix + "/metrics", self.metrics)
        self.runner = web.AppRunner(app, access_log=None)
        self._call(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self._call(site.start())
        port = self.runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}"

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(15)

    def close(self) -> None:
        self._call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    @staticmethod
    def echo(request: web.Request) -> str:
        return (
            f"{request.headers.get('Authorization')} api-key={request.headers.get('api-key')} "
            f"{CONTROLS}"
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m " + self.echo(request)}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "no: " + self.echo(request)}}, status=404)

    async def metrics(self, request: web.Request) -> web.Response:
        text = (
            "# TYPE vllm:cache_config_info gauge\n"
            'vllm:cache_config_info{block_size="16",evil="\x1b]0;t\x07 \x9b2J"} 1\n'
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
        )
        return web.Response(text=text, content_type="text/plain")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        echo = self.echo(request)
        if request.path.startswith("/probefail"):
            return web.json_response({"error": {"message": "bad key: " + echo}}, status=401)
        if not body.get("stream"):  # check's non-streaming request
            return web.json_response({"error": {"message": "whole: " + echo}}, status=403)
        if body["messages"][-1]["content"] == PROBE_PROMPT:
            return web.Response(body=GOOD, content_type="text/event-stream")
        mode = next(self.modes)
        if mode == 0:
            return web.json_response({"error": {"message": "bad key: " + echo}}, status=401)
        if mode == 1:
            return web.Response(
                text=f"{CONTROLS} upstream said: {echo}", status=500, content_type="text/plain"
            )
        if mode == 2:
            return web.json_response(
                {"message": "slow down " + echo}, status=429, headers={"Retry-After": echo[:40]}
            )
        if mode == 3:
            stream = _sse(json.dumps({"error": {"message": "in-stream " + echo}}))
        elif mode == 4:
            stream = _sse("not json " + echo)
        else:
            stream = GOOD
        return web.Response(body=stream, content_type="text/event-stream")


@pytest.fixture(scope="module")
def server() -> Iterator[EchoServer]:
    s = EchoServer()
    try:
        yield s
    finally:
        s.close()


def _settings(folder: Path, base: str) -> Path:
    p = folder / "settings.json"  # holds the secrets on purpose: never scanned
    p.write_text(json.dumps({"base_url": base, "api_key": FAKE_KEY, "headers": {"api-key": HDR}}))
    p.chmod(0o600)
    return p


class Session:
    """Commands run in-process in one folder; every output kept for the scan."""

    def __init__(self, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.folder, self.capsys = folder, capsys
        self.printed: list[tuple[str, str]] = []

    def __call__(self, *argv: str) -> int:
        rc = main(list(argv))
        cap = self.capsys.readouterr()
        self.printed.append((" ".join(argv[:2]), cap.out + cap.err))
        return rc

    def check_everything(self, skip: Path) -> None:
        said = [(c, leaks(o), UNSAFE.findall(o)) for c, o in self.printed]
        assert not [s for s in said if s[1] or s[2]], f"printed: {said}"
        written = [p for p in sorted(self.folder.rglob("*")) if p.is_file() and p != skip]
        bad = [(p.name, leaks(p.read_bytes()), unsafe_bytes(p.read_bytes())) for p in written]
        assert not [b for b in bad if b[1] or b[2]], f"written: {bad}"


@pytest.mark.parametrize("client", ["aiohttp", "fast"])
def test_echoed_secrets_and_controls_reach_no_artefact(
    server: EchoServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    client: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = _settings(tmp_path, server.base)
    cmd = Session(tmp_path, capsys)
    common = ["--num-requests", "12", "--rate", "100", "--input-len", "8", "--output-len", "1"]
    assert cmd("run", *common, "--out", "r.json", "--html", "--http-client", client) in (0, 1)
    assert cmd("run", *common, "--out", "r2.json", "--http-client", client) in (0, 1)
    assert cmd("report", "r.json", "--html", "again.html") == 0
    assert cmd("report", "r.journal.jsonl", "--out", "rebuilt.json") == 0
    for fmt, name in (("csv", "r.csv"), ("jsonl", "r.jsonl"), ("vllm", "r-vllm.json")):
        assert cmd("export", "r.json", "--format", fmt, "--out", name) == 0
    assert cmd("compare", "r.json", "r2.json", "--html", "c.html") in (0, 1, 3)  # 3: INCONCLUSIVE
    assert cmd("compare", "r.json", "r2.json", "--format", "json") in (0, 1, 3)
    cmd.check_everything(skip=settings)

    # the echoes did arrive, masked and escaped: the scan above had something to find
    result = json.loads((tmp_path / "r.json").read_text())
    phase = result["phases"][-1]
    messages = json.dumps(phase["error_messages"])
    assert mask(FAKE_KEY) in messages and mask(HDR) in messages
    assert "\\\\u001b]52;c;" in messages  # OSC 52 kept as visible text
    assert {"http_401", "http_500", "http_429", "server_error", "malformed"} <= set(
        phase["errors"]
    ), phase["errors"]
    assert result["target"]["model"].startswith("m Bearer " + mask(FAKE_KEY))
    assert "\\u001b" in result["target"]["model"]
    lengths = json.dumps(result["plan"]["workload"].get("prompt_lengths"))
    assert mask(FAKE_KEY) in lengths  # /tokenize's echoed error, kept as the reason
    printed = "\n".join(o for _, o in cmd.printed)
    assert mask(FAKE_KEY) in printed and "\\u001b[2J" in printed


def test_check_masks_and_escapes_what_the_server_says(
    server: EchoServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = _settings(tmp_path, server.base)
    cmd = Session(tmp_path, capsys)
    assert cmd("check", "--settings", str(settings)) == 1
    cmd.check_everything(skip=settings)
    out = cmd.printed[0][1]
    assert "using the first listed: m Bearer " + mask(FAKE_KEY) in out
    assert "whole: Bearer " + mask(FAKE_KEY) in out and "\\u001b]0;pwned" in out


def test_a_failed_probe_is_reported_masked_and_escaped(
    server: EchoServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = _settings(tmp_path, server.base + "/probefail")
    cmd = Session(tmp_path, capsys)
    assert cmd("run", "--num-requests", "2", "--rate", "10", "--out", "p.json") == 1
    cmd.check_everything(skip=settings)
    out = cmd.printed[0][1]
    assert "failed a first request" in out and "bad key: Bearer " + mask(FAKE_KEY) in out


def test_a_result_file_carrying_controls_prints_as_text(
    server: EchoServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A result written by another tool (or edited) may hold raw controls: report and compare
    escape them where they print."""
    monkeypatch.chdir(tmp_path)
    settings = _settings(tmp_path, server.base)
    cmd = Session(tmp_path, capsys)
    common = ["--num-requests", "6", "--rate", "100", "--input-len", "8", "--output-len", "1"]
    cmd("run", *common, "--out", "r.json", "--quiet")
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["target"]["model"] = "m" + CONTROLS
    doc["target"]["base_url"] = "http://h" + CONTROLS
    for block in doc["phases"]:
        for msgs in block["error_messages"].values():
            for m in msgs:
                m["message"] = CONTROLS + m["message"]
    (tmp_path / "evil.json").write_text(json.dumps(doc))
    (tmp_path / "r.journal.jsonl").rename(tmp_path / "kept.journal.jsonl")  # report reads evil.json
    cmd.printed.clear()
    cmd("report", "evil.json")
    for fmt in ("text", "json"):
        cmd("compare", "evil.json", "r.json", "--format", fmt)
    printed = "\n".join(o for _, o in cmd.printed)
    assert "\\u001b]52;c;" in printed  # the controls were there, shown as text
    said = [(c, UNSAFE.findall(o)) for c, o in cmd.printed]
    assert not [x for x in said if x[1]], said
    assert settings.exists()


URL = "http://bench:pw-SECRET-4242@127.0.0.1:9/v1"
SCENARIO = (
    'name = "s"\n[workload]\nprompt_tokens = { dist = "fixed", value = 8 }\n'
    'output_tokens = { dist = "fixed", value = 2 }\n[[phases]]\nname = "m"\nduration = "1s"\n'
    'arrival = { process = "constant", rate = 1 }\n'
)


@pytest.mark.parametrize(
    ("files", "argv", "key"),
    [
        ({}, ["run", "--num-requests", "1", "--rate", "1", "--target", URL], "--target"),
        ({}, ["check", "--target", URL], "--target"),
        ({"s.toml": SCENARIO + f'[target]\nurl = "{URL}"\n'}, ["run", "s.toml"], "target.url"),
        (
            {"settings.json": json.dumps({"base_url": URL})},
            ["run", "--num-requests", "1", "--rate", "1"],
            "base_url",
        ),
        (
            {"settings.json": json.dumps({"local_engine": {"enabled": True, "endpoint": URL}})},
            ["run", "--num-requests", "1", "--rate", "1"],
            "local_engine.endpoint",
        ),
        (
            {"config.toml": f'[api]\nbase_url = "{URL}"\n'},
            ["run", "--num-requests", "1", "--rate", "1"],
            "api.base_url",
        ),
        (
            {
                "s.toml": SCENARIO,
                "sw.toml": 'name = "sw"\nscenario = "s.toml"\n[server]\nkind = "external"\n'
                f'target = "{URL}"\n[load]\nrate = [1]\n',
            },
            ["sweep", "sw.toml"],
            "server.target",
        ),
    ],
)
def test_credentials_in_a_url_are_refused_without_repeating_them(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str],
    argv: list[str],
    key: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    try:
        rc = main(argv)
    except SystemExit as exc:  # a flag's error: argparse exits
        rc = int(exc.code or 0)
    cap = capsys.readouterr()
    said = cap.out + cap.err
    assert "SECRET" not in said and "bench" not in said, said
    assert key in said and "credentials" in said, said
    assert rc == 2, said
    errors = cap.err.strip().splitlines()
    assert errors[0].startswith("error: ") and errors[1:] in (
        [],
        [f"see: python -m harness {argv[0]} --help"],
    ), said
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in files]
    assert not [p for p in written if b"SECRET" in p.read_bytes()]
