"""load_result reads this schema and the one before it (real files of each), and refuses others
by name."""

from pathlib import Path

import orjson
import pytest

from harness.analysis.result import load_result
from harness.errors import ConfigError

DATA = Path(__file__).parents[1] / "data" / "results"


@pytest.mark.parametrize(("name", "version"), [("v1-c250271", 1), ("v2", 2)])
def test_reads_version(name, version):
    assert load_result(DATA / f"{name}.json")["schema_version"] == version


@pytest.mark.parametrize("version", [99, 0, "2", None])
def test_refuses_another_version(tmp_path, version):
    doc = orjson.loads((DATA / "v2.json").read_bytes())
    doc["schema_version"] = version
    path = tmp_path / "r.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(ConfigError) as exc:
        load_result(path)
    assert "schema_version" in str(exc.value) and "1, 2, 3, 4, 5" in str(exc.value)


def test_refuses_a_file_without_a_version(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(orjson.dumps({"summary": {}}))
    with pytest.raises(ConfigError, match="schema_version: missing: this is not a harness result"):
        load_result(path)
