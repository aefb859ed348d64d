"""Orchestration: code that calls several rooms in order (plan, simulator, engine, analysis).

- `virtual_probe`: a scenario's plan through the simulator's scheduler on its virtual clock,
  turned into the same records (`Columns`) a run over HTTP journals;
- `virtual_capacity`: the capacity search on that virtual clock (the planner's inner loop and
  the tests' known knee);
- `probe_monitor`: the live runaway-queue watch beside a capacity probe over HTTP;
- `planner`: the deployment planner (GPU x max_num_seqs x tensor parallel x replicas).

Argument parsing stays in `harness.commands`; the rooms themselves know nothing of each other.
"""
