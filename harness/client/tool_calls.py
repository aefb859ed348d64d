"""Tool calls in a chat stream: the text `delta.tool_calls` carries (its channel's token
events, harness.client.openai), checked against OpenAI's shape, and the calls an agent sends back
(`keep_calls`, harness.client.agent).
"""

from __future__ import annotations

from typing import Any

from harness.client.server_text import malformed as _malformed


def tool_text(calls: object, data: bytes) -> str:
    """The text `delta.tool_calls` carries: each call's function name and arguments, joined
    ("" for none). Raises StreamError(MALFORMED) for a shape other than OpenAI's."""
    if calls is None:
        return ""
    if type(calls) is not list:
        raise _malformed("choices[0].delta.tool_calls is not a list", data)
    out = ""
    for call in calls:
        if type(call) is not dict:
            raise _malformed("choices[0].delta.tool_calls[] is not an object", data)
        fn = call.get("function")
        if fn is None:
            continue
        if type(fn) is not dict:
            raise _malformed("choices[0].delta.tool_calls[].function is not an object", data)
        for name in ("name", "arguments"):
            v = fn.get(name)
            if v is not None:
                if type(v) is not str:
                    raise _malformed(
                        f"choices[0].delta.tool_calls[].function.{name} is not a string", data
                    )
                out += v
    return out


MAX_KEPT_CALLS = 16  # tool calls of one answer an agent sends back; more are not kept


def keep_calls(calls: list[list[str]], deltas: list[Any]) -> None:
    """Add the pieces of `delta.tool_calls` (checked by `tool_text`) to `calls`, one
    [name, arguments] per call `index` (a call without an index continues the last)."""
    for d in deltas:
        fn = d.get("function")
        if not fn:
            continue
        i = d.get("index")
        if type(i) is not int or i < 0:
            i = max(len(calls) - 1, 0)
        if i >= MAX_KEPT_CALLS:
            continue
        while len(calls) <= i:
            calls.append(["", ""])
        calls[i][0] += fn.get("name") or ""
        calls[i][1] += fn.get("arguments") or ""
