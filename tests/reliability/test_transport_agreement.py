"""Both transports record the same outcome for a redirect and for compression.

A redirect to another origin is never followed, by the run (either transport), the probe or
`check`: it would carry the key and the settings' headers there (aiohttp followed a 307 and sent
`api-key` to the other host; the lean client recorded `http_307`). Both transports ask for
`Accept-Encoding: identity`, since neither decodes a content coding; a gateway that compresses
anyway is `malformed`, saying so, on both (aiohttp asked for gzip and failed every request)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.client.check import FAIL, run_checks
from harness.client.probe import probe_target
from harness.config.target import Secret, Target, Timeouts
from harness.record.records import ErrorKind
from harness.workload.scenario import Workload
from tests.scripted_server import Request, good_stream, gzipped_stream, head, run_engine, scripted

TRANSPORTS = ("fast", "aiohttp")
KEY = "sk-agree-SECRET-0123456789"


def redirect_to(url: str):
    def respond(i: int, req: Request):
        return [head(307, {"Location": url + req.path, "Content-Length": "0"})]

    return respond


@pytest.mark.parametrize("http_client", TRANSPORTS)
def test_a_cross_origin_redirect_is_an_answer_not_followed(
    tmp_path: Path, http_client: str
) -> None:
    with scripted(lambda i, req: good_stream(3)) as elsewhere:
        with scripted(redirect_to(elsewhere.url)) as target:
            records, _ = run_engine(
                target.url, tmp_path, http_client, n=3, headers={"api-key": KEY}
            )
        assert elsewhere.requests == []  # nothing reached the other origin
    assert [r.error_class for r in records] == ["http_307"] * 3
    port = elsewhere.url.rpartition(":")[2]
    assert {r.error_detail for r in records} == {
        f"HTTP 307: redirect to http://127.0.0.1:{port} not followed: point base_url at the "
        "final address"
    }


def test_probe_and_check_follow_no_redirect(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.client import probe as probe_mod

    monkeypatch.setattr(probe_mod, "PROBE_BACKOFF_S", 0.01)
    with scripted(lambda i, req: good_stream(3)) as elsewhere:
        with scripted(redirect_to(elsewhere.url)) as target:
            t = Target(
                "http",
                target.url,
                "m",
                "chat",
                Secret(KEY),
                headers={"api-key": KEY},
                timeouts=Timeouts(2.0, 5.0, 5.0, 10.0),
            )
            wl = Workload(prompt_tokens=None, output_tokens=None)  # type: ignore[arg-type]
            probe = asyncio.run(probe_target(t, wl, 5))
            steps = asyncio.run(
                run_checks(t, health_path="/health", max_tokens=8, read_timeout_s=5)
            )
        assert elsewhere.requests == []
    assert probe.error is not None and "redirect to http://127.0.0.1:" in probe.error
    assert probe.status == 307
    assert [s.status for s in steps] == [FAIL] * len(steps)
    port = elsewhere.url.rpartition(":")[2]
    for s in steps:
        assert s.detail == "HTTP 307" and s.fix == "point base_url at the final address"
        assert s.cause.startswith(f"the server redirects to http://127.0.0.1:{port} (HTTP 307)")


@pytest.mark.parametrize("http_client", TRANSPORTS)
def test_both_transports_ask_for_identity(tmp_path: Path, http_client: str) -> None:
    with scripted(lambda i, req: good_stream(3)) as server:
        records, _ = run_engine(server.url, tmp_path, http_client, n=2)
    assert all(r.ok for r in records)
    assert {r.headers.get("accept-encoding") for r in server.requests} == {"identity"}


@pytest.mark.parametrize("http_client", TRANSPORTS)
def test_a_compressed_answer_is_malformed_on_both(tmp_path: Path, http_client: str) -> None:
    with scripted(lambda i, req: gzipped_stream(3)) as server:
        records, _ = run_engine(server.url, tmp_path, http_client, n=2)
    assert [r.error for r in records] == [ErrorKind.MALFORMED] * 2
    assert {r.error_detail for r in records} == {
        "the answer is gzip-encoded although the request asked for Accept-Encoding: identity: "
        "a gateway compresses the stream; turn that off for text/event-stream"
    }
