"""Text for a terminal: what a server (or a result file) says is shown as text, never as controls.

Model ids from /v1/models, servers' error messages, headers, Prometheus labels and whatever a
result file carries may hold control characters. Printed raw, ESC sequences clear the screen,
set the window title, move the cursor over earlier lines, or write the clipboard (OSC 52).
`terminal_safe` is applied twice: where server text enters the harness (`harness.redact`, so
results, journals, HTML and exports hold it escaped), and where the commands print (their
`print` calls that carry such text, which may come from a result file another tool wrote).
It replaces every

- C0 control (U+0000-U+001F) but newline and tab (with `keep_newlines=False`, those too), which
  includes ESC (so no CSI, OSC or DCS sequence can start) and carriage return (which would
  overwrite a line),
- DEL (U+007F) and C1 control (U+0080-U+009F; U+009B is a one-character CSI),
- bidirectional override and isolate (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C),
  which reorder what a line appears to say, and the line / paragraph separators U+2028, U+2029,

by its escape `\\u001b`: visible, unambiguous, and the same escape JSON uses, so JSON printed
through it stays valid JSON. Everything else, including all printable Unicode, passes unchanged.
"""

from __future__ import annotations

import re

_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE_BLOCK = re.compile(f"[{_CONTROLS}]")
_UNSAFE_LINE = re.compile(f"[\t\n{_CONTROLS}]")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def terminal_safe(text: str, *, keep_newlines: bool = True) -> str:
    """`text` with every control character escaped (see the module docstring). Newlines and tabs
    are kept unless `keep_newlines=False` (a value that must stay on one line)."""
    return (_UNSAFE_BLOCK if keep_newlines else _UNSAFE_LINE).sub(_escape, text)


__all__ = ["terminal_safe"]
