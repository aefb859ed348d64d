"""Load a scenario for a command: the workload's reading of the file, then its `[sim]` table
checked by the simulator's own settings parser (the simulator owns those keys; the workload,
below it, keeps the table as plain data)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.sim.settings import SimSettings
from harness.workload.scenario import Scenario, attribute_to_set
from harness.workload.scenario import load_scenario as read_scenario


def check_sim_table(sim_raw: dict[str, Any], where: str) -> None:
    """Validate a [sim] table (empty: nothing to check). Raises ConfigError."""
    if sim_raw:
        SimSettings.from_mapping(sim_raw, where)


# the workload's load_scenario's signature, on purpose: commands call this one in its place
def load_scenario(
    path: str | Path | Mapping[str, Any],
    sets: list[str] | None = None,
    seed: int | None = None,
    adapt: Callable[[dict[str, Any]], None] | None = None,
) -> Scenario:
    """Read, override and validate a scenario file (or a document in memory: a quick run's), its
    [sim] table included. `adapt`: a command's own change to the document after `sets`
    (harness.workload.scenario.load_scenario).

    Raises ConfigError / UsageError (a mistake a `--set` made is named as `--set`)."""
    scn = read_scenario(path, sets, seed, adapt)
    try:
        check_sim_table(scn.sim, scn.path)
    except ConfigError as exc:
        raise attribute_to_set(exc, {s.partition("=")[0].strip() for s in sets or []}) from None
    return scn


__all__ = ["check_sim_table", "load_scenario"]
