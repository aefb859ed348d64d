"""A run's journal header: what the result is built from besides the records (the scenario,
the target, the planned phases and SLOs, the environment, the run's options). `run` and
`predict` write the same header."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

import harness
from harness.config.target import Target
from harness.workload.plan import Plan
from harness.workload.scenario import Scenario


def environment() -> dict[str, Any]:
    import aiohttp
    import numpy

    try:
        import uvloop

        uv = uvloop.__version__
    except ImportError:
        uv = None
    return {
        "harness_version": harness.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "aiohttp": aiohttp.__version__,
        "uvloop": uv,
        "numpy": numpy.__version__,
    }


def journal_header(
    scn: Scenario,
    plan: Plan,
    target: Target,
    started_at: str,
    options: dict[str, Any],
    server: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The journal's header line: what the result is built from besides the records (the
    scenario, the target, the planned phases and SLOs). `predict` writes the same header."""
    phases = []
    for ph, pp in zip(scn.phases, plan.phases, strict=True):
        phases.append(
            {
                "name": ph.name,
                "warmup": ph.warmup,
                "closed": pp.closed,
                "max_concurrency": ph.max_concurrency,
                "arrival": str(ph.arrival),
                "planned_duration_s": pp.duration_s,
                "planned_requests": None if (pp.closed and pp.requests is None) else pp.count,
                **(
                    {
                        "planned_sessions": None
                        if (pp.closed and pp.requests is None)
                        else pp.sessions.count
                    }
                    if pp.sessions is not None
                    else {}
                ),
            }
        )
    slo = [
        {"name": s.name, "metric": s.metric, "stat": s.stat, "limit_s": s.limit_s} for s in scn.slo
    ]
    resolved = dict(scn.resolved)
    resolved["seed"] = scn.seed
    described = target.describe()
    if server is not None:  # what was started, so a result says which settings it measured
        described["server"] = server
    return {
        "scenario": resolved,
        "scenario_name": scn.name,
        "target": described,
        "environment": environment(),
        "started_at": started_at,
        "phases": phases,
        "slo": slo,
        "plan": {
            "digest": plan.digest(),
            "requests_planned": plan.total_requests,
            "seed": plan.seed,
            "workload": plan.workload,
        },
        "options": options,
    }
