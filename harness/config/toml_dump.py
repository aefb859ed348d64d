"""Write a scenario document (plain dicts, lists, str, int, float, bool) as TOML text.

Only what scenario documents hold: top-level keys, tables, arrays of tables (`[[phases]]`)
and inline tables/arrays inside them. `tomllib.loads(dump_toml(doc)) == doc` for every such
document (tests/config/test_quick.py); anything else (None, dates, sets) is a TypeError,
because a value TOML cannot hold would silently change the scenario.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _string(k)


def _string(s: str) -> str:
    out = s.replace("\\", "\\\\").replace('"', '\\"')
    out = "".join(
        c if (c >= " " and c != "\x7f") or c == "\t" else f"\\u{ord(c):04x}" for c in out
    )  # TOML: no control chars, DEL included
    return f'"{out}"'


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, Mapping):
        return (
            "{ " + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
            if v
            else "{}"
        )
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"TOML cannot hold {type(v).__name__} values: {v!r}")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list | tuple) and bool(v) and all(isinstance(x, Mapping) for x in v)


def dump_toml(doc: Mapping[str, Any]) -> str:
    """The document as TOML: top-level scalars first, then each table as `[name]`, then each
    array of tables as `[[name]]`; anything deeper is written inline (`{ dist = "fixed" }`)."""
    lines = [
        f"{_key(k)} = {toml_value(v)}"
        for k, v in doc.items()
        if not isinstance(v, Mapping) and not _is_table_array(v)
    ]
    for k, v in doc.items():
        if isinstance(v, Mapping):
            lines += [
                "",
                f"[{_key(k)}]",
                *(f"{_key(kk)} = {toml_value(vv)}" for kk, vv in v.items()),
            ]
    for k, v in doc.items():
        if _is_table_array(v):
            for item in v:
                lines += [
                    "",
                    f"[[{_key(k)}]]",
                    *(f"{_key(kk)} = {toml_value(vv)}" for kk, vv in item.items()),
                ]
    return "\n".join(lines) + "\n"
