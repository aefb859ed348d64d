"""What a journal's header and end line must hold for a result to be built from them.

`header_problem` names the first key missing or of the wrong JSON kind; `read_journal` and
`check_header` (harness.record.journal) turn it into a JournalError naming the file and line.
"""

from __future__ import annotations

from typing import Any


class JournalError(ValueError):
    """A journal that cannot be read back: no header, or a header without what the result is
    built from. The message is one line naming the file, the line and the key."""


# The header's keys that `build_result` reads, and their JSON kinds (the rest is optional and
# read with defaults). Each phase and SLO entry is checked too (_PHASE_KEYS, _SLO_KEYS).
_HEADER_KEYS: dict[str, tuple[type, ...]] = {
    "scenario": (dict,),
    "scenario_name": (str,),
    "target": (dict,),
    "environment": (dict,),
    "started_at": (str,),
    "phases": (list,),
}
_HEADER_OPTIONAL: dict[str, tuple[type, ...]] = {
    "slo": (list,),
    "plan": (dict,),
    "options": (dict,),
    "request_adaptations": (list, type(None)),
}
_NUM = (int, float)
_PHASE_KEYS: dict[str, tuple[type, ...]] = {"name": (str,), "warmup": (bool,)}
_PHASE_OPTIONAL: dict[str, tuple[type, ...]] = {
    "closed": (bool,),
    "max_concurrency": (int, type(None)),
    "arrival": (str, type(None)),
    "planned_duration_s": (*_NUM, type(None)),
    "planned_requests": (int, type(None)),
}
_SLO_KEYS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "metric": (str,),
    "stat": (str, type(None)),
    "limit_s": _NUM,
}
# The end line's keys build_result reads: one of the wrong kind makes the line damaged.
_END_OPTIONAL: dict[str, tuple[type, ...]] = {
    "end_ns": (int,),
    "complete": (bool,),
    "stop_reason": (str, type(None)),
    "simulator": (dict, type(None)),
    "phase_starts_ns": (list, type(None)),
    "phase_ends_ns": (list, type(None)),
    "cpu_s": (*_NUM, type(None)),
    "loop_lag_ns": (list, type(None)),
    "t0_wall_s": (*_NUM, type(None)),
}
_KIND_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "true or false",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def _kind_problem(
    d: dict[str, Any], required: dict[str, tuple[type, ...]], optional: dict[str, tuple[type, ...]]
) -> tuple[str, str] | None:
    """(key, what is wrong) of the first key of `d` missing or of the wrong JSON kind."""
    for key, kinds in (*required.items(), *optional.items()):
        if key not in d:
            if key in required:
                return key, "is missing"
            continue
        v = d[key]
        if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
            want = " or ".join(dict.fromkeys(_KIND_NAMES[k] for k in kinds))
            return key, f"expected {want}, got {type(v).__name__} {str(v)[:40]!r}"
    return None


def header_problem(h: dict[str, Any], complete: bool = True) -> tuple[str, str] | None:
    """(dotted key, what is wrong) of a header `build_result` could not build a result from.
    `complete=False`: only the keys present are checked (a journal read for its records)."""
    if complete:
        found = _kind_problem(h, _HEADER_KEYS, _HEADER_OPTIONAL)
    else:
        found = _kind_problem(h, {}, {**_HEADER_KEYS, **_HEADER_OPTIONAL})
    if found is not None:
        return found
    for name, keys, optional in (
        ("phases", _PHASE_KEYS, _PHASE_OPTIONAL),
        ("slo", _SLO_KEYS, {}),
    ):
        for i, item in enumerate(h.get(name) or []):
            if not isinstance(item, dict):
                return f"{name}.{i}", f"expected an object, got {type(item).__name__}"
            found = _kind_problem(item, keys, optional)
            if found is not None:
                return f"{name}.{i}.{found[0]}", found[1]
    if complete and not h["phases"]:
        return "phases", "is empty: a run has at least one phase"
    return None


def _end_ok(d: dict[str, Any]) -> bool:
    if _kind_problem(d, {}, _END_OPTIONAL) is not None:
        return False
    return all(
        all(type(x) is int for x in d.get(k) or [])
        for k in ("phase_starts_ns", "phase_ends_ns", "loop_lag_ns")
    )
