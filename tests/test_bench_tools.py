"""The benchmark tools judge every client, ours and the peers, so they are tested too: the truth
server's log, the plain client's per-request stamps, and peer_bench's matching and measures."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import peer_bench  # noqa: E402
from client_bench import truth_server  # noqa: E402


def _post(url: str, body: dict, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


@pytest.mark.exclusive  # compares client and server clocks to a few ms: not beside a loaded machine
def test_plain_client_records_match_the_truth_log(tmp_path: Path) -> None:
    truth_path, rec = tmp_path / "truth.json", tmp_path / "plain.jsonl"
    with truth_server(
        "--coalesce", "1", "--itl-ms", "5", "--ttft-ms", "20", truth_out=truth_path
    ) as url:
        subprocess.run(
            [
                sys.executable,
                str(BENCH / "plain_client.py"),
                url,
                "--streams",
                "4",
                "--duration",
                "0.5",
                "--max-tokens",
                "8",
                "--records",
                str(rec),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    truth = json.loads(truth_path.read_text())
    _, parse = peer_bench.plain_client(url, {"streams": 4, "tokens": 8}, 0.5, tmp_path, tmp_path)
    per_request = parse()
    assert per_request and set(per_request) <= set(truth)
    t = peer_bench.timing(truth, per_request)
    assert t["matched_requests"] == t["requests_with_gaps"] == len(per_request)
    # The server waits 20 ms before the first token and 5 ms between tokens; the client's own
    # figures differ from the server's by its send path and read delay only. (The median gap, not
    # the smallest: a client that a busy machine delays reads two tokens in one go, one gap ~0.)
    ttft_ms, gaps = next(iter(per_request.values()))
    assert ttft_ms >= 19 and len(gaps) == 7 and sorted(gaps)[len(gaps) // 2] > 2
    assert abs(t["ttft_err_mean_ms"]) < 15 and t["itl_abs_err_p50_ms"] < 3


def test_requests_without_an_id_are_keyed_by_prompt_and_duplicates_dropped(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.json"
    with truth_server("--coalesce", "4", truth_out=truth_path) as url:
        for text in ("alpha one", "beta two", "alpha one"):
            _post(
                url,
                {
                    "model": "m",
                    "stream": True,
                    "max_tokens": 4,
                    "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
                },
            )
        _post(
            url,
            {
                "model": "m",
                "stream": True,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "gamma"}],
            },
            {"X-Request-Id": "r-1"},
        )
    truth = json.loads(truth_path.read_text())
    assert "c:beta two" in truth and "r-1" in truth
    assert "c:alpha one" not in truth  # seen twice: cannot be matched, so not offered
    assert truth["c:beta two"]["tokens"] == [4]


def test_the_truth_server_answers_an_empty_post_with_400() -> None:
    with truth_server() as url:
        req = urllib.request.Request(url + "/v1/chat/completions", data=b"", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 400
        e.value.close()


def test_steady_window_counts_only_the_middle_of_the_run() -> None:
    s = peer_bench.Sampler()
    t0 = 1_000_000_000
    # tree CPU grows 0.5 s per second; cores 0 and 1 from /proc/stat alike
    for i in range(0, 61):
        s.t.append(t0 + i * 100_000_000)
        s.rows.append((0.05 * i, 0.05 * i, 0.01 * i))
    # one request: received at t0, 10 tokens per 100 ms for 6 s
    writes = [t0 + i * 100_000_000 for i in range(1, 61)]
    truth = {"r": {"received_ns": t0, "writes_ns": writes, "tokens": [10] * 60}}
    out = peer_bench.steady(truth, s)
    # window: 1.5 s after the first request to 0.5 s before the last write
    assert out["window_s"] == pytest.approx(6.0 - 1.5 - 0.5)
    assert out["tok_per_s"] == pytest.approx(100, rel=0.03)
    assert out["client_cpu_busy"] == pytest.approx(0.5)
    assert out["cpu_us_per_token"] == pytest.approx(0.5 / 100 * 1e6, rel=0.03)


def test_table_reports_medians_ranges_and_failures(tmp_path: Path) -> None:
    rows = lambda k: [  # noqa: E731
        {"client": "harness", "load": "ceiling32", "tok_per_s": 800_000.0 * k},
        {
            "client": "harness",
            "load": "paced256",
            "cpu_us_per_token": 11.0 * k,
            "itl_abs_err_p99_ms": 0.7,
            "ttft_err_mean_ms": 0.2,
            "ttft_err_p99_ms": 1.5,
        },
        {"client": "aiperf", "load": "ceiling32", "rc": 1, "error": "boom"},
    ]
    for i, k in enumerate((1.0, 1.1, 0.9)):
        (tmp_path / f"r{i}.json").write_text(json.dumps({"rows": rows(k)}))
    text = peer_bench.table([str(tmp_path / f"r{i}.json") for i in range(3)])
    assert "| harness | 800,000 [720,000–880,000] /" in text
    assert "11.0 [9.9–12.1]" in text
    assert "| aiperf | failed /" in text
