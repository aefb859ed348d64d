"""`[workload] batch = N` (inputs per embeddings request, each its own prompt_tokens draw) and
`[target] endpoint = "embeddings"` / `"responses"` in a scenario: the plan's draws, and every
mistake one line naming the key."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.orchestrate.scenario import load_scenario
from harness.workload.plan import build_plan
from harness.workload.scenario import check_endpoint_workload

BASE: dict[str, Any] = {
    "name": "s",
    "seed": 3,
    "target": {"endpoint": "embeddings"},
    "workload": {"prompt_tokens": {"dist": "uniform", "min": 8, "max": 64}},
    "phases": [{"name": "m", "requests": 5, "arrival": {"process": "constant", "rate": 1}}],
}


def scenario(workload: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {**BASE, **top, "workload": {**BASE["workload"], **(workload or {})}}


def test_a_batch_draws_each_inputs_length() -> None:
    scn = load_scenario(scenario({"batch": 4}))
    pp = build_plan(scn).phases[0]
    assert pp.input_tokens is not None and pp.input_tokens.shape == (5, 4)
    assert np.array_equal(pp.prompt_tokens, pp.input_tokens.sum(axis=1))  # a request: its sum
    assert len({tuple(r) for r in pp.input_tokens.tolist()}) > 1  # drawn per input
    assert pp.inputs(2) == pp.input_tokens[2].tolist()
    again = build_plan(load_scenario(scenario({"batch": 4})))
    assert again.digest() == build_plan(scn).digest()  # deterministic
    assert build_plan(load_scenario(scenario({"batch": 2}))).digest() != again.digest()


def test_one_input_per_request_by_default_and_no_output_lengths_needed() -> None:
    scn = load_scenario(scenario())
    pp = build_plan(scn).phases[0]
    assert scn.workload.batch == 1 and pp.input_tokens is None
    assert pp.inputs(0) == [int(pp.prompt_tokens[0])]
    check_endpoint_workload(scn, "embeddings")


@pytest.mark.parametrize(
    ("doc", "key", "fragment"),
    [
        # out of range
        (scenario({"batch": 0}), "workload.batch", ">= 1"),
        (scenario({"batch": 5000}), "workload.batch", "<= 2048"),
        # not an integer
        (scenario({"batch": "8"}), "workload.batch", "integer"),
        # a batch beside tools: no such request
        (
            scenario({"batch": 2, "tools": 1, "output_tokens": {"dist": "fixed", "value": 4}}),
            "workload.batch",
            "does not combine",
        ),
        # a generation endpoint still needs output lengths
        (scenario(target={"endpoint": "responses"}), "workload.output_tokens", "is required"),
        # an endpoint nobody serves
        (scenario(target={"endpoint": "rerank"}), "target.endpoint", "embeddings"),
    ],
)
def test_mistakes_name_the_key(doc: dict[str, Any], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_scenario(doc)
    assert exc.value.key == key and fragment in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_batch_needs_the_embeddings_endpoint() -> None:
    scn = load_scenario(scenario({"batch": 3, "output_tokens": {"dist": "fixed", "value": 4}}))
    with pytest.raises(ConfigError) as exc:
        check_endpoint_workload(scn, "chat")
    assert exc.value.key == "workload.batch" and '"chat"' in str(exc.value)
