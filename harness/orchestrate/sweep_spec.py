"""A sweep file read and validated into a `SweepSpec`: the base scenario, the server settings to
vary (their cross product), the load points, and every point's `--set` items. Every point is
checked as a scenario before anything starts; errors name the file, the key and the allowed
values (`ConfigError`). `harness.orchestrate.sweep` runs the spec; its docstring shows a file."""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.toml_dump import toml_value
from harness.config.validate import Table, parse_toml_text, read_text_file
from harness.errors import ConfigError, UsageError
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.servers import LAUNCHED_ENGINES

SERVER_KINDS = ("sim", "vllm", "llama.cpp", "external")
LOAD_KINDS = ("rate", "concurrency", "max_concurrency", "overrides")
MAX_POINTS = 10_000


@dataclass(frozen=True)
class Point:
    index: int
    setting: dict[str, Any]
    load: dict[str, Any]
    setting_label: str
    load_label: str
    sets: tuple[str, ...]  # --set items for the run (server + load)

    @property
    def id(self) -> str:
        return f"{self.setting_label}/{self.load_label}" if self.setting_label else self.load_label

    def file_stem(self, rep: int) -> str:
        safe = "".join(ch if ch.isalnum() or ch in "_.=-" else "_" for ch in self.id)
        return f"p{self.index:03d}-{safe[:120]}-r{rep}"


@dataclass(frozen=True)
class SweepSpec:
    path: str
    name: str
    scenario: str  # path of the base scenario
    server_kind: str
    target: str | None
    base_settings: dict[str, Any]
    settings: tuple[dict[str, Any], ...]
    points: tuple[Point, ...]
    repeat: int
    link: bool
    digest: str
    load_kind: str
    extra: dict[str, Any] = field(default_factory=dict)
    config: str | None = None  # vllm / llama.cpp: config.toml the server is started from


@dataclass(frozen=True)
class _Server:
    """The sweep file's [server] table."""

    kind: str
    target: str | None
    config: str | None  # vllm / llama.cpp: the config.toml to start from
    base_settings: dict[str, Any]
    vary: dict[str, Any]


def _label(d: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in d.items())


def load_sweep(path: str, repeat: int | None = None) -> SweepSpec:
    """Read and validate a sweep file. Raises ConfigError naming the file, key and allowed values."""
    p = Path(path)
    source = read_text_file(p)
    doc = parse_toml_text(source, path)
    top = Table(doc, path)
    name = top.str("name", p.stem)
    scn_rel = top.str("scenario")
    scn_path = str((p.parent / scn_rel) if not Path(scn_rel).is_absolute() else Path(scn_rel))
    rep = top.int("repeat", 1, min=1, max=100)
    if repeat is not None:
        if repeat < 1 or repeat > 100:
            raise UsageError(f"--repeat {repeat}: expected 1..100")
        rep = repeat
    link = top.bool("link", False)
    server = _read_server(top, p, path)
    phases, load_kind, values = _read_load(top)
    top.finish()
    targets = _load_phases(path, scn_path, phases)
    loads = _loads(path, load_kind, values, targets)
    settings_list, points = _points(top, server, loads, link, load_kind)
    for pt in points:  # every point must be a valid scenario before anything starts
        load_scenario(scn_path, list(pt.sets))
    digest = hashlib.sha256(source.encode("utf-8") + Path(scn_path).read_bytes()).hexdigest()[:16]
    return SweepSpec(
        path,
        name,
        scn_path,
        server.kind,
        server.target,
        server.base_settings,
        tuple(settings_list),
        tuple(points),
        rep,
        link,
        digest,
        load_kind,
        config=server.config,
    )


def _read_server(top: Table, p: Path, path: str) -> _Server:
    """The [server] table: its kind, the config.toml a launched one starts from, what varies."""
    st = top.table("server", Table({}, path, "server"))
    kind = st.str("kind", "sim", choices=SERVER_KINDS)
    target = st.url("target", None)
    config_rel = st.str("config", None)
    base_settings = dict(st.table("settings", Table({}, path, "server.settings")).data)
    vary = dict(st.table("vary", Table({}, path, "server.vary")).data)
    st.finish()
    config_path: str | None = None
    if kind in LAUNCHED_ENGINES:
        from harness.config.configfile import DEFAULT_CONFIG_FILE, load_config

        config_path = (
            str(p.parent / config_rel)
            if config_rel and not Path(config_rel).is_absolute()
            else (config_rel or DEFAULT_CONFIG_FILE)
        )
        if not Path(config_path).is_file():
            st.fail(
                "config",
                f"{config_path} not found: a {kind} sweep starts its server from config.toml's "
                "[server], [model] and [engine] sections",
            )
        load_config(Path(config_path))  # validated up front
    elif config_rel:
        st.fail("config", f'only for kind = "vllm" or "llama.cpp", not {kind!r}')
    if kind == "external":
        if not target:
            st.fail("target", 'required with kind = "external": the URL of the running server')
        if vary or base_settings:
            st.fail(
                "vary",
                'an external server cannot be restarted with other settings; use kind = "sim"',
            )
    for k, v in vary.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(
                path, f"server.vary.{k}", f"expected a non-empty list of values, got {v!r}"
            )
    return _Server(kind, target, config_path, base_settings, vary)


def _read_load(top: Table) -> tuple[list[Any], str, list[Any]]:
    """The [load] table: (the phases it applies to, its kind, its values)."""
    lt = top.table("load")
    phases = lt.list("phases", [])
    given = [k for k in LOAD_KINDS if lt.has(k)]
    if len(given) != 1:
        lt.fail("rate", f"give exactly one of {', '.join(LOAD_KINDS)} (a list of load points)")
    load_kind = given[0]
    values = lt.list(load_kind)
    if not values:
        lt.fail(load_kind, "expected a non-empty list")
    lt.allow(*LOAD_KINDS)
    lt.finish()
    return phases, load_kind, values


def _load_phases(path: str, scn_path: str, phases: list[Any]) -> list[int]:
    """The indices of the phases the load applies to: those named, else the measured ones. The
    base scenario is validated here, up front."""
    scn = load_scenario(scn_path)
    phase_names = [ph.name for ph in scn.phases]
    for ph in phases:
        if ph not in phase_names:
            raise ConfigError(
                path,
                "load.phases",
                f"unknown phase {ph!r}; the scenario has: {', '.join(phase_names)}",
            )
    return [
        i for i, ph in enumerate(scn.phases) if (ph.name in phases if phases else not ph.warmup)
    ]


def _loads(
    path: str, load_kind: str, values: list[Any], targets: list[int]
) -> list[tuple[dict[str, Any], list[str]]]:
    """Each load point: (its label's values, its `--set` items on the target phases)."""
    loads: list[tuple[dict[str, Any], list[str]]] = []
    for i, v in enumerate(values):
        if load_kind == "overrides":
            if not isinstance(v, dict) or not v:
                raise ConfigError(
                    path, f"load.overrides.{i}", 'expected a table of "dotted.key" = value'
                )
            loads.append((dict(v), [f"{k}={toml_value(x)}" for k, x in v.items()]))
            continue
        if (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or v <= 0
            or (load_kind != "rate" and not isinstance(v, int))
        ):
            what = "a rate > 0 (requests/s)" if load_kind == "rate" else "an integer >= 1"
            raise ConfigError(path, f"load.{load_kind}.{i}", f"expected {what}, got {v!r}")
        if load_kind == "rate":
            sets = [f"phases.{t}.arrival.rate={toml_value(v)}" for t in targets]
        elif load_kind == "concurrency":
            sets = [f'phases.{t}.arrival={{process = "closed", users = {v}}}' for t in targets]
        else:
            sets = [f"phases.{t}.max_concurrency={v}" for t in targets]
        loads.append(({load_kind: v}, sets))
    return loads


def _points(
    top: Table,
    server: _Server,
    loads: list[tuple[dict[str, Any], list[str]]],
    link: bool,
    load_kind: str,
) -> tuple[list[dict[str, Any]], list[Point]]:
    """(the server settings: the cross product of [server] vary, the points: settings x loads,
    or only max_concurrency == max_num_seqs under `link`). At most MAX_POINTS."""
    vary = server.vary
    n_settings = math.prod(len(v) for v in vary.values())  # before the product is made
    if n_settings * (1 if link else len(loads)) > MAX_POINTS:
        top.fail(
            "load",
            f"{' x '.join(str(len(v)) for v in vary.values()) or '1'} server settings"
            + ("" if link else f" x {len(loads)} load points")
            + f" = {n_settings * (1 if link else len(loads)):,} points; at most {MAX_POINTS:,}",
        )
    settings_list: list[dict[str, Any]] = [
        dict(zip(vary, combo, strict=True)) for combo in itertools.product(*vary.values())
    ] or [{}]
    if link and (load_kind not in ("concurrency", "max_concurrency") or "max_num_seqs" not in vary):
        top.fail(
            "link", "needs server.vary.max_num_seqs and load.concurrency or load.max_concurrency"
        )
    points: list[Point] = []
    for s in settings_list:
        for load, load_sets in loads:
            if link and load.get(load_kind) != s.get("max_num_seqs"):
                continue
            # a launched server gets the settings as overrides, the simulator as [sim] keys
            sim = {**server.base_settings, **s} if server.kind == "sim" else {}
            point_sets = tuple([f"sim.{k}={toml_value(x)}" for k, x in sim.items()] + load_sets)
            points.append(Point(len(points), s, load, _label(s), _label(load), point_sets))
    if not points:
        top.fail("link", "no point left: no load value equals a max_num_seqs value")
    if len(points) > MAX_POINTS:
        top.fail("load", f"{len(points)} points; at most {MAX_POINTS}")
    return settings_list, points
