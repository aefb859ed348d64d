"""The typed result: the published JSON Schema is what the types say, and real results (this
version's, a version-1 one, one where every request failed, a killed run's) validate against it;
a broken one does not."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from analysis_simruns import run, write

from harness.analysis.result import READABLE_SCHEMA_VERSIONS, build_result
from harness.analysis.result_types import json_schema
from harness.record.journal import Journal, read_journal
from harness.record.records import ErrorKind
from harness.schema import RESULT_SCHEMA_PATH

jsonschema = pytest.importorskip("jsonschema")  # in the test extra

V2_KEYS = ("server_view", "request_adaptations", "output_lengths_forced")  # top level, added by 2


def _errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads(RESULT_SCHEMA_PATH.read_text())
    v = jsonschema.Draft202012Validator(schema)
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in v.iter_errors(doc)]


def test_the_published_schema_is_what_the_types_say():
    assert json.loads(RESULT_SCHEMA_PATH.read_text()) == json_schema(), (
        "run `python -m harness.schema` after changing harness/analysis/result_types.py"
    )
    # the versions it accepts are the ones `load_result` reads
    assert json_schema()["properties"]["schema_version"]["enum"] == list(READABLE_SCHEMA_VERSIONS)


@pytest.fixture(scope="module")
def real_result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("schema")
    out = run(write(tmp, rate=10.0, duration="2s", speedup=10.0), tmp / "r.json")
    return json.loads(Path(out).read_text())


@pytest.mark.slow
def test_a_real_result_validates(real_result):
    assert real_result["schema_version"] == 9
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


def _as_written(result: dict[str, Any]) -> dict[str, Any]:
    """The result as its JSON file holds it (tuples as lists, numpy numbers as numbers)."""
    return json.loads(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY))


@pytest.mark.slow
def test_a_result_where_every_request_failed_validates(real_result):
    # the real run's journal, every request refused as a gateway refusing everything would: no
    # success in any block, so its token counting, output lengths (and the rest) are null
    path = Path(real_result["files"]["journal"])
    j = read_journal(path)
    refused = [
        dataclasses.replace(
            r,
            headers_ns=r.sent_ns,
            chunk_ns=(),
            chunk_tokens=(),
            status=403,
            error=ErrorKind.HTTP_STATUS,
            error_detail="HTTP 403: not allowed",
            prompt_tokens=0,
            output_tokens=0,
            usage_per_chunk=False,
        )
        for r in j.records
    ]
    r = _as_written(build_result(Journal(j.header, records=refused, end=j.end), str(path)))
    assert r["summary"]["requests"]["completed"] == 0 and r["summary"]["requests"]["failed"] == len(
        refused
    )
    assert (
        r["summary"]["tokens"]["itl_per"] is None
        and r["phases"][0]["tokens"]["output_lengths"] is None
    )
    assert _errors(r) == []


@pytest.mark.slow
def test_a_killed_runs_result_validates(real_result, tmp_path):
    # the real run's journal without its end line, as a killed run leaves it: no CPU time
    lines = Path(real_result["files"]["journal"]).read_bytes().splitlines(keepends=True)
    assert b'"end_ns"' in lines[-1]
    cut = tmp_path / "killed.jsonl"
    cut.write_bytes(b"".join(lines[:-1]))
    r = _as_written(build_result(read_journal(cut), str(cut)))
    assert r["complete"] is False and r["client"]["cpu_s"] is None
    assert _errors(r) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("summary", "requests", "sent"), "12", "summary.requests.sent"),  # a count as text
        (("target", "kind"), None, "target.kind"),  # a required string
        (("schema_version",), 10, "schema_version"),  # a version nobody wrote
        (("phases", 0, "latency_ms", "ttft", "count"), 1.5, "phases.0.latency_ms.ttft.count"),
    ],
)
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
