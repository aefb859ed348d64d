"""--reset-prefix-cache: the reset's outcomes against scripted answers, and a sweep on the
simulator whose every run records its reset; the harness's per-request cached counts equal the
simulator's truth."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from harness.cli import main
from harness.orchestrate.prefix_reset import RESET_TRIES, PrefixCacheReset, reset_url
from harness.record.journal import read_journal
from harness.server.launcher import start_sim


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://h:8000", "http://h:8000/reset_prefix_cache"),
        ("http://h:8000/v1", "http://h:8000/reset_prefix_cache"),  # not under /v1
        ("http://h:8000/v1/", "http://h:8000/reset_prefix_cache"),
        ("https://gw/api/v1", "https://gw/api/reset_prefix_cache"),  # a root path stays
    ],
)
def test_reset_url(base: str, url: str) -> None:
    assert reset_url(base) == url


def _resetter(answers: list[tuple[int, bytes] | OSError]) -> tuple[PrefixCacheReset, list[str]]:
    said: list[str] = []
    left = list(answers)

    def post(url: str) -> tuple[int, bytes]:
        a = left.pop(0)
        if isinstance(a, OSError):
            raise a
        return a

    return PrefixCacheReset("http://h/v1", said.append, post=post, sleep=lambda s: None), said


def test_a_reset_that_works() -> None:
    r, said = _resetter([(200, b'{"success": true}')])
    assert r.reset() == "reset" and said == []


def test_no_route_is_said_once_and_not_asked_again() -> None:
    r, said = _resetter([(404, b"")])
    assert r.reset() == "unsupported"
    assert r.reset() == "unsupported"  # no second POST (the script has no second answer)
    assert len(said) == 1 and "VLLM_SERVER_DEV_MODE=1" in said[0] and "warm-up" in said[0]


def test_refused_while_blocks_are_held_is_retried_then_given_up() -> None:
    r, said = _resetter(
        [(200, b'{"success": false}')] * (RESET_TRIES - 1) + [(200, b'{"success":true}')]
    )
    assert r.reset() == "reset" and said == []
    r, said = _resetter([(200, b'{"success": false}')] * RESET_TRIES)
    assert r.reset() == "refused" and len(said) == 1


@pytest.mark.parametrize(
    "answer",
    [
        OSError("connection refused"),
        (500, b""),
        (200, b"not json"),
        (200, b'{"success": "yes"}'),  # not a boolean: not believed
    ],
)
def test_anything_else_fails_the_reset_not_the_point(answer: tuple[int, bytes] | OSError) -> None:
    r, said = _resetter([answer])
    assert r.reset() == "failed" and len(said) == 1
    assert not r.unsupported  # asked again at the next point


BASE = """
name = "pc"
seed = 4
[target]
endpoint = "completions"
[workload]
prompt_tokens = { dist = "fixed", value = 40 }
output_tokens = { dist = "fixed", value = 4 }
system_prompt_tokens = 64
[[phases]]
name = "main"
requests = 6
arrival = { process = "constant", rate = 20.0 }
[sim]
speedup = 50.0
"""


@pytest.mark.slow
def test_a_sweep_resets_the_cache_before_every_run(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    sw = tmp_path / "sw.toml"
    sw.write_text('name = "s"\nscenario = "base.toml"\n[load]\nrate = [20.0, 30.0]\n')
    out = tmp_path / "o"
    assert main(["sweep", str(sw), "--out", str(out), "--quiet", "--reset-prefix-cache"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    cached = []
    for p in summary["points"]:
        assert [run["prefix_cache_reset"] for run in p["runs"]] == ["reset"]
        result = out / p["runs"][0]["result"]
        r = json.loads(result.read_text())
        assert r["options"]["prefix_cache_reset"] == "reset"
        assert r["summary"]["prefix_cache"]["requests"] == 6
        recs = sorted(
            read_journal(result.with_suffix(".journal.jsonl")).records, key=lambda x: x.seq
        )
        cached.append([x.cached_tokens for x in recs])
    # Both points send the same prompts (same seed). Emptied before each, the second finds only
    # what its own requests left, as the first did: its first request misses, later ones find at
    # most the 64-token system prompt (4 blocks; [0, 64, 64, ...] when each request's prefill is
    # done before the next arrives). Without the reset every request of the second point finds
    # all 96 tokens of its prompt's full blocks, cached by the first point.
    for point in cached:
        assert point[0] == 0 and max(point) <= 64


@pytest.mark.slow
def test_the_harness_cached_counts_are_the_simulators_truth(tmp_path: Path) -> None:
    scn = tmp_path / "s.toml"
    scn.write_text(BASE)
    out = tmp_path / "r.json"
    with start_sim(["--speedup", "50"], tmp_path / "sim.log") as sim:
        rc = main(["run", str(scn), "--target", sim.base_url, "--out", str(out), "--quiet"])
        assert rc == 0
        import urllib.request

        with urllib.request.urlopen(sim.base_url + "/sim/truth", timeout=10) as resp:
            truth = orjson.loads(resp.read())["requests"]
    j = read_journal(tmp_path / "r.journal.jsonl")
    prefix = j.end["request_id_prefix"]
    seen = [(r.cached_tokens, truth[f"{prefix}-{r.seq}-0"]["cached_tokens"]) for r in j.records]
    assert len(seen) == 6 and all(mine == theirs for mine, theirs in seen)
    assert any(c for c, _ in seen)  # the shared system prompt was found cached
    pc = json.loads(out.read_text())["summary"]["prefix_cache"]
    assert pc["cached_tokens"] == sum(t for _, t in seen)
