"""The server's view: bucket deltas at the window's edges turned into percentiles, on hand-made
polls and on the simulator (which exports vLLM's histograms and counters)."""

from __future__ import annotations

import orjson
import pytest

from harness.analysis.server_view import build_server_view, quantile_from_buckets

TTFT = "vllm:time_to_first_token_seconds"
BOUNDS = [0.1, 0.5, 1.0]


@pytest.mark.parametrize(
    ("cum", "q", "want"),
    [
        # 10 in (0, 0.1]: the median is halfway through that bucket
        ([10, 10, 10, 10], 0.5, (0.05, 0.0, 0.1)),
        # 4 in (0, .1], 6 in (.1, .5]: p50 is rank 5, one sixth into the second bucket
        ([4, 10, 10, 10], 0.5, (0.1 + 0.4 / 6, 0.1, 0.5)),
        # p99 of 100 with 2 in the open top bucket: only its lower bound is known
        ([50, 90, 98, 100], 0.99, (1.0, 1.0, None)),
        # empty buckets below are skipped, not interpolated into
        ([0, 0, 5, 5], 0.5, (0.75, 0.5, 1.0)),
        # nothing observed
        ([0, 0, 0, 0], 0.5, None),
    ],
)
def test_quantile_from_buckets(cum, q, want):
    got = quantile_from_buckets(BOUNDS, cum, q)
    if want is None:
        assert got is None
    else:
        assert got[0] == pytest.approx(want[0]) and got[1:] == want[1:]


def poll(wall, cum=None, s=0.0, values=None, le=False):
    line = {"t": "server_metrics", "wall_s": wall, "values": values or {}}
    if cum is not None:
        line["hist"] = {TTFT: [s, cum[-1], cum]}
    if le:
        line["hist_le"] = {TTFT: BOUNDS}
    return line


def test_window_edges_deltas_and_counters():
    """t0 = 100. A warm-up phase until 5 s: the poll at 104.9 opens the window (the last at or
    before 105); the end poll at 111 closes it. The warm-up's 3 requests are not counted; an
    unchanged poll (no `hist`) carries the previous state forward."""
    q, h, pre = (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
    )
    lines = [
        poll(100.0, [0, 0, 0, 0], 0.0, {q: 0, h: 0, pre: 0}, le=True),
        poll(103.0, [3, 3, 3, 3], 0.15, {q: 300, h: 0, pre: 1}),
        poll(104.9, None, values={q: 300, h: 0, pre: 1}),
        poll(108.0, [5, 7, 7, 7], 0.6, {q: 700, h: 100, pre: 1}),
        poll(111.0, [5, 9, 12, 13], 8.0, {q: 1300, h: 400, pre: 3}),
    ]
    sv = build_server_view(
        lines,
        100.0,
        (5.0, 10.5),
        {
            "ttft": {"count": 10, "mean": 900.0, "p50": 400.0, "p90": 900.0, "p99": 5000.0},
            "e2e": {"count": 10, "mean": 3000.0, "p50": 1, "p90": 2, "p99": 3},
        },
    )
    assert sv["available"] and sv["window"]["start_s"] == pytest.approx(4.9)
    assert sv["window"]["end_s"] == pytest.approx(11.0)
    t = sv["latency_ms"]["ttft"]
    assert t["count"] == 10 and t["mean"] == pytest.approx((8.0 - 0.15) / 10 * 1e3)
    # deltas [2, 6, 9, 10]: p50 = rank 5, in (0.1, 0.5] with 2 below: 0.1 + 0.4 * 3/4
    assert t["p50"] == pytest.approx(400.0) and t["bucket_ms"]["p50"] == [100.0, 500.0]
    assert t["p99"] == pytest.approx(1000.0) and t["bucket_ms"]["p99"] == [1000.0, None]
    assert sv["prefix_cache"] == {"queries_tokens": 1000, "hits_tokens": 400, "hit_share": 0.4}
    assert sv["preemptions"] == 2
    assert sv["client_ms"]["outside_server_ms"]["ttft"] == pytest.approx(900.0 - 785.0)


def test_a_server_restart_inside_the_window_drops_the_histogram():
    lines = [poll(100.0, [5, 5, 5, 5], 1.0, le=True), poll(110.0, [1, 1, 1, 1], 0.1)]
    sv = build_server_view(lines, 100.0, (0.0, 10.0))
    assert sv["available"] and "ttft" not in sv["latency_ms"]


def test_no_histograms_is_said():
    sv = build_server_view([poll(1.0, values={"llamacpp:requests_processing": 1})], 1.0, (0.0, 1.0))
    assert sv == {
        "available": False,
        "reason": "the target exports none of vLLM's request latency histograms",
    }


@pytest.mark.slow
def test_simulator_server_view_matches_the_client(tmp_path):
    """A short simulator run: the server saw exactly the client's requests and tokens, its TTFT
    and E2E are no longer than the client's (they start when the server got the request), and
    the queue + prefill + decode split adds up to the server's E2E. A shared system prompt
    makes the prefix cache hit."""
    from analysis_simruns import run, write

    scn = write(tmp_path, rate=12.0, duration="3s", max_num_seqs=4, speedup=5.0)
    out = run(scn, tmp_path / "r.json", sets=["workload.system_prompt_tokens=64"])
    r = orjson.loads(out.read_bytes())
    sv = r["server_view"]
    done = r["summary"]["requests"]["completed"]
    assert sv["available"] and done > 10
    lat = sv["latency_ms"]
    assert {"ttft", "e2e", "itl", "queue", "prefill", "decode"} <= set(lat)
    assert all(lat[k]["count"] == done for k in ("ttft", "e2e", "queue", "prefill", "decode"))
    assert lat["itl"]["count"] == r["summary"]["latency_ms"]["itl"]["count"]
    assert lat["ttft"]["mean"] <= r["summary"]["latency_ms"]["ttft"]["mean"]
    assert lat["e2e"]["mean"] <= r["summary"]["latency_ms"]["e2e"]["mean"]
    split = sv["split_ms"]
    assert split["engine"] == pytest.approx(split["e2e"], rel=0.02)
    assert sv["prefix_cache"]["hits_tokens"] > 0 and 0 < sv["prefix_cache"]["hit_share"] < 1
    assert sv["preemptions"] == 0
    from harness.analysis.report_text import render_text

    text = render_text(r)
    assert "TTFT server" in text and "server E2E mean, split: queue" in text


def test_different_request_sets_are_said_and_not_subtracted():
    """The server finished 3 requests in the window, the client measured 2 (a warm-up request
    ended inside it): the means cover different requests, so no 'outside the server' figure."""
    lines = [poll(100.0, [0, 0, 0, 0], 0.0, le=True), poll(110.0, [1, 3, 3, 3], 0.9)]
    client = {"ttft": {"count": 2, "mean": 400.0}, "e2e": {"count": 2, "mean": 500.0}}
    sv = build_server_view(lines, 100.0, (0.0, 10.0), client)
    assert sv["client_ms"]["outside_server_ms"] == {"ttft": None, "e2e": None}
    assert "finished 3 requests in the window, the client measured 2" in sv["note"]


def test_html_report_shows_client_beside_server_and_the_split():
    """The HTML result page has the side-by-side table and the split (no browser needed)."""
    from harness.analysis.html import server_view_sections

    lines = [poll(100.0, [0, 0, 0, 0], 0.0, le=True), poll(110.0, [1, 3, 3, 3], 0.9)]
    sv = build_server_view(
        lines,
        100.0,
        (0.0, 10.0),
        {"ttft": {"count": 3, "mean": 400.0, "p50": 1, "p90": 2, "p99": 3}},
    )
    sv["split_ms"] = {
        "queue": 1.0,
        "prefill": 2.0,
        "decode": 7.0,
        "e2e": 10.0,
        "engine": 10.0,
        "api_server": 0.0,
    }
    sections = server_view_sections({"server_view": sv})
    side = sections[0]
    assert side["head"] == ["metric", "count", "mean", "p50", "p90", "p99"]
    assert [r[0] for r in side["rows"]] == ["TTFT (client)", "TTFT (server)"]
    assert side["rows"][1][3].endswith("[100-500]")  # the bucket the p50 sits in
    split = {r[0]: r[2] for r in sections[1]["rows"]}
    assert split["decode"] == "70.0%" and split["queue (waiting for a slot)"] == "10.0%"
    assert server_view_sections({"server_view": {"available": False}}) == []


def test_a_poll_answered_after_the_start_does_not_open_the_window():
    """t0 = 100, the window starts at 100. The poll sent at 99.99 was answered at 100.3, after
    the first requests had their first token (its snapshot already counts 2 of them), so the poll
    answered at 99.5 opens the window and all 5 are counted."""
    lines = [
        {**poll(99.4, [0, 0, 0, 0], 0.0, le=True), "done_s": 99.5},
        {**poll(99.99, [2, 2, 2, 2], 0.1), "done_s": 100.3},
        {**poll(106.0, [5, 5, 5, 5], 0.25), "done_s": 106.01},
    ]
    client = {"ttft": {"count": 5, "mean": 60.0}, "e2e": {"count": 5, "mean": 900.0}}
    sv = build_server_view(lines, 100.0, (0.0, 5.9), client)
    assert sv["latency_ms"]["ttft"]["count"] == 5 and sv["window"]["start_s"] == pytest.approx(-0.6)
    assert "note" not in sv and "late_start_s" not in sv["window"]


def test_a_window_that_began_before_any_poll_was_answered_says_so():
    """No poll answered by the start (the first came late): the first poll opens the window, the
    view says how late it was, and that the server counted fewer requests than the client."""
    lines = [
        {**poll(99.9, [2, 2, 2, 2], 0.1, le=True), "done_s": 101.25},
        {**poll(106.0, [5, 5, 5, 5], 0.25), "done_s": 106.01},
    ]
    client = {"ttft": {"count": 5, "mean": 60.0}, "e2e": {"count": 5, "mean": 900.0}}
    sv = build_server_view(lines, 100.0, (0.0, 5.9), client)
    assert sv["window"]["late_start_s"] == pytest.approx(1.25)
    assert sv["latency_ms"]["ttft"]["count"] == 3
    assert "the first /metrics answer came 1.25 s after the window began" in sv["note"]
    assert (
        "the server finished 3 requests in the window, the client measured 5: the polls at the "
        "window's edges missed some" in sv["note"]
    )
