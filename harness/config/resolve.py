"""Which target a run measures: the command line, the scenario, settings.json and config.toml,
merged in that order of precedence. No URL anywhere means: start the built-in simulator."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from harness.config.scenario import Scenario
from harness.config.target import Secret, Target, Timeouts, normalize_base_url

if TYPE_CHECKING:
    from harness.runner import RunArgs


def resolve_target(args: RunArgs, scn: Scenario) -> Target | None:
    """Command line over the scenario's [target]; None means: start the simulator."""
    url = args.target or scn.target.url
    endpoint = args.endpoint or scn.target.endpoint or "chat"
    model = args.model or scn.target.model
    if url is None:
        return None
    where, key = ("--target", "url") if args.target else (scn.path, "target.url")
    base = normalize_base_url(url, where, key)
    api_key = None
    source = ""
    if scn.target.api_key_env:
        value = os.environ.get(scn.target.api_key_env, "")
        if value.strip():
            api_key, source = Secret(value.strip()), f"env {scn.target.api_key_env}"
    return Target("http", base, model, endpoint, api_key, source, timeouts=Timeouts())


