"""End to end: `run` against a loopback SSE server with known TTFT and gaps.

The server records when it wrote each token with the same clock the engine reads, so the
client's stamps are checked against the truth request by request.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from harness.analysis.slo_verdict import SLO_FAIL_EXIT
from harness.cli import main
from harness.record.journal import read_journal
from tests.fake_sse_server import FakeSSEServer

pytestmark = pytest.mark.slow

SCENARIO = """
name = "e2e"
seed = 4
[workload]
prompt_tokens = { dist = "fixed", value = 10 }
output_tokens = { dist = "fixed", value = 12 }
[[phases]]
name = "warm"
requests = 3
arrival = { process = "constant", rate = 20 }
warmup = true
[[phases]]
name = "main"
duration = "2s"
arrival = { process = "constant", rate = 10 }
[slo]
ttft_p99 = "1s"
itl_p50 = "1ms"
"""

TTFT_S, GAP_S = 0.060, 0.020
# SCENARIO's itl_p50 = 1ms fails by design, so its runs exit SLO_FAIL_EXIT (99), not 0.


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_measured_stamps_match_server_truth(write_scenario, tmp_path, capsys, endpoint):
    scn = write_scenario(SCENARIO)
    out = tmp_path / "r.json"
    with FakeSSEServer(TTFT_S, GAP_S) as srv:
        rc = main(
            [
                "run",
                str(scn),
                "--target",
                srv.url + "/v1/",
                "--endpoint",
                endpoint,
                "--out",
                str(out),
                "--quiet",
            ]
        )
    assert rc == SLO_FAIL_EXIT
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == str(out)
    r = orjson.loads(out.read_bytes())
    j = read_journal(tmp_path / "r.journal.jsonl")
    t0 = j.end["t0_ns"]
    prefix = j.end["request_id_prefix"]

    # Request by request: every client stamp within a few ms after the server's write.
    errors = []
    for rec in j.records:
        truth = srv.truth[f"{prefix}-{rec.seq}-0"]
        assert len(rec.chunk_ns) == len(truth) == 12
        errors += [(t0 + c) - w for c, w in zip(rec.chunk_ns, truth, strict=True)]
    errors_ms = np.array(errors) / 1e6
    assert errors_ms.min() > -0.5  # never stamped before the write (clock slop)
    assert np.median(errors_ms) < 2.0 and np.percentile(errors_ms, 95) < 10.0

    main_phase = r["phases"][1]
    lat = main_phase["latency_ms"]
    assert main_phase["requests"] == {
        "planned_or_due": 20,
        "sent": 20,
        "completed": 20,
        "failed": 0,
        "not_sent": 0,
        "retried_attempts": 0,
        "retried_with_retry_after": 0,
        "retried_with_backoff": 0,
    }
    assert lat["ttft"]["p50"] == pytest.approx(TTFT_S * 1e3, abs=8)
    assert lat["itl"]["p50"] == pytest.approx(GAP_S * 1e3, abs=3)
    assert lat["itl"]["count"] == 20 * 11
    assert lat["tpot"]["mean"] == pytest.approx(GAP_S * 1e3, abs=3)
    assert lat["e2e"]["p50"] == pytest.approx((TTFT_S + 11 * GAP_S) * 1e3, abs=15)
    assert main_phase["tokens"]["output_total"] == 240 and main_phase["tokens"]["per_chunk_usage"]
    assert [v["pass"] for v in main_phase["slo"]] == [True, False]

    # The result's contract.
    for key in (
        "schema_version",
        "scenario",
        "target",
        "environment",
        "started_at",
        "duration_s",
        "summary",
        "phases",
        "histograms",
        "timeseries",
        "client",
        "complete",
    ):
        assert key in r
    assert r["target"]["kind"] == "http" and r["target"]["base_url"] == srv.url
    assert r["scenario"]["seed"] == 4 and r["complete"] is True
    assert r["summary"]["requests"]["completed"] == 20  # warm-up excluded
    for metric in (
        "ttft",
        "ttft_from_schedule",
        "itl",
        "inter_chunk",
        "tpot",
        "e2e",
        "e2e_from_schedule",
        "send_lag",
    ):
        s = r["summary"]["latency_ms"][metric]
        assert set(s) == {"count", "mean", "p50", "p90", "p95", "p99", "p999", "max"}
        assert metric in r["histograms"]["summary"] and metric in r["histograms"]["phases"]["main"]
    for key in (
        "requests_per_s",
        "output_tokens_per_s",
        "total_tokens_per_s",
        "goodput_requests_per_s",
    ):
        assert r["summary"]["throughput"][key] > 0
    assert sum(r["timeseries"]["sent"]) == 23


def test_report_rebuilds_the_same_result_from_the_journal(write_scenario, tmp_path, capsys):
    scn = write_scenario(SCENARIO.replace('duration = "2s"', 'duration = "1s"'))
    out = tmp_path / "r.json"
    with FakeSSEServer(0.01, 0.005) as srv:
        assert (
            main(["run", str(scn), "--target", srv.url, "--out", str(out), "--quiet"])
            == SLO_FAIL_EXIT
        )
    rebuilt = tmp_path / "rebuilt.json"
    assert main(["report", str(tmp_path / "r.journal.jsonl"), "--out", str(rebuilt)]) == 0
    a, b = orjson.loads(out.read_bytes()), orjson.loads(rebuilt.read_bytes())
    for key in ("summary", "phases", "histograms", "timeseries", "client"):
        assert a[key] == b[key], key
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "phase main" in text and "TTFT from schedule" in text
    # one measured phase (and a warm-up): its table is the summary, printed once (issue 24)
    assert "the only measured phase: the summary" in text
    assert "summary (measured phases)" not in text


def test_stalled_server_shows_in_corrected_latency_not_uncorrected(write_scenario, tmp_path):
    """The wrk2 ^Z demo: with one connection, a stall delays later sends; latency from intended
    time shows the stall, latency from sent does not."""
    scn = write_scenario(
        SCENARIO.replace("rate = 10 }", "rate = 10 }\nmax_concurrency = 1").replace(
            'output_tokens = { dist = "fixed", value = 12 }',
            'output_tokens = { dist = "fixed", value = 3 }',
        )
    )
    out = tmp_path / "r.json"
    with FakeSSEServer(0.005, 0.005, stall_after=1, stall_s=0.0) as srv:
        srv_stall = srv
        # first 3 warm-up requests are fast; then make every request take ~0.4 s (a slow server)
        srv_stall.ttft_s = 0.4
        assert (
            main(["run", str(scn), "--target", srv.url, "--out", str(out), "--quiet"])
            == SLO_FAIL_EXIT
        )
    r = orjson.loads(out.read_bytes())
    lat = r["phases"][1]["latency_ms"]
    assert lat["ttft"]["p99"] < 600
    assert lat["ttft_from_schedule"]["p99"] > 3 * lat["ttft"]["p99"]
    assert lat["send_lag"]["p99"] > 1000


def test_run_html_keeps_the_result_path_last(write_scenario, tmp_path, capsys):
    scn = write_scenario(SCENARIO.replace('duration = "2s"', 'duration = "1s"'))
    out = tmp_path / "r.json"
    with FakeSSEServer(0.01, 0.005) as srv:
        assert (
            main(["run", str(scn), "--target", srv.url, "--out", str(out), "--quiet", "--html"])
            == SLO_FAIL_EXIT
        )
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == str(out)  # scripts read the last line
    assert lines[-2] == f"HTML report: {tmp_path / 'r.html'}" and (tmp_path / "r.html").is_file()
