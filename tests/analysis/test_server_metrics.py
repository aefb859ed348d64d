"""Server-metrics summary: time series, counter deltas, peaks and means, the report line."""

from __future__ import annotations

from harness.analysis.server_metrics import summarise_server_metrics


def _line(t, running, waiting, gen, it_sum=0.0, it_count=0.0, **extra):
    return {
        "t": "server_metrics",
        "wall_s": 100.0 + t,
        "values": {
            "vllm:num_requests_running": running,
            "vllm:num_requests_waiting": waiting,
            "vllm:kv_cache_usage_perc": 0.5,
            "vllm:generation_tokens_total": gen,
            "vllm:iteration_tokens_total_sum": it_sum,
            "vllm:iteration_tokens_total_count": it_count,
        },
        **extra,
    }


def test_summary():
    lines = [
        _line(0, 0, 0, 0, info={"vllm:cache_config_info": {"block_size": "16"}}),
        _line(1, 4, 2, 100, 100, 10),
        _line(2, 4, 0, 300, 300, 20),
        _line(3, 2, 0, 50, 310, 21),
    ]
    s = summarise_server_metrics(lines, t0_wall_s=100.0)
    assert s["available"] and s["source"] == "vllm" and s["polls"] == 4
    assert s["series"]["t_s"] == [0.0, 1.0, 2.0, 3.0]
    assert s["peaks"]["running"] == {"max": 4.0, "mean": 2.5}
    assert s["peaks"]["waiting"] == {"max": 2.0, "mean": 0.5}
    assert s["peaks"]["kv_cache_usage_pct"]["max"] == 50.0
    # a counter that goes down (server restart) gives no delta, not a negative one
    assert s["series"]["deltas"]["vllm:generation_tokens_total"] == [None, 100.0, 200.0, None]
    assert s["series"]["tokens_per_step"] == [None, 10.0, 20.0, 10.0]
    assert s["config"] == {"block_size": "16"}
    assert "waited in 1 of 4 polls (25%, up to 2)" in s["note"]


def test_unavailable_and_empty():
    assert summarise_server_metrics([], None) is None
    s = summarise_server_metrics(
        [{"t": "server_metrics", "available": False, "reason": "HTTP 404"}], None
    )
    assert s == {"available": False, "reason": "HTTP 404"}


def test_note_when_nothing_waited():
    s = summarise_server_metrics([_line(0, 1, 0, 0), _line(1, 3, 0, 10)], 100.0)
    assert "no request waited; at most 3 ran" in s["note"]
    assert set(s["peaks"]) == {"running", "waiting", "kv_cache_usage_pct"}


def test_sweep_and_html_read_the_summary_series():
    """The views' running/waiting series come from the summary the scraper's lines produce,
    for vLLM's names and llama.cpp's alike."""
    from harness.analysis.sweep_report import server_series

    for running, waiting in (
        ("vllm:num_requests_running", "vllm:num_requests_waiting"),
        ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    ):
        lines = [
            {"t": "server_metrics", "wall_s": 100.0 + i, "values": {running: r, waiting: w}}
            for i, (r, w) in enumerate([(1, 0), (4, 2), (4, 7)])
        ]
        result = {"server_metrics": summarise_server_metrics(lines, 100.0)}
        s = server_series(result)
        assert s["running"] == [[0.0, 1.0], [1.0, 4.0], [2.0, 4.0]], running
        assert s["waiting"] == [[0.0, 0.0], [1.0, 2.0], [2.0, 7.0]], waiting


def _poll(t, running, waiting, kv=0.0, it_sum=0.0, it_count=0.0):
    return {
        "t": "server_metrics",
        "wall_s": 100.0 + t,
        "values": {
            "vllm:num_requests_running": running,
            "vllm:num_requests_waiting": waiting,
            "vllm:kv_cache_usage_perc": kv,
            "vllm:iteration_tokens_total_sum": it_sum,
            "vllm:iteration_tokens_total_count": it_count,
        },
    }


def test_a_passing_queue_far_from_every_limit_is_no_ceiling():
    """Issue 24: one request waited once while 10 ran, at 0.28 % KV with max_num_seqs 1024:
    today's line blamed the running set or the KV cache."""
    polls = [_poll(t, 10, 1 if t == 3 else 0, kv=0.0028) for t in range(20)]
    s = summarise_server_metrics(polls, 100.0, {"max_num_seqs": 1024})
    assert "ceiling" not in s["note"].replace("no ceiling", "")
    assert "no ceiling" in s["note"] and "1 of 20 polls" in s["note"]
    assert s["ceiling"]["binding"] == []


def test_a_long_wait_below_every_limit_names_no_limit():
    polls = [_poll(t, 10, 3, kv=0.0028) for t in range(10)]
    s = summarise_server_metrics(polls, 100.0, {"max_num_seqs": 1024})
    assert s["ceiling"]["waiting_share"] == 1.0 and s["ceiling"]["binding"] == []
    assert "no gauge shows a limit" in s["note"]
    assert "max_num_batched_tokens unknown" in s["note"]


# (running, waiting, kv fraction, tokens per step) in every poll -> the limit named
CEILING_CASES = [
    ((48, 20, 0.05, 200.0), ["max_num_seqs"], "running set (running at max_num_seqs 48)"),
    ((12, 20, 0.97, 200.0), ["kv_cache"], "the KV cache"),
    ((12, 20, 0.30, 8000.0), ["max_num_batched_tokens"], "token budget"),
    ((48, 20, 0.95, 200.0), ["max_num_seqs", "kv_cache"], "max_num_seqs 48) in 100% of them and"),
]


def test_the_ceiling_names_the_limit_the_gauges_show():
    limits = {"max_num_seqs": 48, "max_num_batched_tokens": 8192}
    for (running, waiting, kv, per_step), binding, words in CEILING_CASES:
        polls = [
            _poll(t, running, waiting, kv, it_sum=per_step * 10 * t, it_count=10.0 * t)
            for t in range(8)
        ]
        s = summarise_server_metrics(polls, 100.0, limits)
        assert s["ceiling"]["binding"] == binding, (running, kv, per_step)
        assert "the ceiling was" in s["note"] and words in s["note"], s["note"]


def test_limits_come_from_the_started_server():
    from harness.analysis.server_metrics import server_limits

    assert server_limits(
        {"server": {"settings": {"gpu": "L4"}, "limits": {"max_num_seqs": 256}}}
    ) == {"max_num_seqs": 256}
    assert server_limits({"server": {"settings": {"parallel": 4}}}) == {"max_num_seqs": 4}
    assert server_limits({"kind": "http"}) == {}


def test_kv_use_is_in_percent_in_the_text_and_the_chart():
    """Issue 24: the chart said `fraction 0.03` where the text said `kv_cache_usage_pct 3.2`."""
    import json
    from pathlib import Path

    from harness.analysis.html import result_sections
    from harness.analysis.report_text import peak_text
    from harness.analysis.sweep_report import server_series

    s = summarise_server_metrics([_poll(t, 2, 0, kv=0.032) for t in range(3)], 100.0)
    fixture = Path(__file__).parent.parent / "data" / "results" / "v2.json"
    r = {**json.loads(fixture.read_text(encoding="utf-8")), "server_metrics": s}
    assert server_series(r)["kv_usage"][0][1] == 3.2
    assert peak_text("kv_cache_usage_pct", s["peaks"]["kv_cache_usage_pct"]).startswith(
        "KV cache use peak 3.20 %"
    )
    kv = next(x for x in result_sections(r) if "KV cache" in x.get("title", ""))
    assert kv["ylabel"] == "KV cache use (%)" and kv["series"][0]["points"][0][1] == 3.2
