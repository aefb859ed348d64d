"""load_result over schema-shaped documents (hypothesis): every document the shipped schema
accepts loads, unchanged; every mutation of one either still conforms and loads, or fails with
the one-line ConfigError naming the file and a path -- never another exception. The checker
behind it (harness.analysis.schema_check) agrees with the `jsonschema` package on all of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.analysis.result import load_result, result_schema
from harness.analysis.schema_check import SUPPORTED, UnsupportedSchema, first_problem
from harness.errors import ConfigError
from harness.schema import RESULT_SCHEMA_PATH

jsonschema = pytest.importorskip("jsonschema")  # in the test extra
SCHEMA = result_schema()
REFERENCE = jsonschema.Draft202012Validator(SCHEMA)

_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)
_SCALARS = {
    "string": st.text(max_size=8),
    "integer": st.integers(-(2**40), 2**40),
    "number": st.one_of(
        st.floats(allow_nan=False, allow_infinity=False, width=64), st.integers(-1000, 1000)
    ),
    "boolean": st.booleans(),
    "null": st.none(),
}


def valid(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Documents `node` (a part of the result schema) accepts: the schema read as a generator."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return st.deferred(lambda: valid(SCHEMA["$defs"][name]))
    if "anyOf" in node:
        return st.one_of([valid(o) for o in node["anyOf"]])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind is None:
        return _json
    if isinstance(kind, list):  # e.g. ["boolean", "null"]
        return st.one_of([valid({**node, "type": k}) for k in kind])
    if kind == "array":
        return st.lists(valid(node.get("items", {})), max_size=1)
    if kind == "object":
        props = node.get("properties", {})
        required = set(node.get("required", ()))
        fixed = st.fixed_dictionaries(
            {k: valid(v) for k, v in props.items() if k in required},
            optional={k: valid(v) for k, v in props.items() if k not in required},
        )
        extra = node.get("additionalProperties")
        if extra is None:
            return fixed
        more = st.dictionaries(
            st.text(max_size=5).filter(lambda k: k not in props), valid(extra), max_size=1
        )
        return st.tuples(fixed, more).map(lambda t: {**t[1], **t[0]})
    return _SCALARS[kind]


documents = valid(SCHEMA)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A valid document with one place replaced by any JSON value, or one key removed."""
    doc = copy.deepcopy(draw(documents))
    paths = [p for p in _paths(doc) if p]
    path = draw(st.sampled_from(paths))
    parent: Any = doc
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(_json)
    return doc


def _load(doc: Any, tmp: Path) -> dict[str, Any]:
    p = tmp / "r.json"
    p.write_bytes(orjson.dumps(doc))
    return load_result(p)


def test_the_checker_reads_the_published_file_and_supports_every_keyword_in_it():
    import json

    assert json.loads(RESULT_SCHEMA_PATH.read_text()) == SCHEMA

    def keywords(node: Any) -> set[str]:
        if isinstance(node, dict):
            out = {k for k in node if k not in ("properties", "$defs")}
            for k, v in node.items():
                if k in ("properties", "$defs"):
                    for sub in v.values():
                        out |= keywords(sub)
                elif isinstance(v, dict | list):
                    out |= keywords(v)
            return out
        if isinstance(node, list):
            return set().union(*(keywords(x) for x in node)) if node else set()
        return set()

    assert keywords(SCHEMA) <= SUPPORTED
    with pytest.raises(UnsupportedSchema):  # a keyword it does not implement is refused
        first_problem(3, {"type": "integer", "minimum": 5})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents)
def test_documents_the_schema_accepts_load(doc: dict[str, Any], tmp_path_factory) -> None:
    assert REFERENCE.is_valid(doc)  # the generator reads the schema right
    loaded = _load(doc, tmp_path_factory.mktemp("ok"))
    assert loaded == orjson.loads(orjson.dumps(doc))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated())
def test_mutated_documents_load_or_give_one_line(doc: dict[str, Any], tmp_path_factory) -> None:
    tmp = tmp_path_factory.mktemp("mut")
    ok = REFERENCE.is_valid(doc)
    try:
        _load(doc, tmp)
    except ConfigError as exc:
        msg = str(exc)
        assert not ok, f"the reference accepts it, load_result refused: {msg}"
        assert msg.startswith(str(tmp / "r.json") + ": ") and "\n" not in msg, msg
        # the path it names is where the reference finds an error too (or a version refusal)
        where = {".".join(map(str, e.absolute_path)) for e in REFERENCE.iter_errors(doc)}
        assert (
            exc.key in where
            or exc.key == "schema_version"
            or any(w.startswith(exc.key) or exc.key.startswith(w) for w in where)
        ), (exc.key, where)
    else:
        assert ok, (
            f"load_result accepted what the reference refuses: {list(REFERENCE.iter_errors(doc))[:1]}"
        )


@pytest.mark.parametrize(
    ("path", "value", "key", "words"),
    [
        (("target",), None, "target", "expected an object, got null"),
        (("phases",), None, "phases", "expected an array, got null"),
        (("complete",), ..., "complete", "is missing"),
        (("summary", "requests", "sent"), "12", "summary.requests.sent", "a string '12'"),
        (("phases", 0, "warmup"), "no", "phases.0.warmup", "expected true or false"),
        (("schema_version",), 10, "schema_version", "reads versions 1, 2, 3, 4, 5, 6, 7, 8, 9"),
        (("schema_version",), True, "schema_version", "reads versions 1, 2, 3, 4, 5"),
    ],
)
def test_hand_edited_results_name_the_path(path, value, key, words, tmp_path):
    """The shapes that crashed the views (target: null, phases: null, no `complete`)."""
    doc = orjson.loads((Path(__file__).parents[1] / "data" / "results" / "v2.json").read_bytes())
    node = doc
    for step in path[:-1]:
        node = node[step]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(ConfigError) as exc:
        _load(doc, tmp_path)
    assert exc.value.key == key and words in str(exc.value), str(exc.value)
