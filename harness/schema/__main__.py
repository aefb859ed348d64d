"""`python -m harness.schema`: rewrite result.schema.json from harness.analysis.result_types."""

import json

from harness.analysis.result_types import json_schema
from harness.schema import RESULT_SCHEMA_PATH

RESULT_SCHEMA_PATH.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")
print(RESULT_SCHEMA_PATH)
