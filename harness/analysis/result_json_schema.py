"""JSON Schema from TypedDicts: how `harness.analysis.result_types.json_schema` turns the
result's types into the published schema (objects with their required keys, unions, lists,
maps; a TypedDict becomes a `$ref` into `$defs`). Generic: the result's own choices (its root,
the keys no TypedDict can name, the schema versions) stay in result_types.

No `from __future__ import annotations`: the types are read at run time (get_type_hints)."""

import types
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

# Keys that cannot be TypedDict fields (Python keywords): (type, key) -> JSON schema, required.
ExtraKeys = dict[type, dict[str, tuple[dict[str, Any], bool]]]

_SCALARS = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def _schema(tp: Any) -> dict[str, Any]:
    if tp is Any:
        return {}
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if is_typeddict(tp):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema(a) for a in get_args(tp)]}
    if origin is list:
        return {"type": "array", "items": _schema(get_args(tp)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(get_args(tp)[1])}
    raise TypeError(f"no JSON schema for {tp!r}")


def _object(td: type, extra_keys: ExtraKeys) -> dict[str, Any]:
    hints = get_type_hints(td)
    props = {k: _schema(v) for k, v in hints.items()}
    required = sorted(td.__required_keys__)  # type: ignore[attr-defined]  # td: a TypedDict class
    for key, (schema, req) in extra_keys.get(td, {}).items():
        props[key] = schema
        if req:
            required.append(key)
    return {"type": "object", "properties": props, "required": sorted(required)}


def typeddicts(root: type) -> list[type]:
    """Every TypedDict under `root` (itself first), each once."""
    seen: list[type] = []

    def walk(tp: Any) -> None:
        if is_typeddict(tp):
            if tp in seen:
                return
            seen.append(tp)
            for v in get_type_hints(tp).values():
                walk(v)
        for a in get_args(tp):
            walk(a)

    walk(root)
    return seen


def object_schemas(root: type, extra_keys: ExtraKeys) -> dict[str, dict[str, Any]]:
    """The JSON Schema of every TypedDict under `root`, by its class name."""
    return {td.__name__: _object(td, extra_keys) for td in typeddicts(root)}
