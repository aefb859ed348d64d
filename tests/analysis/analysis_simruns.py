"""Helpers for analysis tests: short simulator runs through the real `run` path."""

from __future__ import annotations

from pathlib import Path

from harness.orchestrate.run import RunArgs, run_command

SCENARIO = """
name = "cmp"
seed = 3
[workload]
prompt_tokens = {{ dist = "fixed", value = 32 }}
output_tokens = {{ dist = "fixed", value = 32 }}
ignore_eos = true
[[phases]]
name = "main"
duration = "{duration}"
arrival = {{ process = "poisson", rate = {rate} }}
[slo]
ttft_p99 = "1s"
[sim]
gpu = "L4"
max_num_seqs = {max_num_seqs}
speedup = {speedup}
"""


def write(
    tmp: Path,
    *,
    rate: float = 15.0,
    duration: str = "3s",
    max_num_seqs: int = 16,
    speedup: float = 5.0,
    name: str = "s.toml",
) -> Path:
    p = tmp / name
    p.write_text(
        SCENARIO.format(rate=rate, duration=duration, max_num_seqs=max_num_seqs, speedup=speedup),
        encoding="utf-8",
    )
    return p


def run(scenario: Path, out: Path, sets: list[str] | None = None, seed: int | None = None) -> Path:
    run_command(
        RunArgs(scenario=str(scenario), out=str(out), sets=sets or [], seed=seed, quiet=True)
    )
    return out
