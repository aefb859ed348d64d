"""`[workload] extra_body` adds request fields; it may not replace those the harness writes
itself (a replaced `stream` failed every request, a replaced `max_tokens` silently changed the
planned lengths): each is one line naming the key, exit 2."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from harness import cli
from harness.client.openai import build_body
from harness.errors import ConfigError
from harness.orchestrate.scenario import load_scenario
from harness.workload.scenario import OWNED_BODY_KEYS

BASE = {
    "name": "s",
    "workload": {
        "prompt_tokens": {"dist": "fixed", "value": 8},
        "output_tokens": {"dist": "fixed", "value": 4},
    },
    "phases": [{"name": "m", "requests": 2, "arrival": {"process": "constant", "rate": 1}}],
}


def with_extra(extra: dict[str, object]) -> dict[str, object]:
    return {**BASE, "workload": {**BASE["workload"], "extra_body": extra}}  # type: ignore[dict-item]


@pytest.mark.parametrize("key", sorted(OWNED_BODY_KEYS))
def test_a_field_the_harness_writes_is_refused(key):
    with pytest.raises(ConfigError) as exc:
        load_scenario(with_extra({"top_k": 5, key: False}))
    assert exc.value.key == f"workload.extra_body.{key}"
    assert "is set by the harness" in str(exc.value) and "\n" not in str(exc.value)


def test_the_harness_fields_are_the_ones_it_writes():
    """Every field build_body writes for a chat and a completions request is owned (no extra)."""
    written: set[str] = set()
    for endpoint in ("chat", "completions"):
        body = build_body(
            endpoint=endpoint,
            model="m",
            prompt="p",
            system_prompt="s",
            max_tokens=4,
            ignore_eos=True,
            continuous_usage=True,
            temperature=0.5,
            top_p=0.9,
            extra={},
        )
        written |= set(orjson.loads(body))
    written.add("max_completion_tokens")  # the other name of the limit (harness.client.adapt)
    assert written == set(OWNED_BODY_KEYS)


def test_other_fields_are_sent_as_given():
    scn = load_scenario(with_extra({"top_k": 5, "min_tokens": 2, "cache_prompt": False}))
    assert scn.workload.extra_body == {"top_k": 5, "min_tokens": 2, "cache_prompt": False}


@pytest.mark.parametrize("toml", ["{ stream = false }", "{ max_tokens = 64 }"])
def test_the_run_command_says_it_in_one_line(toml, tmp_path: Path, capsys, monkeypatch):
    (tmp_path / "s.toml").write_text(
        '[workload]\nprompt_tokens = { dist = "fixed", value = 8 }\n'
        f'output_tokens = {{ dist = "fixed", value = 4 }}\nextra_body = {toml}\n'
        '[[phases]]\nname = "m"\nrequests = 2\narrival = { process = "constant", rate = 1 }\n'
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "s.toml", "--quiet", "--target", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    key = toml.split()[1]
    assert len(err) == 1 and f"s.toml: workload.extra_body.{key}: is set by the harness" in err[0]
