"""Reading a result (or sweep summary) JSON file with bounds, before any byte is parsed.

`report`, `compare`, `export` and every other reader of a result go through `read_json_file`,
which refuses, in one line naming the file (ConfigError, exit 2):

- a path that is not a regular file (a folder, a device such as /dev/zero, a pipe);
- a file larger than MAX_RESULT_BYTES (a result holds summaries, histograms and time series:
  real ones are a few MB, a days-long run at 1 s steps well under 100 MB);
- a file whose first byte after whitespace is not `{` (a result is a JSON object): a 2 GB file
  of zeros is refused after reading 64 KiB, not after parsing 2 GB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harness.config.bounded import file_problem
from harness.errors import ConfigError

MAX_RESULT_BYTES = 1024 * 1024 * 1024  # 1 GiB: far above any real result
_HEAD_BYTES = 64 * 1024
_WHITESPACE = b" \t\r\n"


def read_json_file(path: str | Path) -> Any:
    """The parsed JSON object in `path`; ConfigError (one line naming the file) for a missing,
    non-regular, oversized, non-JSON or unreadable file. Checks come before the file is read."""
    p = Path(path)
    problem = file_problem(p)
    if problem == "no such file":
        raise ConfigError(str(p), "", "file not found")
    if problem is not None:
        raise ConfigError(str(p), "", f"cannot read: {problem}")
    try:
        with p.open("rb") as f:
            size = f.seek(0, 2)
            if size > MAX_RESULT_BYTES:
                raise ConfigError(
                    str(p),
                    "",
                    f"{size / 2**30:.1f} GiB is larger than a result can be (the bound is "
                    f"{MAX_RESULT_BYTES // 2**30} GiB); is this the right file?",
                )
            f.seek(0)
            head = f.read(_HEAD_BYTES)
            first = head.lstrip(_WHITESPACE)[:1]
            if first != b"{":
                raise ConfigError(str(p), "", f"not JSON: {_what_starts(first, head)}")
            data = head + f.read()
    except OSError as exc:
        raise ConfigError(str(p), "", f"cannot read: {exc.strerror or exc}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(str(p), "", f"not valid JSON ({exc})") from None


def _what_starts(first: bytes, head: bytes) -> str:
    if not first:
        return (
            "the file is empty" if not head else f"only whitespace in its first {len(head)} bytes"
        )
    return f"a result starts with '{{', this file with byte {first[0]:#04x}"
