"""Injected faults (each kind, streamed and not) and the Prometheus `/metrics` exposition."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from simhttp import FAST, run, sim, stream

from harness.sim import faults as F
from harness.sim.faults import FaultPicker

SPEEDUP = FAST["speedup"]
BODY = {"prompt": "one two three", "max_tokens": 10, "ignore_eos": True}
STREAM = {**BODY, "stream": True, "stream_options": {"include_usage": True}}


def _req(i: int) -> dict[str, str]:
    return {"X-Request-Id": f"r{i}"}


def test_fault_picker_is_seeded_and_follows_rates() -> None:
    a = FaultPicker({"http429": 0.2, "stall": 0.1}, seed=1)
    b = FaultPicker({"http429": 0.2, "stall": 0.1}, seed=1)
    draws = [a.pick() for _ in range(5000)]
    assert draws == [b.pick() for _ in range(5000)]
    assert draws.count("http429") / 5000 == pytest.approx(0.2, abs=0.03)
    assert draws.count("stall") / 5000 == pytest.approx(0.1, abs=0.03)
    assert FaultPicker({}, seed=1).pick() is None
    assert all(FaultPicker({"http500": 1.0}, 0).pick() == "http500" for _ in range(10))


@pytest.mark.parametrize("stream_it", [True, False])
def test_http429_and_http500(stream_it: bool) -> None:
    async def go() -> None:
        for kind, status in (("http429", 429), ("http500", 500)):
            async with sim(faults={kind: 1.0}) as server, aiohttp.ClientSession() as s:
                body = STREAM if stream_it else BODY
                async with s.post(server.url + "/v1/completions", json=body) as resp:
                    assert resp.status == status
                    err = (await resp.json())["error"]
                    assert err["code"] == status
                    if status == 429:
                        assert resp.headers["Retry-After"] == str(F.RETRY_AFTER_S)
                assert server.engine.scheduler.idle and server.engine.steps == 0

    run(go)


def test_disconnect_cuts_the_stream_halfway() -> None:
    async def go() -> None:
        async with sim(faults={"disconnect": 1.0}) as server, aiohttp.ClientSession() as s:
            r = await stream(s, server.url + "/v1/completions", STREAM, headers=_req(1))
            assert r.error is not None and not r.done
            assert len(r.json_events) == 5  # midpoint of 10
            assert server.truth["r1"].finish_reason == "abort"
            await asyncio.sleep(0.05)
            assert server.engine.scheduler.idle

    async def go_nonstream() -> None:
        async with sim(faults={"disconnect": 1.0}) as server, aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientError):
                async with s.post(server.url + "/v1/completions", json=BODY) as resp:
                    await resp.read()
            await asyncio.sleep(0.05)
            assert server.engine.scheduler.idle

    run(go)
    run(go_nonstream)


def test_stall_pauses_mid_stream_then_finishes() -> None:
    async def go() -> None:
        async with sim(faults={"stall": 1.0}) as server, aiohttp.ClientSession() as s:
            r = await stream(s, server.url + "/v1/completions", STREAM, headers=_req(2))
            assert r.done and len(r.json_events) == 11
            t = server.truth["r2"].token_ns
            gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
            assert max(gaps) >= F.STALL_S / SPEEDUP * 1e9  # a sleep lasts at least its length
            assert gaps.index(max(gaps)) == 4  # between token 5 and token 6

    run(go)


def test_malformed_sends_one_event_that_is_not_json() -> None:
    async def go() -> None:
        async with sim(faults={"malformed": 1.0}) as server, aiohttp.ClientSession() as s:
            r = await stream(s, server.url + "/v1/completions", STREAM)
            assert r.done
            bad = []
            for e in r.events[:-1]:
                try:
                    orjson.loads(e)
                except orjson.JSONDecodeError:
                    bad.append(e)
            assert len(bad) == 1 and len(r.events) == 1 + 10 + 1 + 1
            async with s.post(server.url + "/v1/completions", json=BODY) as resp:
                assert resp.status == 200
                with pytest.raises(orjson.JSONDecodeError):
                    orjson.loads(await resp.read())

    run(go)


def test_slow_headers_holds_the_response_back() -> None:
    async def go() -> None:
        async with sim(faults={"slow_headers": 1.0}) as server, aiohttp.ClientSession() as s:
            r = await stream(s, server.url + "/v1/completions", STREAM, headers=_req(3))
            assert r.done and r.status == 200
            t = server.truth["r3"]
            assert t.fault == "slow_headers"
            assert t.scheduled_ns - t.arrival_ns >= F.SLOW_HEADERS_S / SPEEDUP * 1e9  # type: ignore[operator]

    run(go)


# ---- /metrics -----------------------------------------------------------------------------


def _scrape(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            key = sample.name
            if "le" in sample.labels:
                key += "{le=" + sample.labels["le"] + "}"
            if "finished_reason" in sample.labels:
                key += "{" + sample.labels["finished_reason"] + "}"
            out[key] = sample.value
    return out


def test_metrics_use_vllm_names_and_add_up() -> None:
    async def go() -> None:
        async with sim(max_num_seqs=4) as server, aiohttp.ClientSession() as s:

            async def one(i: int) -> None:
                body = {"prompt": "a b c d", "max_tokens": 5 + i, "ignore_eos": True}
                async with s.post(server.url + "/v1/completions", json=body) as resp:
                    assert resp.status == 200

            await asyncio.gather(*(one(i) for i in range(8)))
            async with s.get(server.url + "/metrics") as resp:
                assert resp.headers["Content-Type"].startswith("text/plain")
                m = _scrape(await resp.text())

        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:cache_config_info",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:num_preemptions_total",
            "vllm:iteration_tokens_total_count",
            "vllm:time_to_first_token_seconds_count",
            "vllm:inter_token_latency_seconds_count",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:request_queue_time_seconds_count",
        ):
            assert name in m, name
        outputs = sum(5 + i for i in range(8))
        assert m["vllm:generation_tokens_total"] == outputs
        assert m["vllm:prompt_tokens_total"] == 8 * 4
        assert m["vllm:request_success_total{length}"] == 8
        assert m["vllm:time_to_first_token_seconds_count"] == 8
        assert m["vllm:inter_token_latency_seconds_count"] == outputs - 8
        assert m["vllm:e2e_request_latency_seconds_count"] == 8
        assert m["vllm:request_queue_time_seconds_count"] == 8
        assert m["vllm:inter_token_latency_seconds_bucket{le=+Inf}"] == outputs - 8
        assert m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0
        iterations = m["vllm:iteration_tokens_total_count"]
        assert m["vllm:iteration_tokens_total_sum"] == 8 * 4 + outputs - 8  # prefill + decodes
        assert iterations >= max(5 + i for i in range(8))

    run(go)


def test_metrics_show_running_and_waiting_while_busy() -> None:
    async def go() -> None:
        async with sim(max_num_seqs=2, speedup=1.0) as server, aiohttp.ClientSession() as s:
            body = {"prompt": "a b", "max_tokens": 2000, "ignore_eos": True}
            tasks = [
                asyncio.ensure_future(s.post(server.url + "/v1/completions", json=body))
                for _ in range(5)
            ]
            for _ in range(200):
                if server.engine.scheduler.num_waiting == 3:
                    break
                await asyncio.sleep(0.01)
            async with s.get(server.url + "/metrics") as resp:
                m = _scrape(await resp.text())
            assert m["vllm:num_requests_running"] == 2
            assert m["vllm:num_requests_waiting"] == 3
            assert 0 < m["vllm:kv_cache_usage_perc"] < 1
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    run(go)
