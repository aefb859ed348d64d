"""`sweep` lives in `harness.orchestrate.sweep`; this module re-exports it for code that imports
`harness.sweep`."""

from harness.orchestrate.sweep import chosen_point, default_out_dir, load_sweep, run_sweep

__all__ = ["chosen_point", "default_out_dir", "load_sweep", "run_sweep"]
