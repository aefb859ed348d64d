"""The workload: a scenario interpreted, and everything random about a run drawn ahead of it.

- `scenario`: load a scenario file into `Scenario` (phases, `Workload`), using config's parsers
  for the plain sections;
- `arrivals`: arrival processes (one frozen dataclass each; a new one goes here, with its
  `parse_arrival` branch); `lengths`: token-length distributions; `trace`, `trace_formats`:
  trace replay; `datasets`, `prompts`, `prefixes`, `sources`: where prompt text comes from;
- `plan`: `build_plan(scenario)`, pure and deterministic (the same seed, the same bytes).

workload imports config (plain tables) and nothing above it: no client, record, server or sim.
"""
