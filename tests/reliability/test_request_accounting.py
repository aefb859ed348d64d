"""Every planned request is accounted for, exactly once, whatever happens inside it.

Against a loopback server scripted to misbehave (tests/scripted_server.py): a server whose every
third answer is valid JSON of the wrong shape loses no request on either transport (they were
`Task exception was never retrieved` on aiohttp and `stream_cut` tracebacks on the lean client);
retry arithmetic that overflows ends the request as `internal`; and a record lost between the
engine and the journal makes the run incomplete, say how many are missing, and exit 1."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.analysis.result import build_result
from harness.config.scenario import RetryPolicy
from harness.orchestrate import run as runner
from harness.record.journal import JournalWriter, read_journal
from harness.record.records import ErrorKind
from tests.scripted_server import (
    DONE,
    Request,
    event,
    good_stream,
    json_response,
    run_engine,
    scripted,
    sse,
)

TRANSPORTS = ("fast", "aiohttp")
WRONG_SHAPES = (
    {"choices": [{"index": 0, "delta": "x"}]},
    {"choices": 5},
    {"choices": {}},
)


def every_third_wrong(shape: dict[str, Any]):
    def respond(i: int, req: Request):
        if i % 3 == 2:
            return sse(event(shape), DONE)
        return good_stream(4)

    return respond


SCENARIO = """
name = "acct"
seed = 1
[workload]
prompt_tokens = { dist = "fixed", value = 16 }
output_tokens = { dist = "fixed", value = 8 }
[[phases]]
name = "main"
requests = 30
arrival = { process = "constant", rate = 200 }
"""


def run(tmp: Path, url: str, http_client: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.chdir(tmp)
    (tmp / "s.toml").write_text(SCENARIO)
    return runner.run_command(
        runner.RunArgs(
            scenario="s.toml",
            target=url,
            model="m",
            out="r.json",
            quiet=True,
            probe=False,
            http_client=http_client,
        )
    )


@pytest.mark.parametrize("shape", WRONG_SHAPES, ids=["delta-str", "choices-int", "choices-obj"])
@pytest.mark.parametrize("http_client", TRANSPORTS)
def test_wrong_shapes_lose_no_request_on_either_transport(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    http_client: str,
    shape: dict[str, Any],
) -> None:
    with scripted(every_third_wrong(shape)) as server:
        rc = run(tmp_path, server.url, http_client, monkeypatch)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "never retrieved" not in err
    result = orjson.loads((tmp_path / "r.json").read_bytes())
    assert rc == 0 and result["complete"] is True
    req = result["summary"]["requests"]
    assert (req["sent"], req["completed"], req["failed"]) == (30, 20, 10)
    assert result["summary"]["errors"] == {"malformed": 10}
    assert result["accounting"]["balanced"] is True
    assert result["accounting"]["phases"][0] == {
        "name": "main",
        "planned": 30,
        "begun": 30,
        "recorded": 30,
        "missing": 0,
        "extra": 0,
    }
    seqs = sorted(r.seq for r in read_journal(tmp_path / "r.journal.jsonl").records)
    assert seqs == list(range(30))


@pytest.mark.parametrize("http_client", TRANSPORTS)
def test_retry_arithmetic_that_overflows_is_a_record(tmp_path: Path, http_client: str) -> None:
    # backoff and max_wait of "1e400s" are infinity: the wait cannot be turned into a time
    def respond(i: int, req: Request):
        return json_response(500, {"error": {"message": "boom"}})

    policy = RetryPolicy(on=("500",), max=2, backoff_s=math.inf, max_wait_s=math.inf)
    with scripted(respond) as server:
        records, outcome = run_engine(server.url, tmp_path, http_client, n=5, retry=policy)
    assert sorted(r.seq for r in records) == list(range(5))
    for r in records:
        assert r.error is ErrorKind.INTERNAL and r.status == 500
        assert r.error_detail.startswith("harness error OverflowError")
        assert r.error_detail.endswith("(after attempt 0: http_500)")
    assert outcome.accounts[0]["begun"] == outcome.accounts[0]["recorded"] == [5]


def test_an_exception_inside_a_request_is_an_internal_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.client.engine import Engine

    real = Engine._record

    def broken(self: Engine, a: Any, ask: Any, *args: Any, **kw: Any) -> Any:
        if ask.seq == 2:
            raise KeyError("a bug")
        return real(self, a, ask, *args, **kw)

    monkeypatch.setattr(Engine, "_record", broken)
    with scripted(lambda i, req: good_stream(4)) as server:
        records, _ = run_engine(server.url, tmp_path, "fast", n=4)
    by_seq = {r.seq: r for r in records}
    assert sorted(by_seq) == [0, 1, 2, 3]
    assert by_seq[2].error is ErrorKind.INTERNAL
    assert by_seq[2].error_detail == "harness error KeyError: 'a bug'"
    assert all(by_seq[s].ok for s in (0, 1, 3))


def test_a_request_without_a_record_makes_the_run_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # the journal writer drops one record (a record lost between the engine and the journal)
    real = JournalWriter.write_record

    def lossy(self: JournalWriter, r: Any) -> None:
        if r.seq != 7:
            real(self, r)

    monkeypatch.setattr(JournalWriter, "write_record", lossy)
    with scripted(lambda i, req: good_stream(4)) as server:
        rc = run(tmp_path, server.url, "fast", monkeypatch)
    err = capfd.readouterr().err
    result = orjson.loads((tmp_path / "r.json").read_bytes())
    assert rc == 1 and result["complete"] is False
    acct = result["accounting"]
    assert acct["balanced"] is False and acct["missing"] == 1
    assert acct["phases"][0]["begun"] == 30 and acct["phases"][0]["recorded"] == 29
    assert "1 planned requests have no record" in result["stop_reason"]
    assert "error: the result is incomplete: " in err
    assert "1 planned requests have no record" in err
    # rebuilt from the journal, the same verdict
    j = tmp_path / "r.journal.jsonl"
    assert build_result(read_journal(j), str(j))["accounting"] == acct


@pytest.mark.parametrize(
    "phase",
    [None, 'requests = 5\narrival = { process = "closed", users = 2 }'],
    ids=["open", "closed"],
)
def test_a_request_task_that_dies_is_counted_not_lost(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    phase: str | None,
) -> None:
    # the sink itself fails for one request: its task dies; the account names it
    from harness.client.engine import Engine

    real = Engine._emit

    def failing(self: Engine, rec: Any) -> None:
        if rec.seq == 3:
            raise RuntimeError("sink failed")
        real(self, rec)

    monkeypatch.setattr(Engine, "_emit", failing)
    with scripted(lambda i, req: good_stream(4)) as server:
        records, outcome = run_engine(server.url, tmp_path, "aiohttp", n=5, phase=phase)
    assert "never retrieved" not in capfd.readouterr().err
    assert sorted(r.seq for r in records) == [0, 1, 2, 4]
    (acct,) = outcome.accounts
    assert acct["begun"] == [5] and acct["recorded"] == [4]
    assert acct["errors"] == ["harness error RuntimeError: sink failed"]


@pytest.mark.slow
def test_workers_lose_no_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SCENARIO)
    with scripted(every_third_wrong(WRONG_SHAPES[0])) as server:
        rc = runner.run_command(
            runner.RunArgs(
                scenario="s.toml",
                target=server.url,
                model="m",
                out="r.json",
                quiet=True,
                probe=False,
                workers="2",
            )
        )
    result = orjson.loads((tmp_path / "r.json").read_bytes())
    assert rc == 0 and result["complete"] is True
    assert result["summary"]["errors"] == {"malformed": 10}
    acct = result["accounting"]
    assert sorted(s["shard"][0] for s in acct["shards"]) == [0, 1]
    assert sum(s["begun"] for s in acct["shards"]) == 30 and acct["balanced"] is True
