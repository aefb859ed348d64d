"""`[workload] tools = N` and `tool_choice` send tool definitions with every request (issue 25);
a mistake is one line naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from harness.errors import ConfigError
from harness.orchestrate.scenario import load_scenario
from harness.workload.tools import tool_definitions

BASE: dict[str, Any] = {
    "name": "s",
    "workload": {
        "prompt_tokens": {"dist": "fixed", "value": 8},
        "output_tokens": {"dist": "fixed", "value": 4},
    },
    "phases": [{"name": "m", "requests": 2, "arrival": {"process": "constant", "rate": 1}}],
}


def workload(**kw: Any) -> dict[str, Any]:
    return {**BASE, "workload": {**BASE["workload"], **kw}}


def test_tools_go_into_the_body() -> None:
    wl = load_scenario(workload(tools=2, tool_choice="required")).workload
    assert wl.extra_body == {"tools": tool_definitions(2), "tool_choice": "required"}
    assert [t["function"]["name"] for t in wl.extra_body["tools"]] == ["tool_0", "tool_1"]
    assert load_scenario(workload(tools=1)).workload.extra_body["tool_choice"] == "auto"
    assert load_scenario(workload()).workload.extra_body == {}


@pytest.mark.parametrize(
    ("kw", "key", "fragment"),
    [
        ({"tools": -1}, "workload.tools", ">= 0"),
        (
            {"tools": 1, "tool_choice": "always"},
            "workload.tool_choice",
            "'auto', 'required', 'none'",
        ),
        ({"tool_choice": "required"}, "workload.tool_choice", "needs tools = N"),
        (
            {"tools": 1, "extra_body": {"tools": []}},
            "workload.extra_body.tools",
            "set by workload.tools",
        ),
    ],
)
def test_bad_tool_keys_name_the_key(kw: dict[str, Any], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_scenario(workload(**kw))
    assert exc.value.key == key and fragment in str(exc.value) and "\n" not in str(exc.value)
