"""What a plan says about its workload's sources: the `Plan.workload` the result keeps (traces
with their replayed curves, sessions, the dataset, prefix groups, the prefix reuse the plan
implies) and the `Plan.notes` lines the run prints. Pure: reads the scenario and the drawn
phases, draws nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.workload.arrivals import Trace
from harness.workload.conversation import Conversation
from harness.workload.curves import bin_width_s, counts_per_bin
from harness.workload.phase_plan import PhasePlan
from harness.workload.prefixes import BlockPrompts, GroupPrompts, ReuseCounter
from harness.workload.scenario import Scenario


def describe_workload(
    scn: Scenario,
    phases: Sequence[PhasePlan],
    dataset_passes: int | None,
    group_prefix: np.ndarray | None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """What the result keeps about the workload's sources (plan.workload) and what the run
    prints. `dataset_passes`: the dataset sampler's passes (None: no dataset); `group_prefix`:
    each prefix group's drawn prefix length (None: no groups)."""
    info: dict[str, Any] = {}
    notes: list[str] = []
    src = scn.workload.sources
    from_dataset = src.dataset is not None
    reuse = _reuse(scn, phases)
    traces: dict[str, Any] = {}
    for ph, pp in zip(scn.phases, phases, strict=True):
        if isinstance(ph.arrival, Trace):
            traces[ph.name] = _trace_entry(ph.arrival, pp)
            notes.append(_trace_note(ph.name, ph.arrival, pp, from_dataset))
    conv = src.conversation
    if conv is not None:
        info.update(_conversation(conv, phases, from_dataset, notes))
    if traces:
        info["traces"] = traces
    if src.dataset is not None and dataset_passes is not None:
        ds = dict(src.dataset.info)
        ds["passes"] = dataset_passes
        info["dataset"] = ds
        notes.append(_dataset_note(src.dataset.format, src.dataset.path, ds))
    groups = src.prefix_groups
    if groups is not None and group_prefix is not None:
        info["prefix_groups"] = {
            "groups": groups.groups,
            "share": groups.share,
            "prefix_tokens_dist": str(groups.tokens),
            "prefix_tokens_mean": float(group_prefix.mean()),
        }
    implied = reuse.result()
    info["implied_prefix_reuse"] = implied
    if implied["reused_tokens"]:
        notes.append(
            f"implied prefix reuse: {100 * implied['share']:.1f} % of {implied['prompt_tokens']:,} planned "
            "prompt tokens were sent before in the run (an unbounded cache's hit share)"
        )
    return info, tuple(notes)


def _reuse(scn: Scenario, phases: Sequence[PhasePlan]) -> ReuseCounter:
    """The prefix reuse the planned prompts imply (system prompt, trace blocks, groups)."""
    reuse = ReuseCounter()
    n_system = scn.workload.system_prompt_tokens
    for pp in phases:
        reuse.prompt_tokens += int(pp.prompt_tokens.sum()) + n_system * pp.count
        reuse.add_system(pp.count, n_system)
        if isinstance(pp.prompts, BlockPrompts):
            reuse.add_blocks(pp.prompts, pp.prompt_tokens)
        elif isinstance(pp.prompts, GroupPrompts):
            reuse.add_groups(pp.prompts)
    return reuse


def _trace_entry(t: Trace, pp: PhasePlan) -> dict[str, Any]:
    """A trace phase in the result: the trace's info, the rows replayed, their log types and
    failures, and the replayed arrival curve."""
    entry = dict(t.info)
    entry["requests_planned"] = pp.count
    rows = t.rows
    if rows.log_type is not None:
        codes, counts = np.unique(rows.log_type[: pp.count], return_counts=True)
        entry["log_types"] = {
            rows.log_types[c]: int(k) for c, k in zip(codes.tolist(), counts.tolist(), strict=True)
        }
    if rows.failed is not None:
        entry["failed_rows"] = int(rows.failed[: pp.count].sum())
    span = (pp.duration_s or float(rows.offsets_s[pp.count - 1])) if pp.count else 0.0
    b = bin_width_s(span)
    entry["curve"] = {
        "bin_s": b,
        "trace_bin_s": b / t.time_scale,
        "requests": counts_per_bin(rows.offsets_s[: pp.count], b, span).tolist(),
    }
    return entry


def _trace_note(name: str, t: Trace, pp: PhasePlan, from_dataset: bool) -> str:
    how = "detected from its first line" if t.info["format_detected"] else "as configured"
    window = f"from {t.info['window_start_s']:g} s" + (
        f" for {t.info['window_duration_s']:g} s" if t.info["window_duration_s"] is not None else ""
    )
    rate = t.info["replay_mean_rate_per_s"]
    return (
        f"phase {name}: trace {t.path} read as {t.format} ({how}); {pp.count:,} of "
        f"{t.info['rows_read']:,} rows replayed, window {window}, time_scale {t.time_scale:.4g}"
        + (f", mean {rate:.3g}/s" if rate is not None else "")
        + ("; prompts from the dataset, not the trace's lengths" if from_dataset else "")
    )


def _conversation(
    conv: Conversation, phases: Sequence[PhasePlan], from_dataset: bool, notes: list[str]
) -> dict[str, Any]:
    """The sessions' part of the result (`conversation`, and `agent` for agent sessions); its
    line goes to `notes`."""
    sessions = {
        pp.name: {"sessions_planned": pp.sessions.count, "requests_planned": pp.count}
        for pp in phases
        if pp.sessions is not None
    }
    info: dict[str, Any] = {
        "conversation": {
            "turns_dist": None if conv.turns is None else str(conv.turns),
            "think_time": str(conv.think),
            "history": conv.history,
            "last_n": conv.last_n if conv.history == "last_n" else None,
            "turns_from_dataset": from_dataset,
            "phases": sessions,
        }
    }
    if conv.agent is not None:
        info["agent"] = {**conv.agent.info(), "tool_time": str(conv.think)}
    notes.append(
        ("agent sessions: " if conv.agent is not None else "multi-turn sessions: ")
        + conv.describe()
        + "; "
        + ", ".join(
            f"phase {k}: {v['sessions_planned']:,} sessions, {v['requests_planned']:,} requests"
            for k, v in sessions.items()
        )
    )
    return info


def _dataset_note(fmt: str, path: object, ds: dict[str, Any]) -> str:
    return (
        f"prompts: {fmt} dataset {path}, {ds['usable_rows']:,} of "
        f"{ds['rows']:,} rows usable"
        + (
            f" ({', '.join(f'{v} {k}' for k, v in ds['skipped_rows'].items())})"
            if ds["skipped_rows"]
            else ""
        )
        + f", {ds['order']} order {'with' if ds['replacement'] else 'without'} replacement; output "
        f"lengths from {ds['output_tokens_from']}"
    )
