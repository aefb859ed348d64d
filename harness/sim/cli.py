"""`python -m harness sim`: run the simulated vLLM server until SIGTERM or SIGINT.

Prints exactly one line to stdout once listening -- `harness-sim listening on
http://HOST:PORT` -- which launchers wait for; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from harness.argtable import Group, Option, add_options, opt
from harness.errors import HarnessError, UsageError
from harness.sim.settings import API_STYLES, FAULT_KINDS, VALIDATORS, SimSettings

T = TypeVar("T")

API_KEY_ENV = "HARNESS_SIM_API_KEY"
READY_LINE = "harness-sim listening on {url}"

EPILOG = """examples:
  python -m harness sim --port 8000
  python -m harness sim --gpu H100-SXM --model Llama-3.1-8B-Instruct --max-num-seqs 64
  python -m harness sim --batching static --speedup 10 --fault http429=0.05 --fault stall=0.01
  HARNESS_SIM_API_KEY=sk-test python -m harness sim --root-path /api
  python -m harness sim --api-style openai-strict --chunk-tokens 1:0.5,3:0.5 --keepalive 1 --tpm-limit 60000
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump, exit status 2
        raise UsageError(message)


SIM_TABLE: tuple[Option | Group, ...] = (
    opt("--host", default="127.0.0.1"),
    opt("--port", default="8000", help="0 picks a free port"),
    opt("--gpu", help="H200 (default), H100-SXM, A100-80GB, A100-40GB, L40S, L4"),
    opt(
        "--model",
        help="a preset (Qwen2.5-7B-Instruct by default), a Hugging Face model folder, its "
        "config.json, or a repo name in the local HF cache",
    ),
    opt("--tensor-parallel-size"),
    opt("--dtype", help="weights: auto (the preset's, default), bfloat16, float16 or fp8"),
    opt(
        "--kv-cache-dtype",
        help="KV cache: auto (the preset's, default), bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2",
    ),
    opt("--max-num-seqs"),
    opt("--max-num-batched-tokens"),
    opt("--max-model-len"),
    opt("--batching", help="continuous (default) or static"),
    opt("--block-size"),
    opt("--gpu-memory-utilization"),
    opt("--num-gpu-blocks"),
    opt("--no-chunked-prefill", action="store_true"),
    opt("--no-prefix-caching", action="store_true"),
    opt(
        "--no-prompt-tokens-details",
        action="store_true",
        help="leave usage.prompt_tokens_details.cached_tokens out (vLLM's default; the "
        "simulator sends it, as vLLM with --enable-prompt-tokens-details)",
    ),
    opt("--speedup", help="run the model clock K times faster (tests)"),
    opt("--seed"),
    opt("--api-key", help=f"require this bearer key (or set {API_KEY_ENV})"),
    opt("--root-path", help="serve the routes under this prefix, e.g. /api"),
    opt(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help=f"inject a fault into a fraction of requests; kinds: {', '.join(FAULT_KINDS)}",
    ),
    opt("--preset-file", help="TOML file with extra [gpu.NAME] / [model.NAME] presets"),
    opt("--served-model-name", help="as vLLM's: the name /v1/models lists and requests must carry"),
    Group(
        "gateway behaviour",
        (
            opt(
                "--api-style",
                help=f"{' or '.join(API_STYLES)}: validate requests and shape streams as vLLM does "
                "(default) or as OpenAI's API does (vLLM extensions refused with a 400, natural EOS, "
                "usage only on the last chunk, no /metrics)",
            ),
            opt(
                "--chunk-tokens",
                metavar="K|K1,K2|K1:W1,K2:W2",
                help="coalesce tokens into chunks: K per chunk, or drawn from the listed values "
                "(with weights after ':')",
            ),
            opt(
                "--reasoning-tokens",
                metavar="K|K1,K2|K1:W1,K2:W2",
                help="a reasoning model: each chat answer first streams this many reasoning_content "
                "tokens (drawn from the listed values, with weights after ':'), within max_tokens",
            ),
            opt(
                "--tool-call-share",
                metavar="SHARE",
                help='requests carrying tools with tool_choice "auto" that end in a tool call '
                '(default 1; "required" or a named function always do)',
            ),
            opt(
                "--keepalive",
                metavar="SECONDS",
                help="write an SSE comment ': ping' at the stream's start and whenever the next chunk "
                "is this many model seconds away",
            ),
            opt(
                "--rpm-limit",
                metavar="N",
                help="requests per minute; beyond it 429 with Retry-After",
            ),
            opt(
                "--tpm-limit",
                metavar="N",
                help="tokens (prompt + max_tokens) per minute; beyond it 429 with Retry-After",
            ),
            opt(
                "--rate-limit-burst",
                metavar="SECONDS",
                help="the rate limits are enforced over this window (default 1: a minute's limit / 60 "
                "may go at once, as OpenAI quantises its limits)",
            ),
        ),
    ),
)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="harness sim",
        description="Simulated vLLM server (OpenAI API, SSE).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(p, SIM_TABLE)
    return p


_INT_FLAGS = (
    "tensor_parallel_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "block_size",
    "num_gpu_blocks",
    "seed",
    "rpm_limit",
    "tpm_limit",
)
_FLOAT_FLAGS = (
    "gpu_memory_utilization",
    "speedup",
    "keepalive_s",
    "rate_limit_burst_s",
    "tool_call_share",
)
_FLAG_NAMES = {"keepalive_s": "--keepalive", "rate_limit_burst_s": "--rate-limit-burst"}


def _flag(name: str) -> str:
    return _FLAG_NAMES.get(name) or "--" + name.replace("_", "-")


def _chunk_tokens(spec: str, name: str = "chunk_tokens") -> tuple[tuple[int, float], ...]:
    """`--chunk-tokens 3`, `1,2,4` (equal weights) or `1:0.5,3:0.5` (also --reasoning-tokens)."""
    pairs: list[tuple[int, float]] = []
    for item in spec.split(","):
        k, sep, w = item.strip().partition(":")
        pairs.append((_number(name, k, int), _number(name, w, float) if sep else 1.0))
    return tuple(pairs)


def _number(name: str, raw: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise UsageError(f"{_flag(name)}: expected {what}, got {raw!r}") from None


def _faults(specs: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for spec in specs:
        kind, sep, rate = spec.partition("=")
        if not sep:
            raise UsageError(
                f"--fault: expected KIND=RATE (kinds: {', '.join(FAULT_KINDS)}), got {spec!r}"
            )
        out[kind.strip()] = _number("fault", rate, float)
    return out


def settings_from_args(ns: argparse.Namespace) -> SimSettings:
    """Turn parsed flags into validated SimSettings. Raises UsageError naming the flag."""
    values: dict[str, Any] = {}  # SimSettings' fields, each checked by its VALIDATORS entry
    for name in (
        "gpu",
        "model",
        "batching",
        "root_path",
        "preset_file",
        "served_model_name",
        "api_style",
        "dtype",
        "kv_cache_dtype",
        *_INT_FLAGS,
        *_FLOAT_FLAGS,
    ):
        raw = getattr(ns, name.removesuffix("_s") if name in _FLAG_NAMES else name)
        if raw is None:
            continue
        if name in _INT_FLAGS:
            raw = _number(name, raw, int)
        elif name in _FLOAT_FLAGS:
            raw = _number(name, raw, float)
        values[name] = raw
    if ns.no_chunked_prefill:
        values["enable_chunked_prefill"] = False
    if ns.no_prefix_caching:
        values["enable_prefix_caching"] = False
    if ns.no_prompt_tokens_details:
        values["enable_prompt_tokens_details"] = False
    if ns.fault:
        values["faults"] = _faults(ns.fault)
    if ns.chunk_tokens is not None:
        values["chunk_tokens"] = _chunk_tokens(ns.chunk_tokens)
    if ns.reasoning_tokens is not None:
        values["reasoning_tokens"] = _chunk_tokens(ns.reasoning_tokens, "reasoning_tokens")
    for name, raw in values.items():
        try:
            values[name] = VALIDATORS[name](raw)
        except ValueError as e:
            flag = "--fault" if name == "faults" else _flag(name)
            raise UsageError(f"{flag}: {e}") from None
    settings = SimSettings(**values)
    try:
        settings.resolved(where="command line")
    except HarnessError as e:
        detail = getattr(e, "detail", str(e))
        key = getattr(e, "key", "")
        raise UsageError(f"{_flag(key)}: {detail}" if key else detail) from None
    return settings


def _port(raw: str) -> int:
    port = _number("port", raw, int)
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise UsageError(f"--port: expected 0..65535 (0 picks a free port), got {raw!r}")
    return port


def _gateway_note(s: SimSettings) -> str:
    """The gateway behaviour switched on, for the start-up line (empty for plain vLLM)."""
    parts = [f"api style {s.api_style}"] if s.api_style != "vllm" else []
    if s.chunk_tokens:
        parts.append("chunks of " + ",".join(f"{k}:{w:g}" for k, w in s.chunk_tokens) + " tokens")
    if s.reasoning_tokens:
        parts.append(
            "reasoning "
            + ",".join(f"{k}:{w:g}" for k, w in s.reasoning_tokens)
            + " tokens per answer"
        )
    if s.keepalive_s is not None:
        parts.append(f"': ping' every {s.keepalive_s:g} model s")
    for name, v in (("rpm", s.rpm_limit), ("tpm", s.tpm_limit)):
        if v is not None:
            parts.append(f"{name} limit {v} (over {s.rate_limit_burst_s:g} s)")
    return "".join(", " + p for p in parts)


async def serve(settings: SimSettings, host: str, port: int, api_key: str | None) -> int:
    from harness.sim.app import start_sim_server

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        server = await start_sim_server(settings, host=host, port=port, api_key=api_key)
    except OSError as e:
        print(f"error: cannot listen on {host}:{port}: {e.strerror}", file=sys.stderr)
        return 1
    r = server.state.resolved
    key_note = f", api key {api_key[:6]}..." if api_key else ""
    print(
        f"harness-sim: {r.model_preset.name} on {r.gpu_preset.name} "
        f"x{settings.tensor_parallel_size}, {settings.batching} batching, max_num_seqs "
        f"{r.max_num_seqs}, max_num_batched_tokens {r.max_num_batched_tokens}, "
        f"{r.num_gpu_blocks} KV blocks ({r.kv_capacity_tokens} tokens), "
        f"speedup {settings.speedup:g}{key_note}{_gateway_note(settings)}",
        file=sys.stderr,
        flush=True,
    )
    print(READY_LINE.format(url=server.url), flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
    engine = server.engine
    print(
        f"harness-sim: {engine.steps} steps, {engine.model_s:.2f} s modelled; fell behind the "
        f"model by {engine.lost_s:.3f} s (CPU-starved if large); steps woke late by p50 "
        f"{engine.wake_late_ms_at(0.5):.2f} ms, p99 {engine.wake_late_ms_at(0.99):.2f} ms",
        file=sys.stderr,
        flush=True,
    )
    # when it fell behind (perf_counter_ns, CLOCK_MONOTONIC: the client's clock on this
    # machine): harness.server.launcher.sim_summary reads it into the run's journal
    print(f"harness-sim: lag ns: {engine.lag_text()}", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str]) -> int:
    """Entry point for `python -m harness sim ARGS`. Returns the exit status."""
    try:
        ns = build_parser().parse_args(argv)
        settings = settings_from_args(ns)
        port = _port(ns.port)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    api_key = ns.api_key or os.environ.get(API_KEY_ENV) or None
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None  # None: asyncio's own
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(serve(settings, ns.host, port, api_key))
