"""`python -m harness.schema`: rewrite result.schema.json from harness.analysis.result_types."""

import json

from harness.analysis.result_types import json_schema
from harness.safe_write import write_file
from harness.schema import RESULT_SCHEMA_PATH

write_file(RESULT_SCHEMA_PATH, json.dumps(json_schema(), indent=2) + "\n")
print(RESULT_SCHEMA_PATH)
