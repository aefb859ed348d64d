"""Views: pure functions from journals and result documents to results, text and HTML.

- `result`: `build_result(journal)`, the only way a result is made, and `load_result`;
  `result_types`: the result's shape as TypedDicts, and the JSON Schema generated from them;
- `report_text` (with `report_text_server`, `report_text_workload`), `html`: the terminal and
  HTML reports (a new view is one module here);
- `compare`, `sweep_report`, `plan_report`, `capacity`, `steady`, `runaway`: the comparisons and
  decisions built on results (`capacity` names the capacity planner's parts:
  `capacity_verdict`, `capacity_evidence`, `capacity_search`); `server_metrics`,
  `server_view`, `failures`: parts of a result.

analysis never imports the client, the server side or the simulator: it reads files.
"""
