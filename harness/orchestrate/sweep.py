"""`sweep`: vary server settings and load, one `run` per point, a `summary.json` for the lot.

A sweep file names a base scenario, the server settings to vary (their cross product) and the
load points. For each setting the server is started through `harness.server.launcher` (the
simulator; or no server at all for `kind = "external"`), each load point runs through
`harness.orchestrate.run.run_command` exactly as `python -m harness run` would, and the server is
stopped. Every point's result (and journal) lands in the sweep's folder; `summary.json` is
rewritten after each point, so an interrupted sweep keeps what it finished and `--resume`
redoes only the rest.

With `--reset-prefix-cache` the server's prefix cache is emptied before every run of every point
(harness.orchestrate.prefix_reset; a vLLM the sweep starts gets VLLM_SERVER_DEV_MODE=1 for the
route), and each run's result records how that went (`options.prefix_cache_reset`, also in the
summary's runs).

    name = "sweep_max_num_seqs"
    scenario = "sweep_base.toml"             # relative to the sweep file
    repeat = 1                               # runs per point (mean and 95 % CI)
    link = false                             # true: only points with max_concurrency == max_num_seqs
    [server]
    kind = "sim"                             # "sim" (default), "vllm" or "llama.cpp" (started from
                                             # config.toml's server sections), or "external"
    config = "../config.toml"                # vllm / llama.cpp: the config.toml to start from
    settings = { speedup = 10.0 }            # added to the scenario's [sim] on every point
    vary = { max_num_seqs = [8, 16, 32] }    # cross product of these lists
    [load]
    phases = ["main"]                        # which phases the load applies to (default: measured)
    rate = [5, 10, 20]                       # or concurrency = [...], max_concurrency = [...],
                                             # or overrides = [{ "phases.0.duration" = "5s" }, ...]
"""

from __future__ import annotations

import hashlib
import itertools
import math
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from harness.analysis.result import load_result
from harness.analysis.sweep_report import (
    SUMMARY_KIND,
    SUMMARY_SCHEMA_VERSION,
    fold_repeats,
    fold_slo,
    point_metrics,
    point_slo,
)
from harness.config.toml_dump import toml_value
from harness.config.validate import Table, parse_toml_text, read_text_file
from harness.errors import ConfigError, RunAborted, UsageError
from harness.orchestrate.prefix_reset import PrefixCacheReset
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.servers import LAUNCHED_ENGINES, StartedServer
from harness.orchestrate.stopping import CommandStop
from harness.safe_write import write_file
from harness.termtext import terminal_safe

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


def _label(d: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in d.items())


def load_sweep(path: str, repeat: int | None = None) -> SweepSpec:
    """Read and validate a sweep file. Raises ConfigError naming the file, key and allowed values."""
    p = Path(path)
    source = read_text_file(p)
    doc = parse_toml_text(source, path)
    text = source.encode("utf-8")
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
    top.finish()

    scn = load_scenario(scn_path)  # validates the base scenario up front
    phase_names = [ph.name for ph in scn.phases]
    for ph in phases:
        if ph not in phase_names:
            raise ConfigError(
                path,
                "load.phases",
                f"unknown phase {ph!r}; the scenario has: {', '.join(phase_names)}",
            )
    targets = [
        i for i, ph in enumerate(scn.phases) if (ph.name in phases if phases else not ph.warmup)
    ]

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
            sim = (
                {**base_settings, **s} if kind == "sim" else {}
            )  # a launched server gets them as overrides
            point_sets = tuple([f"sim.{k}={toml_value(x)}" for k, x in sim.items()] + load_sets)
            points.append(Point(len(points), s, load, _label(s), _label(load), point_sets))
    if not points:
        top.fail("link", "no point left: no load value equals a max_num_seqs value")
    if len(points) > MAX_POINTS:
        top.fail("load", f"{len(points)} points; at most {MAX_POINTS}")
    for pt in points:  # every point must be a valid scenario before anything starts
        load_scenario(scn_path, list(pt.sets))
    digest = hashlib.sha256(text + Path(scn_path).read_bytes()).hexdigest()[:16]
    return SweepSpec(
        path,
        name,
        scn_path,
        kind,
        target,
        base_settings,
        tuple(settings_list),
        tuple(points),
        rep,
        link,
        digest,
        load_kind,
        config=config_path,
    )


# ---------------------------------------------------------------- running


def _write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    data = orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    write_file(out_dir / "summary.json", data)  # harness.safe_write: exclusive tmp, no link


def _empty_summary(spec: SweepSpec, out_dir: Path) -> dict[str, Any]:
    return {
        "kind": SUMMARY_KIND,
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "sweep": {
            "name": spec.name,
            "file": spec.path,
            "scenario": spec.scenario,
            "server_kind": spec.server_kind,
            "config": spec.config,
            "target": spec.target,
            "repeat": spec.repeat,
            "link": spec.link,
            "load_kind": spec.load_kind,
            "digest": spec.digest,
            "base_settings": spec.base_settings,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        },
        "points": [
            {
                "id": p.id,
                "index": p.index,
                "setting": p.setting,
                "load": p.load,
                "setting_label": p.setting_label,
                "load_label": p.load_label,
                "status": "pending",
                "runs": [],
                "metrics": {},
            }
            for p in spec.points
        ],
    }


def default_out_dir(spec: SweepSpec, resume: bool) -> Path:
    root = Path("results")
    if resume:
        found = sorted(d for d in root.glob(f"{spec.name}-*") if (d / "summary.json").is_file())
        if not found:
            raise UsageError(
                f"--resume: no results/{spec.name}-*/summary.json to resume; give --out DIR"
            )
        return found[-1]
    return root / f"{spec.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def _done_run(out_dir: Path, stem: str) -> dict[str, Any] | None:
    """The finished result of one run, or None when it must be (re)done."""
    path = out_dir / f"{stem}.json"
    if not path.is_file():
        return None
    try:
        r = load_result(path)
    except ConfigError:
        return None
    return r if r.get("complete") else None


def _start_launched(
    spec: SweepSpec, overrides: dict[str, Any], log: Path, quiet: bool, dev_mode: bool = False
) -> StartedServer:
    """Start a vLLM or llama.cpp server from config.toml with this point's settings (the same
    code as `serve`), on a free port. The model the runs carry: None when the scenario's
    [target] names one, else what the started server serves (`start_launched`)."""
    from harness.config.configfile import load_config
    from harness.orchestrate.servers import start_launched, with_dev_mode

    assert spec.config is not None
    cfg = load_config(Path(spec.config))
    if dev_mode and spec.server_kind == "vllm":  # --reset-prefix-cache: vLLM's reset route
        cfg = with_dev_mode(cfg)
    started = start_launched(
        cfg,
        spec.server_kind,
        log,
        overrides,
        want_model=load_scenario(spec.scenario).target.model is None,
    )
    _say(
        quiet,
        f"[{spec.name}] {started.description}; model {started.model or 'from the scenario'}; log {log}",
    )
    return started


def _say(quiet: bool, *a: object) -> None:
    if not quiet:
        print(terminal_safe(" ".join(map(str, a))), file=sys.stderr, flush=True)


def run_sweep(
    spec: SweepSpec,
    out_dir: Path,
    resume: bool = False,
    quiet: bool = False,
    stop_after_runs: int | None = None,
    settings_path: str | None = None,
    config_path: str | None = None,
    reset_prefix_cache: bool = False,
    signals: CommandStop | None = None,
) -> dict[str, Any]:
    """Run every unfinished point; returns the summary (also in out_dir/summary.json).

    signals: the command's SIGINT/SIGTERM stop (harness.orchestrate.stopping): the run in
    progress stops at once and the summary says why the sweep stopped; between runs the signal
    raises `Interrupted` (harness.orchestrate.sweep_interrupt marks the summary then).

    reset_prefix_cache: empty the server's prefix cache before each run (module docstring).

    settings_path, config_path: the settings.json / config.toml every run reads (`run --settings/--config`).

    stop_after_runs: stop (as if interrupted) after this many new runs; for tests of --resume.
    """
    from harness.analysis.slo_verdict import result_slo, verdict_line
    from harness.orchestrate.run import RunArgs, WarnOnce, run_command
    from harness.orchestrate.servers import launch_line, start_simulator

    warn = WarnOnce()  # the runs' warnings once, not once per point and repeat

    summary_path = out_dir / "summary.json"
    if summary_path.is_file():
        if not resume:
            raise UsageError(
                f"--out {out_dir}: already holds a sweep (summary.json); use --resume to "
                "continue it, or another --out"
            )
        try:
            old = orjson.loads(summary_path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise UsageError(
                f"--resume {out_dir}: {summary_path.name} is not valid JSON ({exc}); "
                "start a new sweep with another --out"
            ) from None
        if (
            old.get("sweep", {}).get("digest") != spec.digest
            or old.get("sweep", {}).get("repeat") != spec.repeat
        ):
            raise UsageError(
                f"--resume {out_dir}: the sweep file, its scenario or --repeat changed since "
                "this sweep started; start a new one with another --out"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = _empty_summary(spec, out_dir)
    new_runs = 0
    interrupted: str | None = None

    def record(pt: Point) -> None:
        entry = summary["points"][pt.index]
        runs = []
        for rep in range(spec.repeat):
            r = _done_run(out_dir, pt.file_stem(rep))
            if r is not None:
                runs.append(
                    {
                        "result": f"{pt.file_stem(rep)}.json",
                        "seed": r["scenario"].get("seed"),
                        "metrics": point_metrics(r),
                        "slo": point_slo(r),
                        "speedup": (r.get("clock") or {}).get("speedup", 1.0),
                        **(
                            {"prefix_cache_reset": r["options"]["prefix_cache_reset"]}
                            if "prefix_cache_reset" in (r.get("options") or {})
                            else {}
                        ),
                    }
                )
        entry["runs"] = runs
        entry["status"] = "done" if len(runs) == spec.repeat else entry["status"]
        entry["metrics"] = fold_repeats([x["metrics"] for x in runs]) if runs else {}
        entry["slo"] = fold_slo([x["slo"] for x in runs]) if runs else []

    for pt in spec.points:
        record(pt)
    _write_summary(out_dir, summary)
    base_seed = load_scenario(spec.scenario).seed
    for si, setting in enumerate(spec.settings):
        todo = [
            pt
            for pt in spec.points
            if pt.setting == setting and summary["points"][pt.index]["status"] != "done"
        ]
        if not todo or interrupted:
            continue
        server: StartedServer | None = None
        target = spec.target
        if spec.server_kind == "sim":
            scn = load_scenario(spec.scenario, list(todo[0].sets))
            log = out_dir / f"server-{si:02d}.log"
            server = start_simulator(scn.sim, spec.scenario, log)
            _say(quiet, f"[{spec.name}] {launch_line(server, log)}")
        elif spec.server_kind in LAUNCHED_ENGINES:
            server = _start_launched(
                spec,
                {**spec.base_settings, **setting},
                out_dir / f"server-{si:02d}.log",
                quiet,
                dev_mode=reset_prefix_cache,
            )
        if server is not None:
            target = server.base_url
        resetter = (
            PrefixCacheReset(target, lambda line: _say(quiet, f"[{spec.name}] {line}"))
            if reset_prefix_cache and target is not None
            else None
        )
        try:
            for pt in todo:
                for rep in range(spec.repeat):
                    stem = pt.file_stem(rep)
                    if _done_run(out_dir, stem) is not None:
                        continue
                    if stop_after_runs is not None and new_runs >= stop_after_runs:
                        interrupted = f"stopped after {new_runs} runs"
                        break
                    _say(
                        quiet,
                        f"[{spec.name}] point {pt.index + 1}/{len(spec.points)} {pt.id} run {rep + 1}/{spec.repeat}",
                    )
                    args = RunArgs(
                        scenario=spec.scenario,
                        target=target,
                        model=server.model if server is not None else None,
                        out=str(out_dir / f"{stem}.json"),
                        sets=list(pt.sets),
                        seed=base_seed + rep,
                        quiet=True,
                        settings=settings_path,
                        config=config_path,
                        prefix_cache_reset=resetter.reset() if resetter is not None else None,
                    )
                    aborted: str | None = None
                    try:
                        with signals.deferred(check=False) if signals else nullcontext():
                            run_command(args, server=server, warn=warn, stop=signals)
                    except RunAborted as exc:
                        aborted = str(exc)
                        summary["points"][pt.index]["error"] = aborted
                    new_runs += 1
                    r = _done_run(out_dir, stem)
                    if r is None:
                        path = out_dir / f"{stem}.json"
                        # the run's own error; else the stop reason of the result it wrote
                        # (a file left by an earlier try is not this run's account)
                        reason = aborted or "no result"
                        if aborted is None and path.is_file():
                            try:
                                reason = str(load_result(path).get("stop_reason"))
                            except ConfigError as exc:
                                reason = str(exc)
                        summary["points"][pt.index]["status"] = "failed"
                        summary["points"][pt.index]["error"] = reason
                        if "interrupt" in reason or "SIGTERM" in reason:
                            interrupted = reason
                    record(pt)
                    _write_summary(out_dir, summary)
                    if r is not None:  # the point's status line: its SLO verdict
                        verdict = verdict_line(result_slo(r)) or "done (no SLO)"
                        _say(
                            quiet,
                            f"[{spec.name}] point {pt.index + 1} {pt.id} run {rep + 1}: {verdict}",
                        )
                    if signals is not None and signals.is_set():
                        interrupted = interrupted or signals.reason
                    if interrupted:
                        break
                if interrupted:
                    break
        finally:
            if server is not None:
                server.stop()
    summary["sweep"]["finished"] = interrupted is None and all(
        p["status"] == "done" for p in summary["points"]
    )
    summary["sweep"]["stop_reason"] = interrupted
    _write_summary(out_dir, summary)
    return summary


def chosen_point(summary: dict[str, Any], point_id: str | None) -> dict[str, Any] | None:
    """The point whose server time series the report plots: the named one, else the busiest."""
    done = [p for p in summary["points"] if p.get("status") == "done" and p.get("runs")]
    if point_id is not None:
        for p in done:
            if p["id"] == point_id:
                return p
        raise UsageError(
            f"--point {point_id!r}: no finished point by that id; ids: "
            + ", ".join(p["id"] for p in done)
        )
    if not done:
        return None

    def offered(p: dict[str, Any]) -> float:
        m = p["metrics"].get("offered_requests_per_s", {}).get("mean")
        return -math.inf if m is None else m

    return max(done, key=offered)
