"""A stand-in for a serving engine's executable in tests: takes vLLM's or llama.cpp's flags and
serves the built-in simulator instead, so the launcher path runs for real.

    python tests/fake_engine.py vllm  [vLLM's api_server flags]
    python tests/fake_engine.py llama [llama-server's flags]

vllm: `--max-num-seqs` as given (8 by default), under `--served-model-name` as vLLM would
(requests that carry the model's path get vLLM's 404); it prints the environment variables the
launcher was asked to pass (VLLM_*, FAKE_VLLM_*), so a test can read them in the server log.
llama: `--parallel` becomes `--max-num-seqs`.
"""

from __future__ import annotations

import argparse
import os
import sys


def _vllm(args: list[str]) -> list[str]:
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--served-model-name")
    a, _ = p.parse_known_args(args)
    for name in sorted(os.environ):
        if name.startswith(("VLLM_", "FAKE_VLLM_")):
            print(f"env {name}={os.environ[name]}", file=sys.stderr, flush=True)
    served = ["--served-model-name", a.served_model_name] if a.served_model_name else []
    return [a.host, str(a.port), str(a.max_num_seqs), *served]


def _llama(args: list[str]) -> list[str]:
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--ctx-size")
    p.add_argument("--alias")
    p.add_argument("--threads")
    p.add_argument("--cont-batching", action="store_true")
    p.add_argument("--metrics", action="store_true")
    a = p.parse_args(args)
    return [a.host, str(a.port), str(a.parallel)]


def main() -> None:
    engine, args = sys.argv[1], sys.argv[2:]
    host, port, seqs, *extra = {"vllm": _vllm, "llama": _llama}[engine](args)
    argv = [sys.executable, "-m", "harness", "sim", "--host", host, "--port", port]
    argv += ["--max-num-seqs", seqs, "--model", "Qwen2.5-7B-Instruct", "--speedup", "20"]
    os.execv(sys.executable, argv + extra)


if __name__ == "__main__":
    main()
