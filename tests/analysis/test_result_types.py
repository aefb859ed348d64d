"""The typed result: the published JSON Schema is what the types say, and real results (this
version's and a version-1 one) validate against it; a broken one does not."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from analysis_simruns import run, write

from harness.analysis.result_types import json_schema
from harness.schema import RESULT_SCHEMA_PATH

jsonschema = pytest.importorskip("jsonschema")   # in the test extra

V2_KEYS = ("server_view", "request_adaptations", "output_lengths_forced")   # top level, added by 2


def _errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads(RESULT_SCHEMA_PATH.read_text())
    v = jsonschema.Draft202012Validator(schema)
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in v.iter_errors(doc)]


def test_the_published_schema_is_what_the_types_say():
    assert json.loads(RESULT_SCHEMA_PATH.read_text()) == json_schema(), \
        "run `python -m harness.schema` after changing harness/analysis/result_types.py"


@pytest.fixture(scope="module")
def real_result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("schema")
    out = run(write(tmp, rate=10.0, duration="2s", speedup=10.0), tmp / "r.json")
    return json.loads(Path(out).read_text())


@pytest.mark.slow
def test_a_real_result_validates(real_result):
    assert real_result["schema_version"] == 2
    assert _errors(real_result) == []


@pytest.mark.slow
def test_a_version_1_result_validates(real_result):
    old = copy.deepcopy(real_result)
    old["schema_version"] = 1
    for k in V2_KEYS:
        old.pop(k, None)
    old["plan"].pop("workload", None)
    for block in [old["summary"], *old["phases"]]:
        block.pop("error_messages", None)
        block["tokens"].pop("output_lengths", None)
    assert _errors(old) == []


@pytest.mark.slow
@pytest.mark.parametrize(("path", "value", "where"), [
    (("summary", "requests", "sent"), "12", "summary.requests.sent"),      # a count as text
    (("target", "kind"), None, "target.kind"),                             # a required string
    (("schema_version",), 3, "schema_version"),                            # a version nobody wrote
    (("phases", 0, "latency_ms", "ttft", "count"), 1.5, "phases.0.latency_ms.ttft.count"),
])
def test_a_broken_result_does_not(real_result, path, value, where):
    bad = copy.deepcopy(real_result)
    node = bad
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    assert any(e.startswith(where) for e in _errors(bad)), _errors(bad)


@pytest.mark.slow
def test_a_missing_block_does_not(real_result):
    bad = {k: v for k, v in real_result.items() if k != "summary"}
    assert any("'summary' is a required property" in e for e in _errors(bad))
