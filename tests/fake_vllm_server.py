"""A stand-in for `python -m vllm.entrypoints.openai.api_server` in tests: takes vLLM's flags and
serves the built-in simulator instead, under `--served-model-name` as vLLM would (requests that
carry the model's path get vLLM's 404). It prints the environment variables the launcher was
asked to pass, so a test can read them in the server log."""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--served-model-name")
    a, _ = p.parse_known_args()
    for name in sorted(os.environ):
        if name.startswith(("VLLM_", "FAKE_VLLM_")):
            print(f"env {name}={os.environ[name]}", file=sys.stderr, flush=True)
    argv = [
        sys.executable,
        "-m",
        "harness",
        "sim",
        "--host",
        a.host,
        "--port",
        str(a.port),
        "--max-num-seqs",
        str(a.max_num_seqs),
        "--model",
        "Qwen2.5-7B-Instruct",
        "--speedup",
        "20",
    ]
    if a.served_model_name:
        argv += ["--served-model-name", a.served_model_name]
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
