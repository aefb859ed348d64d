"""Configuration as plain data: the files a user writes, read and validated, nothing interpreted.

- `validate`: `Table`, typed reading of parsed TOML/JSON with errors naming file, key and fix;
- `settings`: settings.json (endpoint, key); `configfile`: config.toml (defaults, timeouts,
  metrics scraping, the server to launch); `target`: `Target`, timeouts, the masked `Secret`;
- `resolve`: which target a command measures and where each value came from;
- `scenario`: a scenario's plain sections (`--set`, `[target]`, `[slo]`, `[retry]`).

config imports only `harness.errors`, `harness.units` and `harness.catalogue`. What a scenario's
workload *means* (arrival processes, length distributions, traces, datasets) is interpreted one
layer up, in `harness.workload`.
"""
