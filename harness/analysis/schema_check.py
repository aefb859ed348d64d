"""Checks a document against a JSON Schema of the subset the result schema uses, and says the
first place it fails, as a dotted path and a short sentence.

`harness/schema/result.schema.json` is generated from TypedDicts (`result_types.json_schema`),
so it uses only these keywords of JSON Schema draft 2020-12: `type` (one name or a list),
`properties`, `required`, `additionalProperties`, `items`, `anyOf`, `enum`, and `$ref` into the
document's own `$defs`. `first_problem` implements exactly those, with draft 2020-12's meanings
(an integer-valued float such as 2.0 is an `integer`; a boolean is neither an `integer` nor a
`number`); any other keyword is refused (`UNSUPPORTED`), so a schema that outgrows this subset
fails loudly instead of being half-checked. tests/analysis/test_load_result_schema.py holds it
against the `jsonschema` package on generated and mutated documents.

Why not the `jsonschema` package at run time: it brings four packages (one compiled) for one
check of files the harness wrote itself, and it reports every error where a user needs the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUPPORTED = frozenset(
    {
        "$schema",
        "title",
        "description",
        "$defs",
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "$ref",
    }
)

_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


class UnsupportedSchema(ValueError):
    """The schema uses a keyword this checker does not implement."""


def _is(kind: str, v: Any) -> bool:
    if kind == "object":
        return isinstance(v, Mapping)
    if kind == "array":
        return isinstance(v, list)
    if kind == "string":
        return isinstance(v, str)
    if kind == "boolean":
        return isinstance(v, bool)
    if kind == "null":
        return v is None
    if isinstance(v, bool):
        return False
    if kind == "integer":
        return isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    if kind == "number":
        return isinstance(v, int | float)
    raise UnsupportedSchema(f"type {kind!r}")


def describe(v: Any) -> str:
    """A value as an error names it: its JSON kind and (short) text."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, list):
        return "an array"
    kind = "a string" if isinstance(v, str) else "an integer" if isinstance(v, int) else "a number"
    text = repr(v)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _types(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    return [] if t is None else [t] if isinstance(t, str) else list(t)


def first_problem(
    doc: Any, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None
) -> tuple[str, str] | None:
    """(dotted path, what is wrong) of the first place `doc` fails `schema`, or None when it
    conforms. `root`: the document holding `$defs` (default: `schema`). Raises
    UnsupportedSchema for a keyword outside the subset."""
    return _check(doc, schema, root if root is not None else schema, ())


def _check(
    v: Any, schema: Mapping[str, Any], root: Mapping[str, Any], path: tuple[str, ...]
) -> tuple[str, str] | None:
    extra = set(schema) - SUPPORTED
    if extra:
        raise UnsupportedSchema(", ".join(sorted(extra)))
    where = ".".join(path)
    ref = schema.get("$ref")
    if ref is not None:
        prefix = "#/$defs/"
        if not isinstance(ref, str) or not ref.startswith(prefix):
            raise UnsupportedSchema(f"$ref {ref!r}")
        found = _check(v, root["$defs"][ref[len(prefix) :]], root, path)
        if found is not None:
            return found
    if "anyOf" in schema:
        options = schema["anyOf"]
        if not any(_check(v, o, root, path) is None for o in options):
            kinds = [t for o in options for t in _types(o)]
            if kinds and all("$ref" not in o for o in options):
                return where, f"expected {' or '.join(_NAMES[k] for k in kinds)}, got {describe(v)}"
            # the option of the value's own kind says what is wrong inside it
            for o in options:
                if not _types(o) or any(_is(k, v) for k in _types(o)):
                    found = _check(v, o, root, path)
                    if found is not None:
                        return found
            return where, f"matches none of the allowed shapes, got {describe(v)}"
    kinds = _types(schema)
    if kinds and not any(_is(k, v) for k in kinds):
        return where, f"expected {' or '.join(_NAMES[k] for k in kinds)}, got {describe(v)}"
    if "enum" in schema and not any(_same(v, e) for e in schema["enum"]):
        allowed = ", ".join(map(repr, schema["enum"]))
        return where, f"expected one of {allowed}, got {describe(v)}"
    if isinstance(v, Mapping):
        for key in schema.get("required", ()):
            if key not in v:
                return ".".join((*path, key)), "is missing"
        props = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        for key, item in v.items():
            sub = props.get(key, additional)
            if sub is None:
                continue
            if sub is False:
                return ".".join((*path, str(key))), "is not allowed here"
            found = _check(item, sub, root, (*path, str(key)))
            if found is not None:
                return found
    elif isinstance(v, list) and "items" in schema:
        if _all_plain(v, schema["items"]):
            return None  # a long time series of numbers: one pass over the types, not per item
        for i, item in enumerate(v):
            found = _check(item, schema["items"], root, (*path, str(i)))
            if found is not None:
                return found
    return None


# JSON kinds a value of exactly this Python type always satisfies (orjson makes exact types; an
# integer-valued float for "integer" or any subclass takes the item-by-item path).
_EXACT: dict[str, tuple[type, ...]] = {
    "number": (int, float),
    "integer": (int,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _all_plain(v: list[Any], items: Mapping[str, Any]) -> bool:
    """Whether every item of `v` surely conforms to `items`, a schema of only scalar `type`s:
    checked by the set of the items' exact types (fast for 3 M-point series). False means
    "check item by item", not "fails"."""
    if set(items) - {"type", "title", "description"}:
        return False
    kinds = _types(items)
    if not kinds or any(k not in _EXACT for k in kinds):
        return False
    allowed = {t for k in kinds for t in _EXACT[k]}
    return {type(x) for x in v} <= allowed


__all__ = ["SUPPORTED", "UnsupportedSchema", "describe", "first_problem"]
