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
    assert "waited (up to 2)" in s["note"]


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
