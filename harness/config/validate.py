"""Typed reading of parsed TOML/JSON tables with errors that name the file, the key and the fix.

`Table` wraps one mapping: each getter consumes a key, checks its type and range, and raises
ConfigError(where, "dotted.key", "expected ..., got ...") on a bad value. `finish()` rejects keys
nobody consumed, listing the allowed ones, so typos never pass silently.
"""

from __future__ import annotations

import builtins
import difflib
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from harness.config.bounded import check_nesting, nesting_message, read_bounded
from harness.errors import ConfigError
from harness.units import parse_duration_s, parse_rate_per_s

_MISSING = object()


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    return type(value).__name__


class Table:
    """A mapping read key by key. `prefix` is the dotted path of this table in its file.

    The getters are named after the types they read (`str`, `bool`, `int`, ...), which shadows
    those builtins inside this class body: the annotations below them say `builtins.str`."""

    def __init__(self, data: object, where: str, prefix: str = "") -> None:
        self.where = where
        self.prefix = prefix
        if not isinstance(data, Mapping):
            self.fail_self(f"expected a table, got {_type_name(data)}")
        self.data: Mapping[str, Any] = data
        self.used: set[str] = set()

    def shown(self, value: object) -> builtins.str:
        """A value as this file's errors show it: in full (a scenario's or config's value at a
        known key); settings.json's table shows `preview(value)` (that file holds keys)."""
        return repr(value)

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def fail(self, name: str, message: str) -> NoReturn:
        raise ConfigError(self.where, self.key(name), message)

    def fail_self(self, message: str) -> NoReturn:
        raise ConfigError(self.where, self.prefix, message)

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        self.used.add(name)
        if name not in self.data:
            if default is _MISSING:
                self.fail(name, "is required")
            return default
        return self.data[name]

    def str(
        self,
        name: builtins.str,
        default: Any = _MISSING,
        choices: Iterable[builtins.str] | None = None,
    ) -> Any:
        value = self.raw(name, default)
        if value is default and name not in self.data:
            return value
        if not isinstance(value, str):
            self.fail(name, f"expected a string, got {_type_name(value)} {self.shown(value)}")
        if choices is not None:
            allowed = list(choices)
            if value not in allowed:
                self.fail(
                    name,
                    f"expected one of {', '.join(map(repr, allowed))}, got {self.shown(value)}",
                )
        return value

    def url(self, name: builtins.str, default: Any = _MISSING) -> Any:
        """A string that is a URL the harness will store and print: one with credentials in it
        (`user:password@`) is refused (`harness.config.target.refuse_userinfo`)."""
        from harness.config.target import refuse_userinfo

        value = self.str(name, default)
        if isinstance(value, builtins.str):
            refuse_userinfo(value, self.where, self.key(name))
        return value

    def bool(self, name: builtins.str, default: Any = _MISSING) -> Any:
        value = self.raw(name, default)
        if name in self.data and not isinstance(value, bool):
            self.fail(name, f"expected true or false, got {_type_name(value)} {self.shown(value)}")
        return value

    def int(
        self,
        name: builtins.str,
        default: Any = _MISSING,
        *,
        min: builtins.int | None = None,
        max: builtins.int | None = None,
    ) -> Any:
        value = self.raw(name, default)
        if name not in self.data:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                self.fail(name, f"expected an integer, got {_type_name(value)} {self.shown(value)}")
        self._check_range(name, value, min, max)
        return value

    def float(
        self,
        name: builtins.str,
        default: Any = _MISSING,
        *,
        min: builtins.float | None = None,
        max: builtins.float | None = None,
        exclusive_min: builtins.bool = False,
    ) -> Any:
        value = self.raw(name, default)
        if name not in self.data:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(name, f"expected a number, got {_type_name(value)} {self.shown(value)}")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            self.fail(name, f"expected a finite number, got {value!r}")
        if exclusive_min and min is not None and value <= min:
            self.fail(name, f"expected a number > {min:g}, got {value:g}")
        self._check_range(name, value, None if exclusive_min else min, max)
        return value

    def _check_range(
        self,
        name: builtins.str,
        value: builtins.float,
        lo: builtins.float | None,
        hi: builtins.float | None,
    ) -> None:
        if lo is not None and value < lo:
            self.fail(name, f"expected a value >= {lo:g}, got {value:g}")
        if hi is not None and value > hi:
            self.fail(name, f"expected a value <= {hi:g}, got {value:g}")

    def duration_s(
        self, name: builtins.str, default: Any = _MISSING, *, allow_zero: builtins.bool = True
    ) -> Any:
        value = self.raw(name, default)
        if name not in self.data:
            return value
        try:
            return parse_duration_s(value, allow_zero=allow_zero)
        except ValueError as exc:
            self.fail(name, str(exc))

    def rate_per_s(self, name: builtins.str, default: Any = _MISSING) -> Any:
        value = self.raw(name, default)
        if name not in self.data:
            return value
        try:
            return parse_rate_per_s(value)
        except ValueError as exc:
            self.fail(name, str(exc))

    def table(self, name: builtins.str, default: Any = _MISSING) -> Any:
        value = self.raw(name, default)
        if name not in self.data:
            return value
        return Table(value, self.where, self.key(name))

    def list(self, name: builtins.str, default: Any = _MISSING) -> Any:
        value = self.raw(name, default)
        if name in self.data and not isinstance(value, list):
            self.fail(name, f"expected an array, got {_type_name(value)} {self.shown(value)}")
        return value

    def finish(self) -> None:
        """Reject unknown keys, suggesting the closest allowed name."""
        unknown = [k for k in self.data if k not in self.used]
        if not unknown:
            return
        name = unknown[0]
        allowed = sorted(self.used)
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.fail(name, f"unknown key{hint}; allowed here: {', '.join(allowed)}")

    def allow(self, *names: builtins.str) -> None:
        """Mark keys as known without reading them (read elsewhere)."""
        self.used.update(names)


def read_text_file(path: Path) -> str:
    """A config file's text, or a ConfigError naming the file: not found, not a regular file,
    larger than the bound (harness.config.bounded), unreadable, not UTF-8."""
    data = read_bounded(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(path),
            "",
            f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); the file must be UTF-8",
        ) from None


def parse_toml_text(text: str, where: str) -> dict[str, Any]:
    """tomllib.loads, with a syntax error turned into a ConfigError naming the file and line,
    and a document nested deeper than MAX_NESTING refused (tomllib recurses once per level)."""
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(where, "", nesting_message()) from None
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise ConfigError(
            where,
            "",
            f"TOML syntax error: {msg}",
            line=int(m.group(1)) if m else None,
            column=int(m.group(2)) if m else None,
        ) from None
    check_nesting(doc, where)
    return doc


def load_toml_file(path: Path) -> dict[str, Any]:
    """Read and parse a TOML file; every failure is a ConfigError naming the file (and line)."""
    return parse_toml_text(read_text_file(path), str(path))
