"""The built-in simulated vLLM server: a V1-style scheduler (continuous batching,
max_num_seqs, chunked prefill, paged KV with recompute preemption, prefix caching), a
roofline step time from GPU and model presets, and vLLM's OpenAI-compatible HTTP face.

Reading order: settings.py -> roofline.py -> scheduler.py -> engine.py -> state.py -> answers.py
-> app.py.
The client side of the harness never imports this package, and this package imports
nothing of the client (only `harness.errors` and `harness.units`).
"""

from __future__ import annotations

from harness.sim.settings import ResolvedSim, SimSettings

__all__ = ["ResolvedSim", "SimServer", "SimSettings", "start_sim_server"]


def __getattr__(name: str) -> object:
    # The HTTP face pulls in aiohttp; load it only when asked for.
    if name in ("SimServer", "start_sim_server"):
        from harness.sim import app

        return getattr(app, name)
    raise AttributeError(name)
