"""The Python API: run a scenario, read a result, compare two -- from a script or a notebook.

    import harness
    r = harness.run("scenarios/steady.toml", phases__1__arrival__rate=8)   # blocks; returns a Result
    r = await harness.arun({"name": "x", ...})                             # inside a running loop
    r.summary.latency_ms["ttft"]["p99"];  r.requests();  r.to_pandas();  r.histogram("itl")
    harness.compare(harness.load_result("a.json"), "b.json").status
    p = harness.predict("scenarios/steady.toml", gpu="H100-SXM", tp=2)  # virtual clock, seconds

A run measures on an event loop of its own, in a worker thread, and never on the caller's:
that is what lets `harness.run` work where a loop already runs (Jupyter, IPython, an async
app) and `await harness.arun` leave the caller's loop free while it waits, and it keeps the
caller's own tasks from adding lag to the measurement. Nothing is printed on stdout; notes and
warnings go to stderr (`quiet=True`, the default, keeps the notes and the progress line off).

`scenario`: a path to a TOML file, TOML text (anything with a newline or `=`), or a dict with
the same shape. `**overrides`: the run's options (`target`, `model`, `out`, `seed`, `workers`,
`html`, ..., the `run` flags as keyword arguments) and scenario values by dotted path written
with `__` (`phases__0__duration="5s"` is `--set phases.0.duration=5s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError

# `predict`'s flags a caller may give as keyword arguments (harness.predict).
PREDICT_OPTIONS = ("gpu", "model", "tp", "max_num_seqs", "seed", "out", "html", "quiet")
JOIN_POLL_S = 0.2  # how often the caller's thread wakes while a run goes, so Ctrl-C reaches it
# RunArgs fields a caller may give as keyword arguments (the rest of RunArgs is internal).
RUN_OPTIONS = (
    "target",
    "model",
    "endpoint",
    "out",
    "seed",
    "quiet",
    "grace_s",
    "probe",
    "settings",
    "config",
    "insecure",
    "api_key_env",
    "http_client",
    "workers",
    "ray",
    "html",
    "strict_request",
    "prometheus_port",
    "prometheus_host",
    "prometheus_linger_s",
)


@dataclass(frozen=True)
class Figures:
    """One phase's figures (or the summary over the measured phases), as the result has them."""

    name: str
    warmup: bool
    requests: Mapping[str, int]  # planned_or_due, sent, completed, failed, not_sent, ...
    throughput: Mapping[str, float]  # window_s, requests_per_s, output_tokens_per_s, ...
    latency_ms: Mapping[str, Mapping[str, float]]  # metric -> count, mean, p50 ... max

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> Figures:
        return cls(
            str(block.get("name", "")),
            bool(block.get("warmup", False)),
            dict(block.get("requests") or {}),
            dict(block.get("throughput") or {}),
            dict(block.get("latency_ms") or {}),
        )


@dataclass(frozen=True)
class Result:
    """A run's result: the JSON document, where it lies, and typed views of it."""

    data: Mapping[str, Any] = field(repr=False)
    path: Path | None = None

    @property
    def summary(self) -> Figures:
        return Figures.of(self.data.get("summary") or {})

    @property
    def phases(self) -> list[Figures]:
        return [Figures.of(b) for b in self.data.get("phases") or []]

    @property
    def complete(self) -> bool:
        return bool(self.data.get("complete"))

    @property
    def clock(self) -> Mapping[str, Any] | None:
        """The result's time base where it is not the wall's: {time: "model", speedup: K,
        wall_duration_s, note} for a simulator at speedup K != 1, else None. Every view of the
        result (summary, rows, histograms, exports) is in this one time base."""
        c = self.data.get("clock")
        return dict(c) if isinstance(c, Mapping) else None

    def requests(self) -> list[dict[str, Any]]:
        """Per-request rows (every attempt; stamps in ns, metrics in ms): the rows of
        `python -m harness export --format csv`, read from the run's journal, in the result's
        time base (model time under a simulator's speedup: `clock`), so their figures equal
        the summary's."""
        from harness.analysis.export import request_rows

        return request_rows(self._journal())

    def to_pandas(self) -> Any:
        """`requests()` as a pandas DataFrame (pip install 'harness[pandas]'); its
        `attrs["clock"]` is `clock` (None at real speed), `attrs["impossible_records"]` what
        the journal's vetting set aside (None when every record was possible: the rows are the
        records the result was built from, harness.record.journal_vet)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Result.to_pandas() needs pandas: pip install 'harness[pandas]' "
                "(Result.requests() gives the same rows as dicts)"
            ) from None
        from harness.analysis.export import REQUEST_COLUMNS, request_rows, set_aside

        j = self._journal()
        df = pd.DataFrame(request_rows(j), columns=list(REQUEST_COLUMNS))
        df.attrs["clock"] = self.clock
        df.attrs["impossible_records"] = set_aside(j)
        return df

    def histogram(self, metric: str, phase: str | None = None) -> Any:
        """The HDR histogram (microseconds; `hdrh.histogram.HdrHistogram`) of a metric over the
        measured phases, or of one phase: `.get_value_at_percentile(99)`, `.get_total_count()`."""
        from harness.record.hist import decode

        hists = self.data.get("histograms") or {}
        block = hists.get("summary") if phase is None else (hists.get("phases") or {}).get(phase)
        if block is None:
            raise KeyError(
                f"no phase {phase!r} in this result's histograms; phases: "
                f"{', '.join(hists.get('phases') or {})}"
            )
        if metric not in block:
            raise KeyError(f"no histogram {metric!r}; this result has: {', '.join(block)}")
        return decode(block[metric])

    def _journal(self) -> Any:
        from harness.record.journal import find_journal, read_journal

        found = find_journal(dict(self.data), self.path)
        if found is None:
            raise FileNotFoundError(
                f"the journal of {self.path or 'this result'} is not found (beside the "
                "result, or where files.journal says): requests() reads the records from it"
            )
        return read_journal(found)


@dataclass(frozen=True)
class Comparison:
    """`compare`'s verdict: one row per metric (values, change, its interval, verdict)."""

    data: Mapping[str, Any] = field(repr=False)  # the comparison
    report: Mapping[str, Any] = field(repr=False, default_factory=dict)  # as `compare` prints

    @property
    def status(self) -> str:
        """ "pass", "regression" or "inconclusive" (exit 0, 1 and 3 of the command)."""
        return str(self.data["status"])

    @property
    def rows(self) -> list[dict[str, Any]]:
        return list(self.data["rows"])

    def text(self) -> str:
        """The text `python -m harness compare` prints for the same inputs."""
        from harness.analysis import compare as cmp

        return cmp.render(dict(self.report))


def load_result(path: str | Path) -> Result:
    """Read a result JSON (ConfigError for a missing, foreign or damaged file: one that does not
    match harness/schema/result.schema.json, named by its first failing path)."""
    from harness.analysis.result import load_result as _load

    return Result(_load(path), Path(path))


def compare(
    a: Result | str | Path | Sequence[Result | str | Path],
    b: Result | str | Path | Sequence[Result | str | Path],
    thresholds: Mapping[str, float | str] | None = None,
    replicates: int = 1000,
    seed: int = 0,
    *,
    force: bool = False,
    confidence: float = 0.95,
) -> Comparison:
    """Compare candidate `b` with baseline `a`, as `python -m harness compare a b` does, with
    the command's options: `thresholds` = {"ttft_p99": 0.10 or "10%", ...} (`--max-regression`;
    the defaults, and the scenario's SLO metrics, when None), `force` (`--force`: compare
    results that offered different load, or a simulator with a real server), `confidence`
    (`--confidence`: what the gated metrics hold together), `replicates`, `seed`. Each side is
    one result or a list of results (repeated runs of one setting: the spread between them
    enters the intervals)."""
    from harness.analysis import compare as cmp

    def side(x: Result | str | Path | Sequence[Result | str | Path]) -> list[dict[str, Any]]:
        items = [x] if isinstance(x, Result | str | Path) else list(x)
        if not items:
            raise UsageError("compare: a side needs at least one result")
        docs = []
        for item in items:
            r = item if isinstance(item, Result) else load_result(item)
            doc = dict(r.data)
            if r.path is not None:
                doc["_path"] = str(r.path)
            docs.append(doc)
        return docs

    def name(docs: list[dict[str, Any]]) -> str:
        first = str(docs[0].get("_path") or "result")
        return first if len(docs) == 1 else f"{first} and {len(docs) - 1} more"

    cmp.check_confidence(confidence, "compare(confidence=...)")
    base, cand = side(a), side(b)
    if thresholds is None:
        values = dict(cmp.DEFAULT_THRESHOLDS)
    else:
        values = {}
        for key, v in thresholds.items():
            cmp._check_metric(key, "compare(thresholds=...)")
            values[key] = cmp.parse_threshold(str(v), "compare(thresholds=...)", key)
    th = {"source": "defaults" if thresholds is None else "thresholds=", "values": values}
    comp = cmp.compare_results(
        base,
        cand,
        name(base),
        name(cand),
        values,
        replicates=replicates,
        seed=seed,
        force=force,
        confidence=confidence,
        slo_gates=thresholds is None,
    )
    return Comparison(comp, cmp.build_report([comp], th, replicates, confidence))


def scenario_source(scenario: str | Path | Mapping[str, Any]) -> str | dict[str, Any]:
    """What `RunArgs.scenario` takes: a file path, or a document (from a dict or TOML text)."""
    if isinstance(scenario, Mapping):
        return dict(scenario)
    if isinstance(scenario, Path):
        return str(scenario)
    if ("\n" in scenario or "=" in scenario) and not Path(
        scenario
    ).is_file():  # runs/rate=8.toml is a path
        from harness.config.validate import parse_toml_text

        return parse_toml_text(scenario, "scenario text")
    return scenario


def _split_overrides(
    overrides: Mapping[str, Any], allowed: tuple[str, ...], who: str
) -> tuple[dict[str, Any], list[str]]:
    """(the command's options, `--set` texts) from keyword arguments: an option by its name,
    a scenario value by its dotted path written with `__`, or `sets={"a.b": v}`. The `html`
    option: True means next to the result, False none."""
    options: dict[str, Any] = {"quiet": True}
    sets: list[str] = []
    for key, value in overrides.items():
        if key in allowed:
            options[key] = value
        elif "__" in key:
            sets.append(f"{key.replace('__', '.')}={_set_text(value)}")
        elif key == "sets":
            sets += [f"{k}={_set_text(v)}" for k, v in dict(value).items()]
        else:
            raise UsageError(
                f"{who}: unknown option {key!r}; options: {', '.join(allowed)}, "
                "sets={'phases.0.duration': '5s'}, or a scenario value as phases__0__duration='5s'"
            )
    if options.get("html") is True:  # next to the result
        options["html"] = ""
    elif options.get("html") is False:  # none
        options["html"] = None
    return options, sets


def _run_args(scenario: str | Path | Mapping[str, Any], overrides: Mapping[str, Any]) -> Any:
    from harness.orchestrate.run import RunArgs

    options, sets = _split_overrides(overrides, RUN_OPTIONS, "harness.run")
    if options.get("workers") is not None:
        options["workers"] = str(options["workers"])
    return RunArgs(scenario=scenario_source(scenario), sets=sets, **options)


def _set_text(value: Any) -> str:
    """A Python value as `--set` text (TOML's value grammar, as harness.config.scenario.parse_set_value reads it)."""
    from harness.config.toml_dump import toml_value

    return toml_value(value)


def _measure(args: Any, stop: threading.Event | None = None) -> Result:
    from harness.orchestrate.run import measure, write_result_html

    measured = measure(dataclasses.replace(args, explain=False), stop=stop)
    assert measured is not None
    data, out = measured
    if args.html is not None:
        write_result_html(data, out, args.html)
    return Result(data, out)


def _in_thread(args: Any) -> Result:
    """Run on a fresh event loop in a worker thread; its exception, if any, raised here. Ctrl-C
    (KeyboardInterrupt, as a notebook's interrupt delivers it) stops the run as a first Ctrl-C on
    the command line does -- requests in flight get the grace period, the partial result is
    written -- and is raised again once the run has stopped."""
    box: dict[str, Any] = {}
    stop, done = threading.Event(), threading.Event()

    def work() -> None:
        try:
            box["result"] = _measure(args, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as is
            box["error"] = exc
        finally:
            done.set()

    # Waited on with an Event, not Thread.join: a KeyboardInterrupt inside join() can leave the
    # thread marked as stopped while it still runs (CPython 3.11's _wait_for_tstate_lock), and
    # the second join would then return at once, before the partial result is written.
    threading.Thread(target=work, name="harness-run", daemon=True).start()
    try:
        while not done.wait(JOIN_POLL_S):
            pass
    except KeyboardInterrupt:
        stop.set()
        done.wait()
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


def run(scenario: str | Path | Mapping[str, Any], **overrides: Any) -> Result:
    """Run a scenario and return its Result (written to `out`, default results/<name>-<time>.json).
    Works with or without a running event loop (a notebook's): the run has its own loop."""
    return _in_thread(_run_args(scenario, overrides))


async def arun(scenario: str | Path | Mapping[str, Any], **overrides: Any) -> Result:
    """`run`, awaited: the caller's loop stays free while the run goes in its own thread.
    Cancelling the awaiting task stops the run (as Ctrl-C does) and waits for it to end."""
    args = _run_args(scenario, overrides)
    stop = threading.Event()
    work = asyncio.ensure_future(asyncio.to_thread(_measure, args, stop))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()
        with contextlib.suppress(Exception):
            await work  # the run winds down (grace period) and writes its partial result
        raise


def predict(scenario: str | Path | Mapping[str, Any], **overrides: Any) -> Result:
    """Predict a scenario on the simulator's virtual clock, as `python -m harness predict`
    does: `gpu="H100-SXM"`, `model=...`, `tp=2`, `max_num_seqs=64`, scenario values as for
    `run` (`sim__max_num_batched_tokens=4096`). Returns the Result, written (with its journal)
    to `out`, default results/<name>-predict-<gpu>-<time>.json; it says it is a prediction
    (`data["prediction"]`, target.kind "prediction"). Seconds of CPU, no server, no event loop."""
    from harness.orchestrate.predict import PredictArgs
    from harness.orchestrate.predict import predict as _predict
    from harness.orchestrate.run import write_result_html

    options, sets = _split_overrides(overrides, PREDICT_OPTIONS, "harness.predict")
    for key in ("tp", "max_num_seqs"):
        if options.get(key) is not None:
            options[key] = str(options[key])
    args = PredictArgs(scenario=scenario_source(scenario), sets=sets, **options)
    data, out = _predict(args)
    if args.html is not None:
        write_result_html(data, out, args.html)
    return Result(data, out)
