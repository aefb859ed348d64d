"""`python -m harness ...` entry point.

SIGUSR1 prints every thread's Python stack to stderr (faulthandler) and the run goes on: where
a run seems stuck, `kill -USR1 PID` shows where (the integration tests do it before they give
up on a process)."""

import faulthandler
import signal
import sys

from harness.cli import main

if hasattr(signal, "SIGUSR1"):
    faulthandler.register(signal.SIGUSR1, all_threads=True)
sys.exit(main())
