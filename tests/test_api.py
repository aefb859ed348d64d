"""The Python API (issue 15 item 2): harness.run / arun / load_result / compare and the typed
Result, from plain code and from inside a running event loop (as in Jupyter)."""

from __future__ import annotations

import _thread
import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import harness
from harness.errors import ConfigError, UsageError

# A small quick-run document (the shape `run --rate ...` builds), on a fast simulator.
SCENARIO = {
    "name": "api",
    "seed": 3,
    "workload": {
        "prompt_tokens": {"dist": "fixed", "value": 32},
        "output_tokens": {"dist": "fixed", "value": 8},
    },
    "phases": [{"name": "main", "requests": 12, "arrival": {"process": "poisson", "rate": 40}}],
    "sim": {"speedup": 20},
}
TOML = """
name = "api_toml"
[workload]
prompt_tokens = { dist = "fixed", value = 16 }
output_tokens = { dist = "fixed", value = 4 }
[[phases]]
name = "main"
requests = 6
arrival = { process = "constant", rate = 40 }
[sim]
speedup = 20
"""


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> harness.Result:
    out = tmp_path_factory.mktemp("api") / "r.json"
    return harness.run(SCENARIO, out=str(out))


@pytest.mark.slow
def test_run_returns_a_typed_result(result):
    assert isinstance(result, harness.Result) and result.complete and result.path.is_file()
    assert result.summary.requests["completed"] == 12
    assert [p.name for p in result.phases] == ["main"]
    assert result.summary.latency_ms["ttft"]["count"] == 12
    assert result.summary.throughput["requests_per_s"] > 0
    rows = result.requests()
    assert len(rows) == 12 and rows[0]["phase"] == "main" and rows[0]["output_tokens"] == 8
    h = result.histogram("ttft")
    assert h.get_total_count() == 12
    p99_ms = h.get_value_at_percentile(99) / 1000
    assert p99_ms == pytest.approx(result.summary.latency_ms["ttft"]["p99"], rel=0.01)
    assert result.histogram("itl", phase="main").get_total_count() == 12 * 7
    with pytest.raises(KeyError, match="this result has"):
        result.histogram("latency")


@pytest.mark.slow
def test_to_pandas(result):
    pd = pytest.importorskip("pandas", reason="the pandas extra is not installed")
    df = result.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 12
    assert df["ttft_ms"].notna().all() and (df["e2e_ms"] >= df["ttft_ms"]).all()


@pytest.mark.slow
def test_load_result_and_compare(result):
    again = harness.load_result(result.path)
    assert again.summary == result.summary
    cmp = harness.compare(result, str(result.path))  # a run against itself: nothing changed
    assert cmp.status in ("pass", "inconclusive") and cmp.rows  # never a regression
    assert all(r["verdict"] in ("same", "n/a", "INCONCLUSIVE", "not judged") for r in cmp.rows)
    assert "ttft" in cmp.text().lower()


@pytest.mark.slow
def test_arun_inside_a_running_loop_leaves_the_loop_free(tmp_path):
    """As in a notebook cell: `await harness.arun(...)` while the caller's loop runs other work."""

    async def main() -> tuple[harness.Result, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        r = await harness.arun(TOML, out=str(tmp_path / "a.json"))
        t.cancel()
        return r, ticks

    r, ticks = asyncio.run(main())
    assert r.summary.requests["completed"] == 6 and r.data["scenario_name"] == "api_toml"
    assert ticks > 10  # the caller's loop kept running while the run went


@pytest.mark.slow
def test_run_called_from_inside_a_running_loop(tmp_path):
    """What a Jupyter cell does: plain `harness.run(...)` where an event loop is already running."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(TOML)

    async def cell() -> harness.Result:
        assert asyncio.get_running_loop().is_running()
        return harness.run(scenario, out=str(tmp_path / "b.json"), phases__0__requests=4, seed=9)

    r = asyncio.run(cell())
    assert r.summary.requests["completed"] == 4  # the override reached the scenario
    assert r.data["plan"]["seed"] == 9


LONG = {
    **SCENARIO,
    "name": "long",
    "phases": [{"name": "main", "duration": "60s", "arrival": {"process": "poisson", "rate": 20}}],
}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [None, 2])
def test_cancelling_arun_stops_the_run_and_keeps_its_partial_result(tmp_path, workers):
    """In one process and in worker processes alike."""

    journal = tmp_path / "c.journal.jsonl"
    cancelled_at: list[float] = []

    async def cell() -> None:
        task = asyncio.create_task(
            harness.arun(LONG, out=str(tmp_path / "c.json"), grace_s=2, workers=workers)
        )
        # Cancel once a request has finished (a fixed 3 s came before the first on a loaded
        # machine, while the workers were still starting), and no later than 45 s in.
        t_wait = time.monotonic()
        while time.monotonic() - t_wait < 45 and not (
            journal.exists() and b'"t":"rec"' in journal.read_bytes()
        ):
            await asyncio.sleep(0.1)
        cancelled_at.append(time.monotonic())
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cell())
    assert time.monotonic() - cancelled_at[0] < 15  # the run stops, not the 60 s it planned
    r = harness.load_result(tmp_path / "c.json")
    assert not r.complete and "stopped by the caller" in r.data["stop_reason"]
    assert r.summary.requests["completed"] > 0
    assert r.data["options"]["workers"] == (workers or 1)


@pytest.mark.slow
def test_ctrl_c_during_run_stops_the_run_and_raises(tmp_path):
    """A notebook's interrupt is a KeyboardInterrupt in the main thread while harness.run waits."""
    timer = threading.Timer(3, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        harness.run(LONG, out=str(tmp_path / "k.json"), grace_s=2)
    timer.cancel()
    assert time.monotonic() - t0 < 30
    r = harness.load_result(tmp_path / "k.json")
    assert not r.complete and "stopped by the caller" in r.data["stop_reason"]


def test_bad_input_is_the_same_one_line_error_as_on_the_command_line(tmp_path):
    with pytest.raises(UsageError, match="unknown option 'rate'"):
        harness.run(SCENARIO, rate=8)
    with pytest.raises(ConfigError, match="TOML syntax error"):
        harness.run("name = \n[[phases]", out=str(tmp_path / "x.json"))
    with pytest.raises(ConfigError, match="phases.0.arrival.rate"):
        harness.run(
            {
                **SCENARIO,
                "phases": [
                    {"name": "m", "requests": 1, "arrival": {"process": "poisson", "rate": -1}}
                ],
            },
            out=str(tmp_path / "y.json"),
        )
    with pytest.raises(ConfigError, match="file not found"):
        harness.load_result(tmp_path / "none.json")


def test_import_harness_stays_cheap():
    code = (
        "import sys, harness; heavy = [m for m in ('numpy', 'aiohttp', 'harness.api', 'harness.orchestrate.run') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout.strip()
    assert out == "[]"
    assert callable(harness.run) and harness.Result.__module__ == "harness.api"


def test_scenario_sources_and_the_html_option(tmp_path):
    """A path with `=` in its name is a path, not TOML text; html=False means no HTML (as None),
    html=True next to the result."""
    from harness.api import _run_args, scenario_source

    named = tmp_path / "rate=8.toml"
    named.write_text(TOML)
    assert scenario_source(str(named)) == str(named)
    assert scenario_source(TOML)["name"] == "api_toml"
    assert scenario_source("name = 'x'") == {"name": "x"}
    assert _run_args(TOML, {"html": False}).html is None
    assert _run_args(TOML, {"html": True}).html == ""
    assert _run_args(TOML, {}).html is None


def test_predict_returns_a_result_marked_as_a_prediction(tmp_path):
    """harness.predict: the `predict` command's result (virtual clock, no server), as a Result."""
    out = tmp_path / "p.json"
    r = harness.predict(TOML, gpu="H100-SXM", tp=2, out=str(out), html=True, seed=4)
    assert isinstance(r, harness.Result) and r.path == out and r.complete
    assert r.data["target"]["kind"] == "prediction"
    assert r.data["prediction"]["gpu"] == "H100-SXM"
    assert r.data["prediction"]["tensor_parallel_size"] == 2
    assert r.data["scenario"]["seed"] == 4
    assert r.summary.requests["completed"] == 6 and r.summary.latency_ms["ttft"]["count"] == 6
    assert len(r.requests()) == 6  # read from its journal, beside it
    assert (tmp_path / "p.html").is_file()
    assert harness.load_result(out).data == r.data
    with pytest.raises(UsageError, match="harness.predict: unknown option 'target'"):
        harness.predict(TOML, target="http://127.0.0.1:1")
    with pytest.raises(UsageError, match="--gpu H1000: unknown GPU 'H1000'"):
        harness.predict(TOML, gpu="H1000", out=str(tmp_path / "x.json"))
    assert not (tmp_path / "x.json").exists()
