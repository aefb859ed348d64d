"""The plan size limit: how many requests a scenario may plan unless it raises the limit, and
the words every refusal ends with. Why a million: docs/reliability.md, "Plan size limit";
the estimates and checks: harness.workload.size."""

from __future__ import annotations

DEFAULT_MAX_PLANNED_REQUESTS = 1_000_000
MAX_PLANNED_REQUESTS_CEILING = 1_000_000_000  # the most a scenario may raise it to
LIMIT_KEY = "max_planned_requests"  # the scenario's top-level key


def limit_text(limit: int) -> str:
    """The limit and how to raise it."""
    return (
        f"above the limit of {limit:,} planned requests ({LIMIT_KEY}); to plan more, raise it "
        f"deliberately: {LIMIT_KEY} = N in the scenario, or --set {LIMIT_KEY}=N"
    )
