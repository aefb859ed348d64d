"""The run's account: every request the plan asked for is in the journal exactly once.

The rule. Each engine (one per shard: the process, each worker, each Ray task) counts, per phase,
the requests it took up and the final records it emitted (`RunOutcome.accounts`, in the
journal's end line). A request taken up always ends in exactly one final record -- sent, not
sent, cancelled or failed, an exception in the harness included (`internal`). The result holds,
per phase:

- the final records in the journal against what the shards took up (records lost between an
  engine and the journal, or written twice, show here);
- what each shard took up against what it emitted (a request that died without a record);
- for a run that ended in order, what was taken up against the plan (a single-turn phase with a
  planned count takes up every request; a multi-turn session ends at a failed turn, so its
  later turns are never taken up, and a duration-bound closed loop plans no count).

A record the journal's vetting set aside (impossible, or suspect: harness.record.journal_vet) is
still its request's one record: it is counted here (`aside`), though no figure is computed from it.

A run whose records differ from this is not complete: `complete` is false, `stop_reason` and
`accounting.problems` say how many are missing (or extra) where, and `run` exits 1. A journal
without an end line (a killed run) has no account to hold against: it is incomplete anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.record.metrics import Columns

MAX_PROBLEMS = 10  # sentences kept in accounting.problems


def account(
    header: dict[str, Any],
    end: dict[str, Any] | None,
    c: Columns,
    aside: list[tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """The account of a journal (`header`, `end` line or None, its records as `c`, and the
    (phase, seq) of the final records its vetting set aside, `aside`)."""
    shards = list((end or {}).get("accounts") or [])
    ended_in_order = bool(end and end.get("complete"))
    final = ~c.retried
    problems: list[str] = []
    phases = [
        _phase_account(i, spec, c, final, aside or [], shards, end, ended_in_order, problems)
        for i, spec in enumerate(header.get("phases") or [])
    ]
    shard_rows, errors = _shard_accounts(shards, problems)
    return {
        "balanced": None if end is None else not problems,
        "missing": sum(p["missing"] for p in phases),
        "extra": sum(p["extra"] for p in phases),
        "phases": phases,
        "shards": shard_rows,
        "errors": errors[:MAX_PROBLEMS],
        "problems": problems[:MAX_PROBLEMS],
        # client health: kept-alive connections closed for bytes no request asked for
        # (harness.client.keepalive)
        "stale_connections": sum(int(a.get("stale_connections") or 0) for a in shards),
    }


def _phase_account(
    i: int,
    spec: dict[str, Any],
    c: Columns,
    final: Any,
    aside: list[tuple[int, int]],
    shards: list[dict[str, Any]],
    end: dict[str, Any] | None,
    ended_in_order: bool,
    problems: list[str],
) -> dict[str, Any]:
    """Phase i's row: planned, taken up (begun), recorded, missing and extra; its problems are
    appended to `problems`."""
    name = spec.get("name", str(i))
    rows = final & (c.phase == i)
    held = [s for p, s in aside if p == i]
    recorded = int(rows.sum()) + len(held)
    distinct = int(len(np.unique(np.concatenate([c.seq[rows], np.array(held, np.int64)]))))
    planned = spec.get("planned_requests")
    multi_turn = "planned_sessions" in spec
    begun: int | None = None
    if shards:
        begun = sum(_at(a.get("begun"), i) for a in shards)
    elif end is not None and ended_in_order and planned is not None and not multi_turn:
        begun = int(planned)  # an end line from before accounts: the plan says it
    missing = extra = 0
    if begun is not None:
        missing = max(begun - distinct, 0)
        extra = (recorded - distinct) + max(distinct - begun, 0)
        if missing:
            problems.append(f"phase {name!r}: {missing} of {begun} requests have no record")
        if extra:
            problems.append(f"phase {name!r}: {extra} records more than requests taken up")
        if ended_in_order and planned is not None and not multi_turn and begun != planned:
            missing += max(int(planned) - begun, 0)
            problems.append(f"phase {name!r}: {begun} of {planned} planned requests were taken up")
    return {
        "name": name,
        "planned": planned,
        "begun": begun,
        "recorded": recorded,
        "missing": missing,
        "extra": extra,
    }


def _shard_accounts(
    shards: list[dict[str, Any]], problems: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each shard's taken up and emitted counts, and the exceptions requests ended in; the
    shards' problems are appended to `problems`."""
    rows, errors = [], []
    for a in shards:
        b, r = sum(a.get("begun") or []), sum(a.get("recorded") or [])
        index, count = (list(a.get("shard") or [0, 1]) + [0, 1])[:2]
        rows.append({"shard": [index, count], "begun": b, "recorded": r})
        if b != r:
            problems.append(
                f"shard {index + 1} of {count}: took up {b} requests, emitted {r} records"
            )
        errors += [str(e) for e in a.get("errors") or []]
    if errors:
        problems.append(f"{len(errors)} request(s) ended in an exception: {errors[0]}")
    return rows, errors


def _at(values: Any, i: int) -> int:
    return int(values[i]) if isinstance(values, list) and i < len(values) else 0


def account_sentence(acct: dict[str, Any]) -> str | None:
    """One line when the records do not match the plan (None when they do, or cannot be held
    against it): what is missing or extra, where."""
    if acct.get("balanced") is not False:
        return None
    what = []
    if acct.get("missing"):
        what.append(f"{acct['missing']} planned requests have no record")
    if acct.get("extra"):
        what.append(f"{acct['extra']} records too many")
    head = "; ".join(what) or "the run's records do not match its requests"
    return f"{head} ({'; '.join(acct.get('problems') or [])})"


__all__ = ["account", "account_sentence"]
