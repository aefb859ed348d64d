"""Orchestration: code that calls several rooms in order (plan, simulator, engine, analysis).

- `run`: `run` (scenario -> plan -> server -> engine -> journal -> result -> report): `measure`
  as named steps (`run_steps`), the engine in one process under signals (`run_engine`), the
  arguments (`run_args`), the journal's header (`run_header`), the result's path and the files
  beside it (`run_files`);
- `sweep`: a grid of server settings x load points, each point a `run`; `sweep_spec`: the sweep
  file read and validated into its points;
- `servers`: start the server a scenario needs (the simulator, vLLM, llama.cpp);
- `capacity`: the capacity search against a live server (`harness capacity` parses and prints);
  `capacity_answer`: its capacity.json and text (an answer no probe broke above: a lower bound);
- `stopping`: SIGINT/SIGTERM as one stop for the long commands (capacity, plan, sweep, run
  --repeat): the run in progress cut short, what finished kept, exit 130/143;
- `scenario`: load a scenario for a command (the workload's reading, then `[sim]` checked by the
  simulator's own parser);
- `report`: `report RESULT | JOURNAL | SUMMARY`, printing the report or rebuilding a result;
- `progress`: the live progress line of a run (phase, share done, ETA, counts, tok/s) and the
  live feed that also drives `live_metrics` (one process, workers or Ray: one place);
- `live_metrics`: `run --prometheus-port`: the client's live counters and histograms;
- `sharded`: a run in worker processes or Ray actors, with the /metrics scraper in a thread;
- `virtual_probe`: a scenario's plan through the simulator's scheduler on its virtual clock,
  turned into the same records (`Columns`) a run over HTTP journals; `virtual_client`: its
  perfect client (when each request is sent);
- `virtual_capacity`: the capacity search on that virtual clock (the planner's inner loop and
  the tests' known knee);
- `probe_monitor`: the live runaway-queue watch beside a capacity probe over HTTP;
- `planner`: the deployment planner (GPU x max_num_seqs x tensor parallel x replicas).

`harness.calibrate` (a package: load, steps, fit, replay, report) and `harness.api` (the Python
API: `run` without printing, in a thread of its own) are orchestration too, in the same layer;
`harness.runner` and
`harness.sweep` only re-export `run` and `sweep` for code that imports them by their old names. Argument parsing stays in `harness.commands`; the rooms themselves know nothing of
each other, and nothing here imports `harness.commands`.
"""
