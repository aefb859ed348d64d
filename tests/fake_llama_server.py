"""A stand-in for llama.cpp's `llama-server` in tests: takes its flags and serves the built-in
simulator instead (--parallel becomes --max-num-seqs), so the launcher path runs for real."""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
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
    a = p.parse_args()
    os.execv(
        sys.executable,
        [
            sys.executable,
            "-m",
            "harness",
            "sim",
            "--host",
            a.host,
            "--port",
            str(a.port),
            "--max-num-seqs",
            str(a.parallel),
            "--model",
            "Qwen2.5-7B-Instruct",
            "--speedup",
            "20",
        ],
    )


if __name__ == "__main__":
    main()
