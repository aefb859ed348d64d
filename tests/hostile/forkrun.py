"""A fork server for the hostile matrix: `python -m harness ARGS` a hundred times without a
hundred interpreter start-ups.

Started once (per test module and xdist worker) as `python forkrun.py`, it imports harness and
what a run uses, says `{"ready": ..., "harness": <its path>}`, then reads one line of JSON jobs
at a time on stdin, `{"jobs": [{"argv", "cwd", "env", "stdout", "stderr", "timeout_s"}, ...]}`.
For each job it forks a child that becomes `python -m harness ARGV` in `cwd` with exactly `env`,
its stdout and stderr going to the named files -- the same code path as the command line,
uncaught exceptions and interpreter shutdown included (the child leaves this file's loop and
ends in `sys.exit(main())`). The jobs of a line run at once; the parent waits for all (killing
a child's process group past `timeout_s`, or past KILL_RSS_BYTES resident, so a hostile number
cannot take the machine's memory) and answers one line, `{"results": [...]}`, per job
`{"rc", "maxrss_kb", "wall_s", "timed_out", "memory_killed"}`; `maxrss_kb` is the child's peak
resident set from wait4(2).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # this checkout's harness, not an installed one

import harness  # noqa: E402
import harness.analysis.html  # noqa: E402, F401 - imported once here, not in every child
import harness.cli  # noqa: E402
import harness.client.engine  # noqa: E402, F401
import harness.client.probe  # noqa: E402, F401
import harness.client.tokenize  # noqa: E402, F401
import harness.orchestrate.run  # noqa: E402, F401
import harness.server.scrape  # noqa: E402, F401

harness.cli.build_parser()  # imports every command's module

KILL_RSS_BYTES = 2 * 1024**3  # a child past this is killed (the test's own bound is far lower)
POLL_S = 0.01


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _wait(pids: list[int], timeout_s: float) -> list[dict[str, Any]]:
    """Wait for all `pids` (started together), killing any past `timeout_s` or KILL_RSS_BYTES."""
    t0 = time.monotonic()
    results: dict[int, dict[str, Any]] = {}
    killed: dict[int, str] = {}
    while len(results) < len(pids):
        for pid in pids:
            if pid in results:
                continue
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                results[pid] = {
                    "rc": os.waitstatus_to_exitcode(status),
                    "maxrss_kb": usage.ru_maxrss,
                    "wall_s": time.monotonic() - t0,
                    "timed_out": killed.get(pid) == "time",
                    "memory_killed": killed.get(pid) == "memory",
                }
            elif pid not in killed:
                if time.monotonic() - t0 > timeout_s:
                    killed[pid] = "time"
                elif _rss_bytes(pid) > KILL_RSS_BYTES:
                    killed[pid] = "memory"
                if pid in killed:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        time.sleep(POLL_S)
    return [results[pid] for pid in pids]


def serve() -> dict[str, Any]:
    """The parent's loop: per line `{"jobs": [...]}`, all run at once, answered with
    `{"results": [...]}` in the same order. Returns only in a child, with its job."""
    channel = sys.stdout
    print(json.dumps({"ready": True, "harness": harness.__file__}), file=channel, flush=True)
    for line in sys.stdin.buffer:
        jobs = json.loads(line)["jobs"]
        sys.stdout.flush()
        sys.stderr.flush()
        pids = []
        for job in jobs:
            pid = os.fork()
            if pid == 0:
                return dict(job)
            pids.append(pid)
        timeout_s = max(float(job["timeout_s"]) for job in jobs)
        print(json.dumps({"results": _wait(pids, timeout_s)}), file=channel, flush=True)
    sys.exit(0)


def become(job: dict[str, Any]) -> None:
    """In the child: this job's process group, files, directory and environment."""
    os.setpgid(0, 0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.close(devnull)
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.argv = ["python -m harness", *job["argv"]]


if __name__ == "__main__":
    job = serve()
    become(job)
    sys.exit(harness.cli.main(job["argv"]))
