"""Capacity planning, the pure part: SLOs, the verdict on a probe's steady part, the rate
search, the service-rate cap and replica counts. This module names them all (callers write
`cap.judge`, `cap.RateSearch`); they live in `capacity_verdict` (SLOs, `judge`),
`capacity_evidence` (`Probe`, the service-rate cap, a speed change) and `capacity_search`
(`RateSearch`, `ProbeSizer`, `search_capacity`). `harness.commands.capacity` runs probes over
HTTP and `harness.orchestrate.virtual_capacity` on the simulator's virtual clock; everything
here is testable without a server.

Theory of operation
-------------------
`RateSearch` holds the highest rate that met every SLO (`lo`) and the lowest that did not
(`hi`). Without a failure yet it doubles the rate; once both exist it bisects geometrically
(sqrt(lo * hi)) until hi / lo - 1 <= the tolerance, or the probe budget runs out. The answer
is then confirmed by longer runs at `lo`; a failed confirmation makes it the new `hi` and the
search goes on below it. Before that, a failure at `hi` far worse than `lo` measured
(`outlier_failure`) is run again: the evidence the answer cites is a failure seen twice. When
the second run passes, a third decides (two passes of three: an outlier, and the search goes on
above it; two failures: the failure stands). A single pass never outvotes a failure: a noisy
tail that fails most runs would otherwise be searched past. Every run, probe or confirmation, counts against one budget of
SEARCH_BUDGET_FACTOR x --max-probes; a search that would need more gives up without an answer.

A probe passes (`judge`) when, over its steady part (`harness.analysis.steady`: after the
fill-up), the server served what was offered and every SLO held: latency percentiles and the
error share. A probe stopped early as a runaway queue (`harness.analysis.runaway`) fails.
A sustainable rate is never above what the server was seen to serve when it could not keep
up: `service_rate_cap` returns the highest rate served by a probe that fell behind, and the
answer is capped there.
"""

from __future__ import annotations

from harness.analysis.capacity_evidence import (
    SPEED_CHANGE,
    Probe,
    SpeedChange,
    binding_slo,
    detail_number,
    service_evidence,
    service_rate_cap,
    service_rate_probe,
    speed_change,
)
from harness.analysis.capacity_search import (
    DEFAULT_HEADROOM,
    DEFAULT_MAX_PROBES,
    DEFAULT_TOLERANCE,
    OUTLIER_FACTOR,
    SEARCH_BUDGET_FACTOR,
    ProbeFn,
    ProbeSizer,
    RateSearch,
    SearchResult,
    outlier_failure,
    replicas_needed,
    search_capacity,
)
from harness.analysis.capacity_verdict import (
    DEFAULT_ERROR_SHARE,
    ERROR_SHARE,
    LONGER_MIN_SERVED_SHARE,
    LONGER_RETRIES,
    NO_REQUESTS,
    SERVED,
    STOPPED,
    Slo,
    Verdict,
    client_lag_ms,
    error_share_slo,
    judge,
    parse_slo,
    parse_target_load,
    slo_values,
    slos_from,
    with_error_share,
    within_lateness,
    worth_a_longer_run,
)

__all__ = [
    "DEFAULT_ERROR_SHARE",
    "DEFAULT_HEADROOM",
    "DEFAULT_MAX_PROBES",
    "DEFAULT_TOLERANCE",
    "ERROR_SHARE",
    "LONGER_MIN_SERVED_SHARE",
    "LONGER_RETRIES",
    "NO_REQUESTS",
    "OUTLIER_FACTOR",
    "Probe",
    "ProbeFn",
    "ProbeSizer",
    "RateSearch",
    "SEARCH_BUDGET_FACTOR",
    "SERVED",
    "SPEED_CHANGE",
    "STOPPED",
    "SearchResult",
    "Slo",
    "SpeedChange",
    "Verdict",
    "binding_slo",
    "client_lag_ms",
    "detail_number",
    "error_share_slo",
    "judge",
    "outlier_failure",
    "parse_slo",
    "slos_from",
    "parse_target_load",
    "replicas_needed",
    "search_capacity",
    "service_evidence",
    "service_rate_cap",
    "service_rate_probe",
    "slo_values",
    "speed_change",
    "with_error_share",
    "within_lateness",
    "worth_a_longer_run",
]
