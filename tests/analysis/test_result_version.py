"""load_result reads this schema and the one before it, and refuses others by name."""

import orjson
import pytest

from harness.analysis.result import SCHEMA_VERSION, load_result
from harness.errors import ConfigError


@pytest.mark.parametrize("version", [1, SCHEMA_VERSION])
def test_reads_version(tmp_path, version):
    path = tmp_path / "r.json"
    path.write_bytes(orjson.dumps({"schema_version": version, "summary": {}}))
    assert load_result(path)["schema_version"] == version


def test_refuses_a_future_version(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(orjson.dumps({"schema_version": 99}))
    with pytest.raises(ConfigError) as exc:
        load_result(path)
    assert "schema_version" in str(exc.value) and "1, 2" in str(exc.value)
