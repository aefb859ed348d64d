"""Agent sessions in the result: each session's time split into model, tool and sub-agent time,
why sessions ended, and TTFT, TTFO and time to the first tool call by step.

`agent_block(c, rows, layout)` reads the records' `session` and `turn` columns (a request's
position in its session's layout, `harness.workload.agent`) and the layout the plan kept
(`plan.workload.agent`: steps, children, after_step, child_steps). Definitions, per session that
ended in order (a final answer, or the step limit):

- agent time = the parent's last token - its first step's intended time;
- tool time = the sum, over the parent's later steps, of (intended - the previous step's last
  token): the tool waits the plan drew;
- sub-agent time = the same gap after the step that fanned out (the children's wall time, up to
  the join);
- model time = agent time - tool time - sub-agent time = the sum of the parent's steps'
  (last token - intended): queueing, prefill and decode as the client saw them.

A session ends by a `final_answer` (an answer without a tool call), the `step_limit` (its last
step still called a tool), a `failed` step (no later step is sent), or `stopped` (the run ended
before its next step). By step: requests, the share answered with a tool call, TTFT, TTFO (first
answer token: only answers that have one), time to the first tool-call token, mean prompt tokens
and the median TTFT per 1,000 prompt tokens (with prefix caching the history is found in the
cache, so that falls step after step). `cached_share` is the share of the step's prompt tokens
the server reported cached (`usage.prompt_tokens_details.cached_tokens`, harness.analysis.
prefix_cache): null where the server reports none (the run-level hit rate is then in `server`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.analysis.prefix_cache import reports_cached
from harness.record.metrics import Columns, exact_stats_ms, first_of_channel
from harness.record.records import Channel

END_REASONS = ("final_answer", "step_limit", "failed", "stopped")
PER_PROMPT_TOKENS = 1000  # TTFT is given per this many prompt tokens
_KEYS = ("count", "mean", "p50", "p90", "p99", "max")


def _stats(v: np.ndarray) -> dict[str, Any]:
    s = exact_stats_ms(v.astype(np.float64))
    return {k: s[k] for k in _KEYS}


def _by_step(
    step: np.ndarray,
    ok: np.ndarray,
    ttft: np.ndarray,
    ttfo: np.ndarray,
    tool: np.ndarray,
    prompt: np.ndarray,
    cached: np.ndarray | None,
) -> list[dict[str, Any]]:
    """`cached`: the server's cached prompt tokens per request (-1: none sent), None when the
    run reported none."""
    out = []
    for t in np.unique(step).tolist():
        at = step == t
        good = at & ok & (ttft >= 0)
        p = prompt[good]
        per_tok = ttft[good][p > 0] / p[p > 0] * PER_PROMPT_TOKENS / 1e6
        done = int((at & ok).sum())
        out.append(
            {
                "step": int(t),
                "requests": int(at.sum()),
                "completed": done,
                "tool_call_share": float((at & ok & (tool >= 0)).sum() / done) if done else None,
                "ttft_ms": _stats(ttft[good]),
                "ttfo_ms": _stats(ttfo[at & ok & (ttfo >= 0)]),
                "ttft_tool_ms": _stats(tool[at & ok & (tool >= 0)]),
                "prompt_tokens_mean": float(p.mean()) if len(p) else None,
                "ttft_ms_per_1k_prompt_tokens_p50": (
                    float(np.percentile(per_tok, 50, method="inverted_cdf"))
                    if len(per_tok)
                    else None
                ),
                "cached_share": _cached_share(prompt[good], cached[good])
                if cached is not None
                else None,
            }
        )
    return out


def _cached_share(prompt: np.ndarray, cached: np.ndarray) -> float | None:
    """Cached over prompt tokens (a request without a count counts 0, as in prefix_cache)."""
    total = int(prompt.sum())
    return float(np.maximum(cached, 0).sum() / total) if total > 0 else None


def agent_block(c: Columns, rows: np.ndarray, layout: dict[str, Any]) -> dict[str, Any] | None:
    """The `agents` entry of a result block (None when its rows hold no session)."""
    if c.session is None or c.turn is None:
        return None
    final = rows & ~c.retried & (c.session >= 0)
    if not final.any():
        return None
    steps = int(layout.get("steps") or 1)
    child_steps = int(layout.get("child_steps") or 0)
    after = int(layout.get("after_step") or 0)
    idx = np.flatnonzero(final)
    sid, pos = c.session[idx], c.turn[idx]
    ok = c.ok[idx]
    sent, intended = c.sent[idx], c.intended[idx]
    last, first = c.last()[idx], c.first()[idx]
    answer = first_of_channel(c, Channel.ANSWER)[idx]
    tool_first = first_of_channel(c, Channel.TOOL)[idx]
    ttft = np.where(ok & (first >= 0), first - sent, -1)
    ttfo = np.where(ok & (answer >= 0), answer - sent, -1)
    ttft_tool = np.where(ok & (tool_first >= 0), tool_first - sent, -1)
    prompt = c.prompt_tokens[idx]
    cached = c.cached[idx] if reports_cached(c) and c.cached is not None else None
    parent = pos < steps
    child_step = (pos - steps) % child_steps if child_steps else np.zeros_like(pos)

    ends, steps_sent, times = _sessions(
        sid, pos, ok, intended, last, ttft_tool, parent, steps, after
    )
    agent_ns, model_ns, tool_ns, sub_ns = times

    def by_step(mask: np.ndarray, step: np.ndarray) -> Any:
        return _by_step(
            step[mask],
            ok[mask],
            ttft[mask],
            ttfo[mask],
            ttft_tool[mask],
            prompt[mask],
            None if cached is None else cached[mask],
        )

    out: dict[str, Any] = {
        "sessions": len(steps_sent),
        "requests": int(len(idx)),
        "parent_requests": int(parent.sum()),
        "child_requests": int((~parent).sum()),
        "ended": ends,
        "steps_per_session_mean": float(np.mean(steps_sent)) if steps_sent else None,
        "steps_per_session_max": int(max(steps_sent)) if steps_sent else None,
        "agent_time_ms": _stats(np.asarray(agent_ns)),
        "model_time_ms": _stats(np.asarray(model_ns)),
        "tool_time_ms": _stats(np.asarray(tool_ns)),
        "subagent_time_ms": _stats(np.asarray(sub_ns)),
        "model_time_share": (float(sum(model_ns) / sum(agent_ns)) if sum(agent_ns) else None),
        "by_step": by_step(parent, pos),
        "child_by_step": by_step(~parent, child_step),
    }
    return out


def _sessions(
    sid: np.ndarray,
    pos: np.ndarray,
    ok: np.ndarray,
    intended: np.ndarray,
    last: np.ndarray,
    ttft_tool: np.ndarray,
    parent: np.ndarray,
    steps: int,
    after: int,
) -> tuple[dict[str, int], list[int], tuple[list[int], ...]]:
    """Session by session (its parent's requests in step order): how it ended, the steps it
    sent, and for each one that ended its time (ns) as the agent's whole, the model's, the
    tools' and the subagents' (the gaps after the step that forks, in a session with children)."""
    ends = dict.fromkeys(END_REASONS, 0)
    agent_ns: list[int] = []
    model_ns: list[int] = []
    tool_ns: list[int] = []
    sub_ns: list[int] = []
    steps_sent: list[int] = []
    has_children = set(sid[~parent].tolist())
    order = np.lexsort((pos, sid))
    p_order = order[parent[order]]
    ids, starts = np.unique(sid[p_order], return_index=True)
    bounds = [*starts.tolist(), len(p_order)]
    for n, s in enumerate(ids.tolist()):
        r = p_order[bounds[n] : bounds[n + 1]]
        steps_sent.append(len(r))
        z = r[-1]
        if not ok[z]:
            ends["failed"] += 1
            continue
        if ttft_tool[z] < 0:
            ends["final_answer"] += 1
        elif pos[z] == steps - 1:
            ends["step_limit"] += 1
        else:
            ends["stopped"] += 1
            continue
        gaps = intended[r[1:]] - last[r[:-1]]
        forked = (pos[r[:-1]] == after) & (s in has_children)
        agent_ns.append(int(last[z] - intended[r[0]]))
        tool_ns.append(int(gaps[~forked].sum()))
        sub_ns.append(int(gaps[forked].sum()))
        model_ns.append(int((last[r] - intended[r]).sum()))
    return ends, steps_sent, (agent_ns, model_ns, tool_ns, sub_ns)
