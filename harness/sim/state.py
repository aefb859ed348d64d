"""What the simulator's handlers share (`SimState`), and the seeded draws that shape one answer.

One `SimState` per server: the engine, the truth store, the metrics, the fault picker, the
rate limiter and the draws an answer's shape comes from: tokens per chunk (`ChunkSizes`,
`chunk_tokens`), a reasoning model's thinking length, and whether a chat request with tools
calls one (`channels_of`, fixed by the prompt and the seed, not by arrival order). No HTTP
here: the virtual-clock probe (harness.orchestrate.virtual_probe) draws from these too.
"""

from __future__ import annotations

import time
import zlib

import numpy as np

from harness.sim import faults as F
from harness.sim.answer_format import Layout
from harness.sim.engine import SimEngine
from harness.sim.metrics import SimMetrics
from harness.sim.protocol import ParsedRequest
from harness.sim.ratelimit import RateLimiter
from harness.sim.settings import ResolvedSim
from harness.sim.truth import RequestTruth, TruthStore

TOOL_DRAW_WORDS = 64  # the prompt's last words that, with its length, fix a tool-call draw
CHUNK_DRAWS = 4096  # chunk sizes are drawn this many at a time


class ChunkSizes:
    """Tokens per chunk, drawn (seeded) from the `chunk_tokens` distribution; 1 without one."""

    def __init__(
        self, dist: tuple[tuple[int, float], ...], seed: int, stream: int = 0xC40C
    ) -> None:
        self.values = np.array([k for k, _ in dist], dtype=np.int64)
        self.weights = np.array([w for _, w in dist], dtype=np.float64)
        self._rng = np.random.default_rng([seed, stream])
        self._drawn: list[int] = []

    def next(self) -> int:
        if not len(self.values):
            return 1
        if not self._drawn:
            self._drawn = self._rng.choice(self.values, CHUNK_DRAWS, p=self.weights).tolist()
            self._drawn.reverse()
        return self._drawn.pop()


class SimState:
    """Everything the handlers share: engine, truth, metrics, fault and EOS draws."""

    def __init__(self, resolved: ResolvedSim, api_key: str | None) -> None:
        s = resolved.settings
        self.resolved = resolved
        self.api_key = api_key
        self.model_name = s.served_model_name or resolved.model_preset.name
        # vLLM with --served-model-name answers to those names only, not to the model's
        self.served_names = (
            {s.served_model_name}
            if s.served_model_name
            else {self.model_name, resolved.model_preset.hf_id}
        )
        self.metrics = SimMetrics(
            self.model_name,
            {
                "block_size": str(s.block_size),
                "cache_dtype": "auto",
                "enable_prefix_caching": str(s.enable_prefix_caching),
                "gpu_memory_utilization": str(s.gpu_memory_utilization),
                "num_gpu_blocks": str(resolved.num_gpu_blocks),
                "num_cpu_blocks": "0",
            },
        )
        self.engine = SimEngine(resolved, self.metrics)
        self.truth = TruthStore()
        self.faults = F.FaultPicker(s.faults, s.seed)
        self.eos_rng = np.random.default_rng([s.seed, 0xE05])
        self.created = int(time.time())
        self.strict = s.api_style == "openai-strict"
        self.chunk_sizes = ChunkSizes(s.chunk_tokens, s.seed)
        # a reasoning model's thinking length per request (ChunkSizes draws any distribution;
        # without one, 0), and whether an "auto" tool choice calls
        self.reasoning = (
            ChunkSizes(s.reasoning_tokens, s.seed, 0x7EA5) if s.reasoning_tokens else None
        )
        self.keepalive_wall_s = None if s.keepalive_s is None else s.keepalive_s / s.speedup
        self.limiter = RateLimiter(s.rpm_limit, s.tpm_limit, s.rate_limit_burst_s, time.monotonic())

    def delay_s(self, model_s: float) -> float:
        return model_s / self.resolved.settings.speedup


def channels_of(req: ParsedRequest, state: SimState) -> tuple[int, str | None]:
    """A chat request's reasoning length (drawn in reasoning mode) and the function its answer
    calls (None: it answers): with `tools`, tool_choice "required" calls the first, a named
    function that one, "auto" the first at `tool_call_share`, "none" never."""
    if not req.chat:
        return 0, None
    reasoning = state.reasoning.next() if state.reasoning is not None else 0
    tool: str | None = None
    if req.tools and req.tool_choice != "none":
        if req.tool_choice == "required":
            tool = req.tools[0]
        elif req.tool_choice != "auto":
            tool = req.tool_choice
        elif tool_draw(req, state.resolved.settings.seed) < state.resolved.settings.tool_call_share:
            tool = req.tools[0]
    return reasoning, tool


def tool_draw(req: ParsedRequest, seed: int) -> float:
    """A uniform draw in [0, 1) fixed by the request's prompt and the seed, not by arrival order:
    the same agent step gets the same decision in every run, so a seeded agent run takes the
    same path however its requests interleave."""
    tail = " ".join(req.token_words[-TOOL_DRAW_WORDS:]).encode()
    h = zlib.crc32(tail, zlib.crc32(f"{seed}|{req.prompt_tokens}".encode()))
    return h / 2**32


def reported_cached(state: SimState, truth: RequestTruth) -> int | None:
    """The usage's prompt_tokens_details.cached_tokens: the prompt tokens the engine found
    cached (vLLM's num_cached_tokens), where the settings report it (None: left out)."""
    if not state.resolved.settings.enable_prompt_tokens_details:
        return None
    return truth.cached_tokens or 0


def layout_of(truth: RequestTruth) -> Layout:
    return Layout(truth.reasoning_tokens, truth.tool_call, truth.target_tokens)
