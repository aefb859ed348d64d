"""The /metrics scraper: parsing, journal lines, and a target without /metrics."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from harness.server.scrape import Scraper, metrics_urls, parse_metrics

TEXT = """# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="1.0"} 1.0
vllm:iteration_tokens_total_bucket{le="+Inf"} 4.0
vllm:iteration_tokens_total_sum 40.0
vllm:iteration_tokens_total_count 4.0
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 5.0
"""


def test_parse_sums_label_sets_and_keeps_info():
    values, info = parse_metrics(TEXT)
    assert values["vllm:num_requests_running"] == 5.0
    assert values["vllm:num_preemptions_total"] == 7.0
    assert values["vllm:iteration_tokens_total_sum"] == 40.0
    assert "process_cpu_seconds_total" not in values and not any(
        k.endswith("_created") for k in values
    )
    assert not any("bucket" in k for k in values)
    assert info["vllm:cache_config_info"]["num_gpu_blocks"] == "100"


def test_metrics_urls():
    assert metrics_urls("http://h:8000") == ["http://h:8000/metrics"]
    assert metrics_urls("https://g.net/api") == [
        "https://g.net/api/metrics",
        "https://g.net/metrics",
    ]


async def _serve(handler):
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


# How long a test waits for the scraper's first poll before failing: far beyond the few ms it
# takes, so a loaded machine only makes the test slower, never wrong.
FIRST_POLL_WAIT_S = 30.0


def _scrape(handler, seconds: float) -> list[dict]:
    """Scrape for `seconds` after the first poll is done (or /metrics given up on), then stop the
    scraper as a run's end does. Cancelling before the first poll ends would stop it in `_find`,
    before the loop whose end poll closes the window."""
    lines: list[dict] = []

    async def go():
        runner, url = await _serve(handler)
        try:
            scraper = Scraper(url, lines.append, interval_s=0.1)
            task = asyncio.create_task(scraper.run())
            await scraper.wait_ready(FIRST_POLL_WAIT_S)
            assert scraper.ready.is_set(), f"no first poll within {FIRST_POLL_WAIT_S:g} s"
            await asyncio.sleep(seconds)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await runner.cleanup()

    asyncio.run(go())
    return lines


def test_scrapes_periodically():
    async def ok(request):
        return web.Response(text=TEXT, content_type="text/plain")

    lines = _scrape(ok, 0.45)
    assert len(lines) >= 3 and all(ln["t"] == "server_metrics" for ln in lines)
    assert lines[0]["info"]["vllm:cache_config_info"]["block_size"] == "16"
    assert lines[1]["values"]["vllm:num_requests_running"] == 5.0 and "info" not in lines[1]


@pytest.mark.parametrize(
    ("status", "body", "fragment"),
    [
        (404, "not found", "HTTP 404"),  # no /metrics route
        (200, "<html>hello</html>", "not Prometheus"),  # a web page, not an exposition
    ],
)
def test_no_metrics_is_one_line_and_stops(status, body, fragment):
    async def h(request):
        return web.Response(status=status, text=body)

    lines = _scrape(h, 0.5)
    assert len(lines) == 1 and lines[0]["available"] is False and fragment in lines[0]["reason"]


@pytest.mark.slow
def test_run_scrapes_the_simulator_and_reports_peaks(tmp_path):
    """`run` against the built-in simulator: samples in the journal, summary in the result,
    peaks in the report; config.toml's [metrics] scrape = false turns it off."""
    import subprocess
    import sys

    import orjson

    from tests.conftest import REPO

    def run(extra: list[str], out) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "run",
                str(REPO / "scenarios" / "burst.toml"),
                "--out",
                str(out),
                "--set",
                "phases.0.duration=1s",
                "--set",
                "phases.1.duration=2s",
                "--set",
                "phases.2.duration=1s",
                "--set",
                "phases.3.duration=1s",
                "--set",
                # x5, not x20: burst.toml's H100 finishes a request in ~65 ms of wall time at
                # x20, so a 1 s poll could find nothing running in a loaded run (it did once)
                "sim.speedup=5",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )

    out = tmp_path / "r.json"
    proc = run([], out)
    assert proc.returncode == 0, proc.stderr
    journal = (tmp_path / "r.journal.jsonl").read_text()
    assert '"t":"server_metrics"' in journal
    sm = orjson.loads(out.read_bytes())["server_metrics"]
    assert sm["available"] and sm["source"] == "vllm" and sm["polls"] >= 3
    assert sm["peaks"]["running"]["max"] >= 1
    assert "vllm:generation_tokens_total" in sm["totals"]
    assert "server: running peak" in proc.stdout
    (tmp_path / "off.toml").write_text("[metrics]\nscrape = false\n")
    proc = run(["--config", str(tmp_path / "off.toml")], tmp_path / "off.json")
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads((tmp_path / "off.json").read_bytes())["server_metrics"] is None


HIST_TEXT = """# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0"} 6.5
vllm:time_to_first_token_seconds_count{engine="0"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 1.0
vllm:time_to_first_token_seconds_sum{engine="1"} 0.5
vllm:time_to_first_token_seconds_count{engine="1"} 1.0
vllm:time_to_first_token_seconds_created{engine="1"} 1.7e9
"""


def test_histograms_are_kept_bucket_by_bucket_summed_over_label_sets():
    from harness.server.scrape import parse_exposition

    values, _, hists = parse_exposition(TEXT + HIST_TEXT)
    bounds, cum, total, count = hists["vllm:time_to_first_token_seconds"]
    assert bounds == (0.1, 1.0) and cum == [1.0, 4.0, 5.0] and total == 7.0 and count == 5.0
    assert not any(k.startswith("vllm:time_to_first_token") for k in values)


def test_histogram_journaled_only_when_it_changed_and_bounds_once():
    """Poll 1 carries the histogram and its bounds; poll 2 (unchanged) neither; the end poll
    carries it again whatever happened, so the window's close is always in the journal."""
    lines = []
    s = Scraper("http://x", lines.append)
    texts = [
        TEXT + HIST_TEXT,
        TEXT + HIST_TEXT,
        TEXT + HIST_TEXT.replace('_count{engine="1"} 1.0', '_count{engine="1"} 2.0'),
    ]

    class Resp:
        def __init__(self, body):
            self.status, self.body = 200, body.encode()
            self.content = self

        async def iter_chunked(self, n):
            yield self.body

        async def __aenter__(self):
            return self

        async def __aexit__(self, *a):
            return False

    class Session:
        def __init__(self):
            self.i = 0

        def get(self, url, headers=None):
            self.i += 1
            return Resp(texts[min(self.i - 1, len(texts) - 1)])

    async def go():
        sess = Session()
        await s._poll(sess, "http://x/metrics", first=True)
        await s._poll(sess, "http://x/metrics", first=False)
        await s._poll(sess, "http://x/metrics", first=False, edge="end")

    asyncio.run(go())
    assert lines[0]["edge"] == "start" and lines[0]["hist_le"] == {
        "vllm:time_to_first_token_seconds": [0.1, 1.0]
    }
    assert lines[0]["hist"]["vllm:time_to_first_token_seconds"] == [7.0, 5.0, [1.0, 4.0, 5.0]]
    assert "hist" not in lines[1]
    assert (
        lines[2]["edge"] == "end" and lines[2]["hist"]["vllm:time_to_first_token_seconds"][1] == 6.0
    )
    assert "hist_le" not in lines[2]


def test_a_body_sent_in_pieces_is_read_whole():
    """A busy vLLM sends its exposition in several chunks: the scraper waits for all of them
    (reading only what had arrived cut lines in half: 'not Prometheus text')."""

    async def slow(request):
        resp = web.StreamResponse(headers={"content-type": "text/plain"})
        await resp.prepare(request)
        body = (TEXT + HIST_TEXT).encode()
        cut = body.index(b'{engine="0"') + 4  # mid-label, as seen from vLLM
        await resp.write(body[:cut])
        await asyncio.sleep(0.05)
        await resp.write(body[cut:])
        await resp.write_eof()
        return resp

    lines = _scrape(slow, 0.3)
    assert lines and all("values" in ln for ln in lines), lines[:1]
    assert lines[0]["hist"]["vllm:time_to_first_token_seconds"][1] == 5.0


def test_the_last_poll_closes_the_window():
    """Cancelling the scraper (the run ended) makes one more poll, marked as the window's end,
    also when the first answer is slow (as on a loaded machine)."""
    polls = {"n": 0}

    async def ok(request):
        polls["n"] += 1
        if polls["n"] == 1:
            await asyncio.sleep(0.4)  # longer than the scrape below lasts after the first poll
        return web.Response(text=TEXT + HIST_TEXT, content_type="text/plain")

    lines = _scrape(ok, 0.25)
    assert lines[0]["edge"] == "start" and lines[-1]["edge"] == "end" and "hist" in lines[-1]


@pytest.mark.timing  # its answers' pauses (0.4 s, 30 ms) and 0.1 s polls order the lines
def test_each_line_says_when_its_answer_arrived_and_a_failed_end_poll_is_tried_again():
    """`done_s` (the answer's arrival) is what the server view's start edge is judged by: a slow
    answer's snapshot may be later than its GET. The end poll that fails once is retried, so the
    window still ends after the run. The run ends (the scraper is cancelled) right after the
    second poll is journaled, while the scraper waits for its next one; the first answer is slow,
    as on a loaded machine."""
    state = {"polls": 0, "cancelled": False}

    async def handler(request):
        state["polls"] += 1
        if state["cancelled"] and state.get("failed_end") is None:
            state["failed_end"] = True
            return web.Response(status=503)
        await asyncio.sleep(0.4 if state["polls"] == 1 else 0.03)
        return web.Response(text=TEXT + HIST_TEXT, content_type="text/plain")

    lines: list[dict] = []

    async def go():
        runner, url = await _serve(handler)
        two_polls = asyncio.Event()

        def sink(line: dict) -> None:
            lines.append(line)
            if sum("values" in ln for ln in lines) >= 2:
                two_polls.set()

        try:
            task = asyncio.create_task(Scraper(url, sink, interval_s=0.1).run())
            await asyncio.wait_for(two_polls.wait(), FIRST_POLL_WAIT_S)
            state["cancelled"] = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await runner.cleanup()

    asyncio.run(go())
    polls = [ln for ln in lines if "values" in ln]
    assert all(ln["done_s"] >= ln["wall_s"] + 0.02 for ln in polls), polls
    assert state.get("failed_end") and lines[-2]["error"] == "HTTP 503"
    assert lines[-1]["edge"] == "end" and "hist" in lines[-1]
