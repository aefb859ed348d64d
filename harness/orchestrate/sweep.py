"""`sweep`: vary server settings and load, one `run` per point, a `summary.json` for the lot.

A sweep file names a base scenario, the server settings to vary (their cross product) and the
load points (read by `harness.orchestrate.sweep_spec`, re-exported here). For each setting the server is started through `harness.server.launcher` (the
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

import math
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
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
from harness.errors import ConfigError, RunAborted, UsageError
from harness.orchestrate.prefix_reset import PrefixCacheReset
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.servers import LAUNCHED_ENGINES, StartedServer
from harness.orchestrate.stopping import CommandStop
from harness.orchestrate.sweep_spec import (
    LOAD_KINDS,
    MAX_POINTS,
    SERVER_KINDS,
    Point,
    SweepSpec,
    load_sweep,
)
from harness.safe_write import write_file
from harness.termtext import terminal_safe


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
    from harness.orchestrate.run import WarnOnce

    _check_resume(spec, out_dir, resume)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweep = _Sweep(
        spec,
        out_dir,
        _empty_summary(spec, out_dir),
        quiet,
        stop_after_runs,
        settings_path,
        config_path,
        reset_prefix_cache,
        signals,
        WarnOnce(),  # the runs' warnings once, not once per point and repeat
    )
    for pt in spec.points:
        sweep.record(pt)
    _write_summary(out_dir, sweep.summary)
    sweep.base_seed = load_scenario(spec.scenario).seed
    for si, setting in enumerate(spec.settings):
        sweep.run_setting(si, setting)
    summary = sweep.summary
    summary["sweep"]["finished"] = sweep.interrupted is None and all(
        p["status"] == "done" for p in summary["points"]
    )
    summary["sweep"]["stop_reason"] = sweep.interrupted
    _write_summary(out_dir, summary)
    return summary


def _check_resume(spec: SweepSpec, out_dir: Path, resume: bool) -> None:
    """A folder that holds a sweep is continued only with --resume, and only the same sweep."""
    summary_path = out_dir / "summary.json"
    if not summary_path.is_file():
        return
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


def _run_entry(stem: str, r: dict[str, Any]) -> dict[str, Any]:
    """One finished run as the summary lists it under its point."""
    entry = {
        "result": f"{stem}.json",
        "seed": r["scenario"].get("seed"),
        "metrics": point_metrics(r),
        "slo": point_slo(r),
        "speedup": (r.get("clock") or {}).get("speedup", 1.0),
    }
    if "prefix_cache_reset" in (r.get("options") or {}):
        entry["prefix_cache_reset"] = r["options"]["prefix_cache_reset"]
    return entry


@dataclass
class _Sweep:
    """A sweep under way: its summary, the runs done so far, why it stopped (None: it did not)."""

    spec: SweepSpec
    out_dir: Path
    summary: dict[str, Any]
    quiet: bool
    stop_after_runs: int | None
    settings_path: str | None
    config_path: str | None
    reset_prefix_cache: bool
    signals: CommandStop | None
    warn: Callable[[str], None]
    base_seed: int = 0
    new_runs: int = 0
    interrupted: str | None = None

    def say(self, line: str) -> None:
        _say(self.quiet, f"[{self.spec.name}] {line}")

    def record(self, pt: Point) -> None:
        """The point's entry in the summary from the results on disk."""
        entry = self.summary["points"][pt.index]
        runs = []
        for rep in range(self.spec.repeat):
            r = _done_run(self.out_dir, pt.file_stem(rep))
            if r is not None:
                runs.append(_run_entry(pt.file_stem(rep), r))
        entry["runs"] = runs
        entry["status"] = "done" if len(runs) == self.spec.repeat else entry["status"]
        entry["metrics"] = fold_repeats([x["metrics"] for x in runs]) if runs else {}
        entry["slo"] = fold_slo([x["slo"] for x in runs]) if runs else []

    def run_setting(self, si: int, setting: dict[str, Any]) -> None:
        """The unfinished points of one server setting, against one server started for them."""
        todo = [
            pt
            for pt in self.spec.points
            if pt.setting == setting and self.summary["points"][pt.index]["status"] != "done"
        ]
        if not todo or self.interrupted:
            return
        server = self._start_server(si, setting, todo[0])
        target = server.base_url if server is not None else self.spec.target
        resetter = (
            PrefixCacheReset(target, self.say)
            if self.reset_prefix_cache and target is not None
            else None
        )
        try:
            for pt in todo:
                for rep in range(self.spec.repeat):
                    self._run_once(pt, rep, server, target, resetter)
                    if self.interrupted:
                        break
                if self.interrupted:
                    break
        finally:
            if server is not None:
                server.stop()

    def _start_server(self, si: int, setting: dict[str, Any], first: Point) -> StartedServer | None:
        """The server of this setting: the simulator or a launched engine (None: external)."""
        from harness.orchestrate.servers import launch_line, start_simulator

        spec, log = self.spec, self.out_dir / f"server-{si:02d}.log"
        if spec.server_kind == "sim":
            scn = load_scenario(spec.scenario, list(first.sets))
            server = start_simulator(scn.sim, spec.scenario, log)
            self.say(launch_line(server, log))
            return server
        if spec.server_kind in LAUNCHED_ENGINES:
            return _start_launched(
                spec,
                {**spec.base_settings, **setting},
                log,
                self.quiet,
                dev_mode=self.reset_prefix_cache,
            )
        return None

    def _run_once(
        self,
        pt: Point,
        rep: int,
        server: StartedServer | None,
        target: str | None,
        resetter: PrefixCacheReset | None,
    ) -> None:
        """One run of a point (unless its result is on disk already), then the summary
        rewritten. Sets `interrupted` when the sweep must stop."""
        from harness.analysis.slo_verdict import result_slo, verdict_line
        from harness.orchestrate.run import RunArgs, run_command

        spec, stem = self.spec, pt.file_stem(rep)
        if _done_run(self.out_dir, stem) is not None:
            return
        if self.stop_after_runs is not None and self.new_runs >= self.stop_after_runs:
            self.interrupted = f"stopped after {self.new_runs} runs"
            return
        self.say(f"point {pt.index + 1}/{len(spec.points)} {pt.id} run {rep + 1}/{spec.repeat}")
        args = RunArgs(
            scenario=spec.scenario,
            target=target,
            model=server.model if server is not None else None,
            out=str(self.out_dir / f"{stem}.json"),
            sets=list(pt.sets),
            seed=self.base_seed + rep,
            quiet=True,
            settings=self.settings_path,
            config=self.config_path,
            prefix_cache_reset=resetter.reset() if resetter is not None else None,
        )
        aborted: str | None = None
        try:
            with self.signals.deferred(check=False) if self.signals else nullcontext():
                run_command(args, server=server, warn=self.warn, stop=self.signals)
        except RunAborted as exc:
            aborted = str(exc)
            self.summary["points"][pt.index]["error"] = aborted
        self.new_runs += 1
        r = _done_run(self.out_dir, stem)
        if r is None:
            self._failed(pt, stem, aborted)
        self.record(pt)
        _write_summary(self.out_dir, self.summary)
        if r is not None:  # the point's status line: its SLO verdict
            verdict = verdict_line(result_slo(r)) or "done (no SLO)"
            self.say(f"point {pt.index + 1} {pt.id} run {rep + 1}: {verdict}")
        if self.signals is not None and self.signals.is_set():
            self.interrupted = self.interrupted or self.signals.reason

    def _failed(self, pt: Point, stem: str, aborted: str | None) -> None:
        """A run that left no complete result: the point failed, with the reason."""
        path = self.out_dir / f"{stem}.json"
        # the run's own error; else the stop reason of the result it wrote
        # (a file left by an earlier try is not this run's account)
        reason = aborted or "no result"
        if aborted is None and path.is_file():
            try:
                reason = str(load_result(path).get("stop_reason"))
            except ConfigError as exc:
                reason = str(exc)
        self.summary["points"][pt.index]["status"] = "failed"
        self.summary["points"][pt.index]["error"] = reason
        if "interrupt" in reason or "SIGTERM" in reason:
            self.interrupted = reason


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


__all__ = [
    "LOAD_KINDS",
    "MAX_POINTS",
    "SERVER_KINDS",
    "Point",
    "SweepSpec",
    "chosen_point",
    "default_out_dir",
    "load_sweep",
    "run_sweep",
]
