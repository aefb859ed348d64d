"""The result document: built from a journal, the one contract between measuring and viewing
(its shape: `harness.analysis.result_types`, published as harness/schema/result.schema.json).

`build_result(journal)` is the only way a result is made, for a finished run as for a killed
one (`report JOURNAL --out R.json`), so the two can never disagree. Views (`report`, `compare`,
`sweep`, `capacity`, HTML) read result JSON files and never the engine's memory.

Schema changes bump SCHEMA_VERSION; README.md documents the fields.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from harness.analysis.accounting import account, account_sentence
from harness.analysis.agents import agent_block
from harness.analysis.clock import clock_block, model_columns, sim_speedup
from harness.analysis.embeddings import embeddings_block
from harness.analysis.failures import error_messages, in_phases, retry_counts, status_series
from harness.analysis.prefix_cache import prefix_cache_block, reports_cached
from harness.analysis.result_file import read_json_file
from harness.analysis.result_health import client_warnings as _warnings
from harness.analysis.result_health import prediction_warnings, wall_stats
from harness.analysis.result_health import simulator_warnings as _simulator_warnings
from harness.analysis.scale_out import scale_out_block
from harness.analysis.schema_check import first_problem
from harness.analysis.server_metrics import server_limits, summarise_server_metrics
from harness.analysis.server_view import build_server_view
from harness.analysis.sessions import session_block
from harness.analysis.workload_view import build_workload_view
from harness.catalogue import SloLimit
from harness.errors import ConfigError
from harness.record import hist
from harness.record.journal import FailedAttempt, Journal, check_header, read_journal
from harness.record.journal_vet import vet_journal
from harness.record.metrics import (
    Columns,
    channel_gaps_ns,
    exact_stats_ms,
    latency_histograms,
    latency_stats,
    meets_per_request_slos,
    output_lengths,
    request_counts,
    slo_verdicts,
    timeseries,
    token_counting,
    token_gaps_ns,
    token_summary,
    window_throughput,
)
from harness.safe_write import write_file

SCHEMA_VERSION = 9
# Versions load_result reads: 2 only added keys to 1 (server_view, request_adaptations,
# error_messages, output_lengths, plan.workload, ...), and every view reads them with defaults.
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)


def _slos(header: dict[str, Any]) -> list[SloLimit]:
    return [
        SloLimit(s["name"], s["metric"], s["stat"], s["limit_s"]) for s in header.get("slo", [])
    ]


def _phase_windows(j: Journal, end_ns: int, k: float = 1.0) -> list[tuple[int, int]]:
    """Each phase's (start, end) in ns, times k (model time: harness.analysis.clock)."""
    phases = j.header["phases"]
    if j.end is not None and j.end.get("phase_starts_ns"):
        starts = [round(x * k) for x in j.end["phase_starts_ns"]]
        ends = [round(x * k) for x in j.end["phase_ends_ns"]]
    else:
        # Killed run: the plan's schedule, cut at the last thing observed.
        starts, ends, t = [], [], 0
        for p in phases:
            d = int((p.get("planned_duration_s") or 0) * 1e9 * k)
            starts.append(min(t, end_ns))
            ends.append(min(t + d, end_ns))
            t += d
    windows = [(int(s), int(e)) for s, e in zip(starts, ends, strict=False)]
    if windows:
        s, e = windows[-1]
        windows[-1] = (s, max(e, end_ns))  # the drain belongs to the last phase
    return windows


def _block(
    c: Columns,
    rows: np.ndarray,
    windows: list[tuple[int, int]],
    good: np.ndarray,
    slos: list[SloLimit],
    fails: list[FailedAttempt],
    agent: dict[str, Any] | None = None,
    cached_reported: bool = False,
    batch: int | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """A phase's (or the summary's) block; `batch`: an embeddings run's inputs per request
    (its `embeddings` block: latency and rates without token stamps), None for generation."""
    gaps = token_gaps_ns(c, rows)  # once per block: the costliest per-token step
    by_channel = channel_gaps_ns(c, rows, gaps)
    stats = latency_stats(c, rows, gaps, by_channel)
    counts, errors = request_counts(c, rows)
    counts.update(retry_counts(fails))
    final = int(counts["planned_or_due"]) or 1
    tokens = token_summary(c, rows)
    tokens.update(token_counting(c, rows))
    tokens["output_lengths"] = output_lengths(c, rows)
    emb = embeddings_block(c, rows, windows, batch) if batch is not None else None
    # an embeddings run's aggregate SLOs on E2E read its own latency (no token stamps)
    slo_stats = stats if emb is None else {**stats, **emb["latency_ms"]}
    block = {
        "requests": counts,
        "throughput": window_throughput(c, windows, good),
        "latency_ms": stats,
        "slo": slo_verdicts(c, rows, slo_stats, slos),
        "errors": errors,
        "error_share": {k: v / final for k, v in errors.items()},
        "error_messages": error_messages(fails),
        "tokens": tokens,
        "prefix_cache": prefix_cache_block(c, rows, cached_reported),
    }
    if emb is not None:
        block["embeddings"] = emb
    if agent is not None:  # agent runs (harness.analysis.agents): steps, not turns
        agents = agent_block(c, rows, agent)
        if agents is not None:
            block["agents"] = agents
    else:
        sessions = session_block(c, rows)
        if sessions is not None:  # multi-turn runs only (harness.analysis.sessions)
            block["sessions"] = sessions
    hists = {k: hist.encode(h) for k, h in latency_histograms(c, rows, gaps, by_channel).items()}
    return block, hists


def embeddings_batch(header: dict[str, Any]) -> int | None:
    """An embeddings run's inputs per request (`workload.batch`, default 1); None otherwise."""
    if (header.get("target") or {}).get("endpoint") != "embeddings":
        return None
    wl = (header.get("scenario") or {}).get("workload") or {}
    b = wl.get("batch", 1) if isinstance(wl, dict) else 1
    return b if type(b) is int and b >= 1 else 1


@dataclass(frozen=True)
class _Inputs:
    """What every block of a result (a phase's, the summary's) is computed from."""

    c: Columns
    good: np.ndarray  # requests that met every per-request SLO
    slos: list[SloLimit]
    fails: list[FailedAttempt]
    agent: dict[str, Any] | None  # the plan's agent workload, when it is one
    cached_reported: bool
    batch: int | None  # an embeddings run's inputs per request

    def block(
        self, rows: np.ndarray, windows: list[tuple[int, int]], phases: list[int]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        return _block(
            self.c,
            rows,
            windows,
            self.good,
            self.slos,
            in_phases(self.fails, phases),
            self.agent,
            self.cached_reported,
            self.batch,
        )


def build_result(j: Journal, journal_path: str | None = None) -> dict[str, Any]:
    """The full result document from a journal (finished or torn)."""
    h = j.header
    k = sim_speedup(h)  # model seconds per wall second: every time below is the model's
    vetting = vet_journal(j)  # impossible records set aside before any figure is computed
    c = model_columns(j)
    observed_end = max(
        [int(c.end.max()) if c.n else 0, int(c.stamps.max()) if len(c.stamps) else 0]
    )
    end_ns = round(int(j.end["end_ns"]) * k) if j.end is not None else observed_end
    windows = _phase_windows(j, end_ns, k)
    inputs = _inputs(j, c)
    phases_out, hists = _phase_blocks(h, windows, inputs)
    summary, summary_windows = _summary_block(h, windows, phases_out, hists, inputs)
    wall_s = end_ns / 1e9 / k  # the wall clock's: the client's CPU share and health
    sim_info = (j.end or {}).get("simulator")
    if sim_info:  # when it fell behind stays in the journal (compare_health reads it there)
        sim_info = {k: v for k, v in sim_info.items() if k != "lag_ns"}
    accounting = account(h, j.end, c, vetting.aside)  # a record set aside is still a record
    doubt = vetting.sentence()
    complete, stop_reason = _end_state(j, account_sentence(accounting), doubt)
    server, server_view = _server_blocks(j, summary, summary_windows, k)
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "complete": complete,
        "stop_reason": stop_reason,
        "scenario": h["scenario"],
        "scenario_name": h["scenario_name"],
        "target": {**h["target"], **({"simulator": sim_info} if sim_info else {})},
        "environment": h["environment"],
        "started_at": h["started_at"],
        "duration_s": end_ns / 1e9,
        "plan": h.get("plan", {}),
        "summary": {"name": "summary", "warmup": False, **summary},
        "phases": phases_out,
        "histograms": hists,
        "timeseries": {**timeseries(c, end_ns), "http_429": status_series(c, "http_429", end_ns)},
        "client": _client_block(j, phases_out, summary, sim_info, wall_s, k),
        "server_metrics": server,
        "server_view": server_view,
        "files": {
            "journal": journal_path,
            "journal_torn_lines": j.torn_lines,
            "journal_duplicate_lines": j.duplicate_lines,
        },
        "accounting": accounting,
        "trustworthy": doubt is None,  # schema 8: every record possible (journal_vet)
        "impossible_records": vetting.block(),
    }
    for extra in ("options", "prediction"):  # prediction: a `predict` result (its header's)
        if extra in h:
            result[extra] = h[extra]
    result["workload_view"] = build_workload_view(c, h, windows, end_ns)
    clock = clock_block(k, wall_s)
    if clock is not None:
        result["clock"] = clock
    result["request_adaptations"] = list(h.get("request_adaptations") or [])
    result["output_lengths_forced"] = lengths_forced(h)
    if j.events.get("clock"):  # Ray runs: each worker's clock offset against the driver, skew
        result["client"]["clock"] = {k: v for k, v in j.events["clock"][-1].items() if k != "t"}
    clocks = j.events.get("clock") or []  # schema 9: the workers, and what each one did
    result["client"]["scale_out"] = scale_out_block(
        h.get("options") or {}, j.end, clocks[-1] if clocks else None
    )
    return result


def _inputs(j: Journal, c: Columns) -> _Inputs:
    h = j.header
    slos = _slos(h)
    agent = ((h.get("plan") or {}).get("workload") or {}).get("agent")
    return _Inputs(
        c,
        meets_per_request_slos(c, [s for s in slos if s.stat is None]),
        slos,
        j.failed_attempts(),
        agent if isinstance(agent, dict) else None,
        reports_cached(c),
        embeddings_batch(h),
    )


def _phase_blocks(
    h: dict[str, Any], windows: list[tuple[int, int]], inputs: _Inputs
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(a block per phase, the histograms: a set per phase)."""
    phases_out: list[dict[str, Any]] = []
    hists: dict[str, Any] = {
        "unit": "us",
        "lowest": hist.LOWEST_US,
        "highest": hist.HIGHEST_US,
        "significant_digits": hist.SIGNIFICANT_DIGITS,
        "phases": {},
    }
    for i, spec in enumerate(h["phases"]):
        win = [windows[i]] if i < len(windows) else []
        block, hh = inputs.block(inputs.c.phase == i, win, [i])
        phases_out.append(
            {
                "name": spec["name"],
                "index": i,
                "warmup": bool(spec["warmup"]),
                "window_s": [w / 1e9 for w in win[0]] if win else None,
                "arrival": spec.get("arrival"),
                **block,
            }
        )
        hists["phases"][spec["name"]] = hh
    return phases_out, hists


_SUMMARY_KEYS = (  # a phase block's keys that a summary holds
    "requests",
    "throughput",
    "latency_ms",
    "slo",
    "errors",
    "error_share",
    "error_messages",
    "tokens",
    "prefix_cache",
    "sessions",
    "agents",
    "embeddings",
)


def _summary_block(
    h: dict[str, Any],
    windows: list[tuple[int, int]],
    phases_out: list[dict[str, Any]],
    hists: dict[str, Any],
    inputs: _Inputs,
) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """(the measured phases' block, their windows); its histograms go in `hists["summary"]`."""
    measured = [i for i, s in enumerate(h["phases"]) if not s["warmup"]]
    summary_windows = [windows[i] for i in measured if i < len(windows)]
    summary: dict[str, Any]
    if (
        len(measured) == 1
        and len(phases_out) > measured[0]
        and measured[0] < len(windows)
        and summary_windows == [windows[measured[0]]]
    ):
        # One measured phase: the summary is that phase's block (same rows, same window).
        ph = phases_out[measured[0]]
        summary = {key: ph[key] for key in _SUMMARY_KEYS if key in ph}
        hh = hists["phases"][ph["name"]]
    else:
        summary, hh = inputs.block(np.isin(inputs.c.phase, measured), summary_windows, measured)
    hists["summary"] = hh
    return summary, summary_windows


def _end_state(j: Journal, unbalanced: str | None, doubt: str | None) -> tuple[bool, str | None]:
    """(complete, the stop reason): complete only when the run ended so, its requests balance
    and every record was possible; the reason says what stopped it or why it is doubted."""
    complete = bool(j.end and j.end.get("complete")) and unbalanced is None and doubt is None
    stop_reason = (
        (j.end or {}).get("stop_reason")
        if j.end
        else "the journal has no end line: the run was killed"
    )
    for why in (unbalanced, doubt):
        if why is not None:
            stop_reason = f"{stop_reason}; {why}" if stop_reason else why
    return complete, stop_reason


def _server_blocks(
    j: Journal, summary: dict[str, Any], summary_windows: list[tuple[int, int]], k: float
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the server's /metrics summed up, the server view: its histograms beside the client's
    latency over the measured window)."""
    h = j.header
    server = summarise_server_metrics(
        j.events.get("server_metrics", []),
        (j.end or {}).get("t0_wall_s"),
        server_limits(h["target"]),
        k,
    )
    if not j.events.get("server_metrics"):
        return server, None
    measured_window = (  # wall-clock run seconds, as the /metrics polls are stamped
        (
            min(w[0] for w in summary_windows) / 1e9 / k,
            max(w[1] for w in summary_windows) / 1e9 / k,
        )
        if summary_windows
        else None
    )
    server_view = build_server_view(
        j.events["server_metrics"],
        (j.end or {}).get("t0_wall_s"),
        measured_window,
        {**summary["latency_ms"], "e2e": summary["embeddings"]["latency_ms"]["e2e"]}
        if "embeddings" in summary
        else summary["latency_ms"],
        k,
    )
    return server, server_view


def _client_block(
    j: Journal,
    phases_out: list[dict[str, Any]],
    summary: dict[str, Any],
    sim_info: dict[str, Any] | None,
    wall_s: float,
    k: float,
) -> dict[str, Any]:
    """The harness's own health: send and event-loop lag, CPU, warnings (in wall time)."""
    h = j.header
    loop_lag = exact_stats_ms(
        np.asarray(j.end.get("loop_lag_ns", []) if j.end else [], dtype=np.float64)
    )
    cpu_s = j.end.get("cpu_s") if j.end else None
    cpu_share = (cpu_s / wall_s) if (cpu_s is not None and wall_s > 0) else None
    return {
        "send_lag_ms": wall_stats(summary["latency_ms"]["send_lag"], k),  # as loop lag
        "loop_lag_ms": loop_lag,
        "cpu_s": cpu_s,
        "cpu_share_of_one_core": cpu_share,
        "warnings": _warnings(phases_out, h, loop_lag, cpu_share, k)
        + _simulator_warnings(sim_info, wall_s)
        + prediction_warnings(h.get("prediction")),
    }


def lengths_forced(header: dict[str, Any]) -> bool:
    """Whether requests asked for exactly their planned length (`ignore_eos` as sent: the
    scenario's, unless the target refused it)."""
    sent = (header.get("options") or {}).get("ignore_eos")
    if isinstance(sent, bool):
        return sent
    wl = (header.get("scenario") or {}).get("workload") or {}
    return bool(wl.get("ignore_eos", True))


def dump_result(result: dict[str, Any], path: Path) -> None:
    """Write the result atomically (harness.safe_write: no link followed, no device replaced)."""
    write_file(path, orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


# The published schema (harness.schema.RESULT_SCHEMA_PATH; a file read here, not a module
# imported: harness.schema sits above analysis, as `python -m harness.schema` reads result_types).
RESULT_SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema" / "result.schema.json"


@functools.cache
def result_schema() -> dict[str, Any]:
    """The shipped JSON Schema of a result document (read once)."""
    schema: dict[str, Any] = orjson.loads(RESULT_SCHEMA_FILE.read_bytes())
    return schema


def check_result(doc: Any, where: str, rebuilt: bool = False) -> dict[str, Any]:
    """`doc`, if it is a result of a readable version that conforms to the shipped schema; else
    ConfigError, one line: `where` (the file), the first failing path, what is wrong there.
    `rebuilt`: `doc` was built from the journal `where` (its header had the wrong shape)."""
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ConfigError(where, "schema_version", "missing: this is not a harness result file")
    if doc["schema_version"] not in READABLE_SCHEMA_VERSIONS or isinstance(
        doc["schema_version"], bool
    ):
        readable = ", ".join(str(v) for v in READABLE_SCHEMA_VERSIONS)
        raise ConfigError(
            where,
            "schema_version",
            f"is {doc['schema_version']!r}; this harness reads versions {readable}",
        )
    problem = first_problem(doc, result_schema())
    if problem is not None:
        key, what = problem
        source = "the result rebuilt from this journal" if rebuilt else "this file"
        raise ConfigError(
            where,
            key,
            f"{what} ({source} does not match the result schema, harness/schema/result.schema.json)",
        )
    return doc


def rebuild_result(path: Path) -> tuple[Journal, dict[str, Any]]:
    """A journal read back and the result built from it, checked as `load_result` checks a
    file. Raises JournalError (a ValueError: no or a damaged header), ConfigError (a result
    that does not match the schema), OSError."""
    j = read_journal(path)
    check_header(j, path)
    return j, check_result(build_result(j, str(path)), str(path), rebuilt=True)


def load_result(path: str | Path) -> dict[str, Any]:
    """Read a result JSON and check it against the shipped schema; raises ConfigError (one line,
    exit 2 in the CLI) for a missing, unreadable, foreign, damaged or hand-broken file."""
    p = Path(path)  # read_json_file: not a regular file, too large, not `{`: refused unread
    return check_result(read_json_file(p), str(p))
