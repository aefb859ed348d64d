"""Where a scenario's prompts and lengths come from: the `[workload]` keys beyond the length
distributions (`dataset`, `prefix_groups`, `conversation`), and which lengths the phases still need.

The scenario loader calls `parse_sources` for the tables and `settle_lengths` once the phases
are known. The rules:

- A `dataset` sets every request's prompt (and, unless `output_tokens` is given, its output
  length from the row's answer); `prompt_tokens` is then not allowed.
- A trace phase takes the lengths its file has; a synthetic phase draws from `prompt_tokens`
  and `output_tokens`.
- A length distribution left out is the empirical distribution of the dataset's (or first
  trace's) lengths: what the planners and any synthetic phase of the scenario then use. Left
  out with nothing to take it from, it is required.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.validate import Table
from harness.errors import ConfigError
from harness.workload.agent import parse_agent
from harness.workload.conversation import Conversation, parse_conversation
from harness.workload.datasets import Dataset, parse_dataset
from harness.workload.lengths import Empirical, Fixed, LengthDist
from harness.workload.prefixes import PrefixGroups, parse_prefix_groups
from harness.workload.prompts import PromptMaker
from harness.workload.trace import Trace


@dataclass(frozen=True, slots=True)
class Sources:
    dataset: Dataset | None = None
    prefix_groups: PrefixGroups | None = None
    # multi-turn sessions (harness.workload.conversation), agent sessions among them
    conversation: Conversation | None = None


def parse_sources(
    wt: Table, base_dir: Path, tokenizer: str | None, has_prompt: bool, has_output: bool
) -> Sources:
    """Read `[workload] dataset` and `prefix_groups` (ConfigError on a bad value or file)."""
    dataset = None
    dt = wt.table("dataset", None)
    if dt is not None:
        if has_prompt:
            wt.fail(
                "prompt_tokens",
                "the dataset sets the prompts (and their lengths); remove prompt_tokens",
            )
        dataset = parse_dataset(
            dt,
            base_dir,
            PromptMaker(tokenizer),
            output_from_answers=not has_output,
            want_turns=wt.has("conversation"),
        )
    groups = None
    gt = wt.table("prefix_groups", None)
    if gt is not None:
        if dataset is not None:
            wt.fail(
                "prefix_groups",
                "a dataset's prompts are real text; prefix_groups applies to synthetic prompts",
            )
        groups = parse_prefix_groups(gt, base_dir)
    conversation = None
    ct = wt.table("conversation", None)
    if ct is not None:
        if groups is not None:
            wt.fail(
                "conversation", "sessions share their own history as a prefix; remove prefix_groups"
            )
        conversation = parse_conversation(ct, base_dir, dataset is not None)
    at = wt.table("agent", None)
    if at is not None:
        if ct is not None:
            wt.fail("agent", "an agent session is a conversation of its own; remove conversation")
        if dataset is not None or groups is not None:
            wt.fail(
                "agent",
                "agent sessions send synthetic tasks and tool results; remove "
                + ("dataset" if dataset is not None else "prefix_groups"),
            )
        agent, tool_time = parse_agent(at, base_dir)
        conversation = Conversation(Fixed(agent.requests), tool_time, "full", agent=agent)
    return Sources(dataset, groups, conversation)


def empirical(values: np.ndarray) -> Empirical:
    """The distribution of these lengths: each distinct value, weighted by how often it occurs."""
    vals, counts = np.unique(values, return_counts=True)
    return Empirical(tuple(int(v) for v in vals), tuple(float(c) for c in counts))


def settle_lengths(
    prompt: LengthDist | None,
    output: LengthDist | None,
    sources: Sources,
    arrivals: Sequence[Any],
    where: str,
) -> tuple[LengthDist, LengthDist]:
    """The workload's prompt and output distributions, filled in from the dataset or a trace
    where the scenario left them out; ConfigError (workload.prompt_tokens: is required) when a
    phase needs one that nothing provides."""
    traces = [a for a in arrivals if isinstance(a, Trace)]
    ds = sources.dataset
    for name, given in (("prompt_tokens", prompt), ("output_tokens", output)):
        if given is not None:
            continue
        found: np.ndarray | None = None
        if ds is not None:
            found = (
                ds.table.prompt_tokens
                if name == "prompt_tokens"
                else (ds.table.output_tokens if ds.output_from_answers else None)
            )
        if found is None:
            found = next(
                (getattr(t.rows, name) for t in traces if getattr(t.rows, name) is not None), None
            )
        if found is None:
            raise ConfigError(
                where,
                f"workload.{name}",
                "is required (a length distribution such as "
                '{ dist = "fixed", value = 128 }): a phase draws its lengths from it',
            )
        if name == "prompt_tokens":
            prompt = empirical(found)
        else:
            output = empirical(found)
    assert prompt is not None and output is not None
    return prompt, output
