"""Ray: the harness shipped with the job, so no node of a cluster needs it installed (issue 45).

`run --ray` gives its actors a Ray `runtime_env` (Ray's mechanism for a job's code and
dependencies) built here:

    py_modules  [the driver's harness package directory]   zipped, uploaded once per job
                                                            (Ray caches it by content hash)
    excludes    ["__pycache__", "*.pyc"]
    pip         the harness's own dependencies (pyproject's `dependencies`) that a node lacks,
                pinned to the driver's versions; left out where every node has them

Which dependencies a node lacks is asked, not assumed: before the shards start, one tiny task
per alive node (pinned to it, no CPU) reports which of the distributions are not installed
there. That task is pickled by value, so it runs on a node without the harness. A cluster
built from `rayproject/ray` images lacks aiohttp, orjson, hdrhistogram and the like: those are
installed into the job's environment on its nodes (Ray's pip plugin, which needs the nodes to
reach a package index); a cluster that has them installs nothing.

The user decides with HARNESS_RAY_RUNTIME_ENV:

    unset            the default above
    none             no runtime_env: every node has the harness installed (the old way)
    {"pip": null}    a JSON object (or a path to a .json file holding one), merged over the
                     default key by key; a key set to null is dropped: `{"pip": null}` never
                     installs, `{"pip": ["harness==0.1.0"], "py_modules": null}` installs a
                     release instead of shipping this tree, `{"env_vars": {...}}` adds
                     variables, `{"working_dir": "."}` ships a folder beside the code
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from harness.errors import UsageError

ENV_VAR = "HARNESS_RAY_RUNTIME_ENV"
EXCLUDES = ["__pycache__", "*.pyc"]
PROBE_TIMEOUT_S = 120.0  # a node that cannot run a no-CPU task this long is not ready
# pyproject's `dependencies`, for a harness run from a source tree that is not installed
FALLBACK_DEPENDENCIES = (
    "aiohttp",
    "uvloop",
    "numpy",
    "orjson",
    "hdrhistogram",
    "prometheus_client",
)


def package_dir() -> Path:
    """The directory of the harness package this driver runs: what `py_modules` ships."""
    import harness

    return Path(harness.__file__).resolve().parent


def dependencies() -> list[str]:
    """The distributions the harness needs at run time (no extras), by name."""
    try:
        reqs = md.requires("harness") or []
    except md.PackageNotFoundError:
        return list(FALLBACK_DEPENDENCIES)
    out = []
    for req in reqs:
        _, _, marker = req.partition(";")
        if "extra" in marker:  # an optional extra's (ray, parquet, test, ...)
            continue
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if m:  # a platform marker (uvloop's: not on Windows) holds on a Ray node (Linux)
            out.append(m.group(1))
    return out


def pinned(dists: list[str]) -> list[str]:
    """`name==version` as the driver has it (the bare name where the driver lacks it)."""
    out = []
    for d in dists:
        try:
            out.append(f"{d}=={md.version(d)}")
        except md.PackageNotFoundError:
            out.append(d)
    return out


def _probe() -> Callable[[list[str]], list[str]]:
    """The node probe, defined inside a function so that cloudpickle ships it by value: it
    must run where `import harness` fails."""

    def missing(dists: list[str]) -> list[str]:
        import importlib.metadata as meta

        out = []
        for d in dists:
            try:
                meta.distribution(d)
            except meta.PackageNotFoundError:
                out.append(d)
        return out

    return missing


def missing_on_nodes(ray: Any, dists: list[str]) -> list[str]:
    """The distributions of `dists` that any alive node lacks (one no-CPU task per node)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(_probe())
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    refs = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(
            dists
        )
        for n in nodes
    ]
    try:
        found = ray.get(refs, timeout=PROBE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise UsageError(
            f"--ray: {len(nodes)} nodes did not answer which packages they have within "
            f"{PROBE_TIMEOUT_S:g}s; set {ENV_VAR} (none, or a JSON runtime_env) to skip the check"
        ) from None
    lacking = {d for each in found for d in each}
    return [d for d in dists if d in lacking]


def default_env(missing: list[str]) -> dict[str, Any]:
    """The runtime_env that ships this harness and installs what the nodes lack."""
    env: dict[str, Any] = {"py_modules": [str(package_dir())], "excludes": list(EXCLUDES)}
    if missing:
        env["pip"] = {"packages": pinned(missing), "pip_check": False}
    return env


def user_override(raw: str | None) -> dict[str, Any] | None:
    """HARNESS_RAY_RUNTIME_ENV read: None (unset: the default), {} for `none`, else the JSON
    object to merge (from the text, or from the file it names). Raises UsageError."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.lower() in ("none", "off", "installed"):
        return {}
    if not text.startswith("{"):
        try:
            text = Path(text).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"{ENV_VAR}: {raw!r} is not a JSON object, `none`, or a readable .json file "
                f"({exc.strerror or exc})"
            ) from None
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{ENV_VAR}: not valid JSON ({exc}); expected {{...}} or none") from None
    if not isinstance(doc, dict) or not doc:
        raise UsageError(
            f"{ENV_VAR}: expected a non-empty JSON object (Ray's runtime_env keys: py_modules, "
            "pip, working_dir, env_vars, excludes, ...) or none"
        )
    return doc


def merge(default: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """The default with the override's keys replacing its own; a null drops the key."""
    out = dict(default)
    for k, v in override.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def runtime_env(ray: Any, environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The runtime_env of the run's actors (None: none, the nodes have the harness)."""
    override = user_override((os.environ if environ is None else environ).get(ENV_VAR))
    if override == {}:
        return None
    if override is not None and override.get("pip", False) is None:
        missing: list[str] = []  # the user said never install: no need to ask the nodes
    else:
        missing = missing_on_nodes(ray, dependencies())
    env = merge(default_env(missing), override or {})
    if "py_modules" not in env and "working_dir" not in env:
        env.pop("excludes", None)
    return uploaded(ray, env) or None


CODE_KEYS = ("py_modules", "working_dir", "excludes")  # local folders, uploaded by the driver


def job_code_env(environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The code part of the runtime_env (py_modules, working_dir, excludes) for `ray.init` of
    a Ray Client (`ray://`) connection: Ray uploads a client's local folders only for the job."""
    override = user_override((os.environ if environ is None else environ).get(ENV_VAR))
    if override == {}:
        return None
    env = merge(default_env([]), override or {})
    return {k: env[k] for k in CODE_KEYS if k in env} or None


def uploaded(ray: Any, env: dict[str, Any]) -> dict[str, Any]:
    """The runtime_env with its local folders uploaded to the cluster (their gcs:// URIs in
    their place), as `ray.init` does for a job's: Ray refuses local folders on an actor. Under
    Ray Client the job carries them already (`job_code_env`, given to ray.init by connect)."""
    if not any(k in env for k in CODE_KEYS):
        return env
    if ray.util.client.ray.is_connected():
        return {k: v for k, v in env.items() if k not in CODE_KEYS}
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    scratch = ray._private.worker.global_worker.node.get_runtime_env_dir_path()
    out = upload_py_modules_if_needed(dict(env), include_gitignore=True, scratch_dir=scratch)
    out = upload_working_dir_if_needed(out, include_gitignore=True, scratch_dir=scratch)
    out.pop("excludes", None)
    return dict(out)


def describe(env: dict[str, Any] | None) -> str:
    """One line for the terminal: what the job carries to the nodes."""
    if env is None:
        return f"ray: no runtime_env ({ENV_VAR}=none): every node runs its installed harness"
    parts = []
    if env.get("py_modules"):
        parts.append("ships " + ", ".join(str(p) for p in env["py_modules"]))
    if env.get("working_dir"):
        parts.append(f"working_dir {env['working_dir']}")
    pip = env.get("pip")
    packages = pip.get("packages") if isinstance(pip, dict) else pip
    parts.append(
        f"pip installs {', '.join(map(str, packages))} on the nodes"
        if packages
        else "no pip install (every node has the dependencies)"
    )
    return "ray: " + "; ".join(parts)
