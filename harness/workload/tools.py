"""Tool definitions a workload sends (`[workload] tools = N`, `tool_choice`): agents' requests
carry `tools`, and their answers may be tool calls (a `tool` token channel, harness.record).

The definitions are synthetic and fixed (`tool_0`, `tool_1`, ...: one string argument each), so
the same scenario sends the same bytes; a real server renders them into the prompt through its
chat template, so they add prompt tokens the plan's `prompt_tokens` does not count.
"""

from __future__ import annotations

from typing import Any

MAX_TOOLS = 128  # OpenAI's limit on `tools` per request
TOOL_CHOICES = ("auto", "required", "none")


def tool_definitions(n: int) -> list[dict[str, Any]]:
    """`n` function definitions in OpenAI's `tools` shape."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Look something up (synthetic tool {i} of the harness).",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string", "description": "what to look up"}},
                    "required": ["q"],
                },
            },
        }
        for i in range(n)
    ]


def tools_body(n: int, choice: str) -> dict[str, Any]:
    """The request fields for `[workload] tools = n` and `tool_choice` ({} for none)."""
    return {"tools": tool_definitions(n), "tool_choice": choice} if n else {}
