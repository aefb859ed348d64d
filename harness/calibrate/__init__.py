"""`sim calibrate`: fit the simulator's step-time coefficients to measured runs, then check
them by replaying held-out runs on the virtual clock.

Theory of operation
-------------------
1. **Load** each run (a result JSON with its journal beside it, or a journal): per request the
   intended send time, the server's prompt and output token counts and every token stamp; the
   run's `max_num_seqs` (llama.cpp's `--parallel`) from the sweep's `summary.json` beside it,
   the scenario's `[sim]` table, or the peak of the running gauge the run scraped; and its
   measured output tokens/s, mean ITL and mean TTFT (the harness's own result figures).
2. **Steps.** Every active stream gets one token per engine step, so the token stamps of all
   streams fall into clusters, one per step. A cluster's duration is the gap since the last
   cluster (or since the newest request in it was sent, if the engine was idle), and its work
   is known: one decode token (and its context) per stream that already had tokens, a whole
   prompt for each stream whose first token it is (llama.cpp prefills a prompt in one step,
   alongside the others' decodes).
3. **Fit** the roofline's TUNABLE coefficients (efficiencies, per-step and per-sequence
   overheads, the GEMM's fixed cost) to those step durations of the fit runs: Nelder-Mead in
   log space on a Cauchy loss of log(model / measured), so descheduled steps on a shared
   machine do not drag the fit.
4. **Contention.** The typical step is what (3) fits; a mean also carries the stalls other
   jobs cause. One factor, the geometric mean over the fit runs of measured / replayed mean
   ITL, scales every time coefficient (efficiencies divided, overheads multiplied).
5. **Replay** every run's arrivals (same times, same token counts) through the scheduler on
   the virtual clock with the fitted roofline, and compare throughput, mean ITL and mean
   TTFT with the measurement; held-out runs are the prediction test.

Nothing here opens a socket or sleeps; a run of 40 requests replays in well under a second.

Package layout, one module per step: `load` (1), `steps` (2), `fit` (3, 4), `replay` (5, and
`calibrate`, which runs them all), `report` (the error table and the preset text).
"""

from harness.calibrate.fit import DEFAULT_FIT, DEFAULT_FIT_TILED, fit_steps, scaled
from harness.calibrate.load import MeasuredRun, load_run
from harness.calibrate.replay import Calibration, Prediction, calibrate, replay, virtual_metrics
from harness.calibrate.report import calibrated_gpu, calibration_record, error_table, preset_text
from harness.calibrate.steps import Steps, observed_steps

__all__ = [
    "DEFAULT_FIT",
    "DEFAULT_FIT_TILED",
    "Calibration",
    "MeasuredRun",
    "Prediction",
    "Steps",
    "calibrate",
    "calibrated_gpu",
    "calibration_record",
    "error_table",
    "fit_steps",
    "load_run",
    "observed_steps",
    "preset_text",
    "replay",
    "scaled",
    "virtual_metrics",
]
