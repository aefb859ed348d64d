"""`python -m harness.sim ARGS`: the same as `python -m harness sim ARGS`."""

import sys

from harness.sim.cli import main

sys.exit(main(sys.argv[1:]))
