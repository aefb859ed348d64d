"""harness: an open-loop load generator for OpenAI-compatible LLM serving endpoints.

Reading order: README -> harness/record/records.py -> harness/workload/plan.py
-> harness/client/engine.py.
"""

__version__ = "0.1.0"
