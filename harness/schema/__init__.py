"""Published schemas: `result.schema.json`, the JSON Schema of a run's result document.

It is generated from the types in `harness.analysis.result_types`
(`python -m harness.schema` rewrites it); tests check that the file matches the types and that
real results validate against it.
"""

from pathlib import Path

RESULT_SCHEMA_PATH = Path(__file__).with_name("result.schema.json")
