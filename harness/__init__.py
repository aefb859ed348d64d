"""harness: an open-loop load generator for OpenAI-compatible LLM serving endpoints.

Reading order: README -> harness/record/records.py -> harness/workload/plan.py
-> harness/client/engine.py.

The Python API (harness/api.py; docs/python-api.md): `harness.run`, `await harness.arun`,
`harness.load_result`, `harness.compare`, `harness.predict`, `harness.Result`. They are imported
on first use, so `import harness` stays cheap (the command line imports this package too).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = [
    "run",
    "arun",
    "load_result",
    "compare",
    "predict",
    "Result",
    "Comparison",
    "Figures",
    "__version__",
]
_API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
