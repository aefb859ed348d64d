"""The result document's shape, as types: what `build_result` writes and every view reads.

`Result` and the TypedDicts under it describe the JSON a run writes (schema_version 7; keys that
version 2 added are `NotRequired`, so a version-1 result is a `Result` too). They are the typed
face of the contract between measuring and viewing; readers keep reading plain dicts.
Blocks with a module of their own are described there and are open objects here:
`server_metrics` (`harness.analysis.server_metrics`), `server_view`
(`harness.analysis.server_view`), the scenario document and the plan's workload notes.

`json_schema()` turns these types (through `harness.analysis.result_json_schema`) into the JSON
Schema published as `harness/schema/result.schema.json` (a test checks the file is what the types say, and that real
results validate against it). No `from __future__ import annotations` here: TypedDict reads
`NotRequired` from the annotations at class creation. Objects allow keys beyond those listed: a newer harness may add
keys, and readers ignore what they do not know.
"""

from typing import Any, NotRequired, TypedDict

from harness.analysis.result import READABLE_SCHEMA_VERSIONS
from harness.analysis.result_json_schema import ExtraKeys, object_schemas


class LatencyStats(TypedDict):
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    p999: float | None
    max: float | None


class Requests(TypedDict):
    planned_or_due: int
    sent: int
    completed: int
    failed: int
    not_sent: int
    retried_attempts: int
    retried_with_retry_after: NotRequired[int]
    retried_with_backoff: NotRequired[int]


class Throughput(TypedDict):
    window_s: float
    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    goodput_requests_per_s: float


class SloVerdict(TypedDict):
    name: str
    limit_ms: float
    kind: str  # "aggregate" or "per_request"
    value_ms: NotRequired[float | None]  # aggregate: the measured statistic
    attainment: NotRequired[float | None]  # per request: the share of requests within the limit
    # "pass": true / false / null (per request: goodput says it) -- a Python keyword, so listed in
    # json_schema's EXTRA_REQUIRED below rather than as a field.


class UsageRejected(TypedDict):
    """Attempts whose server-reported usage counts were not believed (harness.record.usage)."""

    requests: int
    reasons: dict[str, int]  # not_integer, negative, over_max_tokens, over_bytes -> attempts


class ChannelTokens(TypedDict):
    """Output tokens by channel (harness.record.metrics.channel_tokens), successful requests."""

    answer_tokens: int
    answer_requests: int  # requests with at least one answer token
    reasoning_tokens: int
    reasoning_requests: int
    tool_tokens: int
    tool_requests: int
    usage_reasoning_tokens: int | None  # the servers' completion_tokens_details (None: not sent)
    reasoning_disagree_requests: int  # usage's reasoning_tokens != the reasoning events' tokens


class Tokens(TypedDict):
    """Token counts of a block. The `None`s: no request of the block succeeded (nothing to count)."""

    prompt_total: int
    output_total: int
    per_chunk_usage: bool | None
    tokens_per_chunk_mean: float | None
    # NotRequired: version-1 results written before these were added (8f2d316) have neither;
    # the views default them
    output_count_source: NotRequired[str | None]
    itl_per: NotRequired[str | None]
    prompt_synthesis_error: NotRequired[dict[str, Any] | None]
    output_matches_requested_share: NotRequired[float | None]
    output_lengths: NotRequired[dict[str, Any] | None]  # schema 2
    usage_rejected: NotRequired[UsageRejected]  # issue 22: counts left out, and why
    past_max_tokens_requests: NotRequired[int]  # issue 22: more output tokens than asked
    channels: NotRequired[ChannelTokens]  # issue 25: reasoning, answer and tool tokens


class TurnTtft(TypedDict):
    """One turn index of multi-turn sessions (harness.analysis.sessions)."""

    turn_index: int
    requests: int
    completed: int
    ttft_ms: dict[str, float | int | None]  # count, mean, p50, p90, p99, max
    prompt_tokens_mean: float | None  # server usage, completed requests
    ttft_ms_per_1k_prompt_tokens_p50: float | None


class Sessions(TypedDict):
    """Multi-turn sessions counted apart from requests (harness.analysis.sessions)."""

    sessions: int
    requests: int
    sessions_with_a_failed_turn: int
    turns_per_session_mean: float
    turns_per_session_max: int
    ttft_by_turn: list[TurnTtft]


class AgentStep(TypedDict):
    """One step of agent sessions (harness.analysis.agents)."""

    step: int
    requests: int
    completed: int
    tool_call_share: float | None  # completed answers that called a tool
    ttft_ms: dict[str, float | int | None]  # count, mean, p50, p90, p99, max
    ttfo_ms: dict[str, float | int | None]
    ttft_tool_ms: dict[str, float | int | None]
    prompt_tokens_mean: float | None
    ttft_ms_per_1k_prompt_tokens_p50: float | None
    cached_share: float | None  # cached / prompt tokens of the step; null: the server sent none


class Agents(TypedDict):
    """Agent sessions: time split per session, end reasons, latencies by step (issue 25)."""

    sessions: int
    requests: int
    parent_requests: int
    child_requests: int
    ended: dict[str, int]  # final_answer, step_limit, failed, stopped
    steps_per_session_mean: float | None
    steps_per_session_max: int | None
    agent_time_ms: dict[str, float | int | None]  # count, mean, p50, p90, p99, max
    model_time_ms: dict[str, float | int | None]
    tool_time_ms: dict[str, float | int | None]
    subagent_time_ms: dict[str, float | int | None]
    model_time_share: float | None
    by_step: list[AgentStep]
    child_by_step: list[AgentStep]


class HitShareBin(TypedDict):
    """Requests whose hit share (cached / prompt tokens) is in (low, high] (the first bin: 0)."""

    bin: str
    low: float
    high: float
    requests: int
    ttft_ms: dict[str, float | int | None]  # count, p50, p90
    uncached_prompt_tokens_mean: float | None  # prompt tokens the server still computed


class TurnHitShare(TypedDict):
    turn_index: int
    requests: int
    hit_share_mean: float
    cached_tokens_mean: float


class PrefixCache(TypedDict):
    """The prefix cache per request (harness.analysis.prefix_cache), successful requests with a
    prompt count; null in a block where the server reported no cached tokens."""

    requests: int
    requests_without_details: int  # counted as 0 cached (a miss, as older vLLM omits it)
    requests_with_hits: int
    prompt_tokens: int
    cached_tokens: int
    token_hit_share: float | None  # cached / prompt tokens over the block
    hit_share: dict[str, float | None]  # per request: mean, p10, p50, p90, max
    ttft_by_hit_share: list[HitShareBin]
    by_turn: NotRequired[list[TurnHitShare]]  # multi-turn runs only


class EmbeddingsLatency(TypedDict):
    e2e: LatencyStats  # sent -> the read that completed the answer
    e2e_from_schedule: LatencyStats  # intended -> that read


class Embeddings(TypedDict):
    """An embeddings run's block (harness.analysis.embeddings): no token stamps, so its own
    latency and rates."""

    streaming: bool  # always False: the answer comes whole
    note: str  # the line the report prints: no TTFT/ITL
    batch: int  # inputs per request (workload.batch)
    latency_ms: EmbeddingsLatency
    window_s: float
    requests_per_s: float
    inputs_per_s: float
    input_tokens_per_s: float
    input_tokens_per_request: float | None


class PhaseBlock(TypedDict):
    """The summary and each phase: the same block (the summary: name "summary")."""

    name: str
    warmup: bool
    requests: Requests
    throughput: Throughput
    latency_ms: dict[str, LatencyStats]  # keys: harness.catalogue.METRICS_WITH_PERCENTILES
    slo: list[SloVerdict]
    errors: dict[str, int]  # error class -> requests
    error_share: dict[str, float]
    tokens: Tokens
    error_messages: NotRequired[dict[str, Any]]  # schema 2
    index: NotRequired[int]  # phases only
    window_s: NotRequired[list[float] | None]
    arrival: NotRequired[str | None]
    sessions: NotRequired[Sessions]  # multi-turn runs only
    agents: NotRequired[Agents]  # agent runs only (then no `sessions`)
    prefix_cache: NotRequired[PrefixCache | None]  # issue 25; null: not reported by the server
    embeddings: NotRequired[Embeddings]  # issue 25: endpoint = "embeddings" runs only


class LengthHistogram(TypedDict):
    edges: list[int]  # bins [edges[i], edges[i + 1])
    planned: list[int]
    server: list[int]
    server_not_reported: NotRequired[
        int
    ]  # completed requests whose server sent no usage (left out of `server`)


class TraceCurve(TypedDict):
    bin_s: float
    time_scale: float
    trace_per_s: list[float]  # the trace's own rate, in its own time
    planned_per_s: list[float]
    sent_per_s: list[float]
    shape_correlation: float | None


class WorkloadView(TypedDict):
    """What was offered (harness.analysis.workload_view)."""

    bin_s: float
    offered_per_s: list[float]
    sent_per_s: list[float]
    offered_mean_per_s: float
    offered_peak_per_s: float
    sent_peak_per_s: float
    prompt_tokens: LengthHistogram
    output_tokens: LengthHistogram
    sessions_started_per_s: NotRequired[list[float]]
    traces: NotRequired[dict[str, TraceCurve]]


class Timeouts(TypedDict):
    connect: float
    first_token: float
    idle: float
    total: float


class Target(TypedDict):
    kind: str  # "simulator" or "http" (measured), "prediction" (`predict`: the virtual clock)
    base_url: str
    model: str | None
    endpoint: str
    api_key: str | None  # masked: at most its first 6 characters
    api_key_source: str | None
    tls_verify: bool
    timeouts_s: Timeouts
    server: NotRequired[dict[str, Any]]  # what was started: engine, command, settings, env
    simulator: NotRequired[dict[str, Any]]  # the simulator's own account of the run


class Prediction(TypedDict):
    """A `predict` result: what was predicted, on which presets, and how far to trust it
    (harness.orchestrate.predict). Present only on predictions (target.kind "prediction")."""

    gpu: str  # the GPU preset
    model: str  # the model preset
    hf_id: str
    tensor_parallel_size: int
    weights_dtype: str  # "bf16", "fp8", ... (from the model preset's bytes per parameter)
    kv_cache_dtype: str
    max_num_seqs: int  # the effective engine limits (vLLM's defaults applied)
    max_num_batched_tokens: int
    num_gpu_blocks: int
    max_model_len: int
    speedup: float  # 1: the model at real speed
    preset_file: str | None
    validated: bool  # the GPU preset carries a validation against measurements
    validation: str  # that validation in one line, or "not validated"
    left_out: list[str]  # what of the scenario the virtual run does not model
    client: str  # what is zero: network and client time
    steps: int  # engine steps simulated


class Environment(TypedDict):
    harness_version: str
    python: str
    platform: str
    host: str
    cpu_count: int | None
    aiohttp: str
    uvloop: str | None
    numpy: str


class PlanInfo(TypedDict):
    digest: str
    requests_planned: int
    seed: int
    workload: NotRequired[dict[str, Any]]  # schema 2: where prompts and times came from


class Histograms(TypedDict):
    unit: str  # "us"
    lowest: int
    highest: int
    significant_digits: int
    phases: dict[str, dict[str, str]]  # phase -> metric -> encoded HDR histogram
    summary: dict[str, str]


class Client(TypedDict):
    send_lag_ms: LatencyStats
    loop_lag_ms: LatencyStats
    cpu_s: float | None  # None: the journal has no end line (a killed run)
    cpu_share_of_one_core: float | None
    warnings: list[str]
    clock: NotRequired[dict[str, Any]]  # Ray runs: each worker's clock against the driver's
    scale_out: NotRequired[dict[str, Any]]  # schema 9: the workers (harness.analysis.scale_out)


class Files(TypedDict):
    journal: str | None  # None: built from a journal in memory (build_result without a path)
    journal_torn_lines: int  # damaged lines skipped
    journal_duplicate_lines: NotRequired[int]  # repeated records and event lines, read once


class PhaseAccount(TypedDict):
    """One phase's requests: planned, taken up by the engines, final records in the journal."""

    name: str
    planned: int | None  # None: a duration-bound closed loop plans no count
    begun: int | None  # None: no end line (a killed run)
    recorded: int
    missing: int
    extra: int


class ShardAccount(TypedDict):
    shard: list[int]  # [index, count]
    begun: int
    recorded: int  # final records the shard's engine emitted


class Accounting(TypedDict):
    """Every planned request recorded exactly once (harness.analysis.accounting)."""

    balanced: bool | None  # None: no end line to hold the records against
    missing: int
    extra: int
    phases: list[PhaseAccount]
    shards: list[ShardAccount]
    errors: list[str]  # exceptions that escaped a request (harness bugs)
    problems: list[str]


class Clock(TypedDict):
    """A simulated run at speedup K != 1 (harness.analysis.clock): every time and rate in the
    result is the model's (wall x K, rates / K)."""

    time: str  # "model"
    speedup: float
    wall_duration_s: float  # the run's wall-clock length (duration_s is the model's)
    note: str  # the label the views print


class ImpossibleRecords(TypedDict):
    """Records the run could not have produced, set aside (harness.record.journal_vet)."""

    count: int  # records set aside
    checks: dict[str, int]  # check name -> records that failed it first (more_than_planned: excess)
    examples: list[str]  # the first few, named: "seq 3 attempt 0: <what> (<check>)"


class Result(TypedDict):
    schema_version: int
    complete: bool
    stop_reason: str | None
    scenario: dict[str, Any]  # the scenario document after --set, with its seed
    scenario_name: str
    target: Target
    environment: Environment
    started_at: str
    duration_s: float
    plan: PlanInfo
    summary: PhaseBlock
    phases: list[PhaseBlock]
    histograms: Histograms
    timeseries: dict[str, Any]  # step_s and one list per series
    client: Client
    server_metrics: dict[str, Any] | None
    files: Files
    options: NotRequired[dict[str, Any]]
    server_view: NotRequired[dict[str, Any] | None]  # schema 2
    request_adaptations: NotRequired[list[dict[str, Any]]]  # schema 2
    output_lengths_forced: NotRequired[bool]  # schema 2
    workload_view: NotRequired[WorkloadView]  # issue 13: the workload shown
    accounting: NotRequired[Accounting]  # issue 22: records held against the plan
    prediction: NotRequired[Prediction]  # issue 23: a `predict` result, not a measurement
    clock: NotRequired[Clock]  # issue 24: model time of a simulator at speedup != 1
    trustworthy: NotRequired[bool]  # schema 8: false when the journal held impossible records
    impossible_records: NotRequired[ImpossibleRecords]  # schema 8 (harness.record.journal_vet)


# Keys that cannot be TypedDict fields (Python keywords): (type, key) -> JSON schema, required.
EXTRA_KEYS: ExtraKeys = {
    SloVerdict: {"pass": ({"type": ["boolean", "null"]}, True)},
}


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a result document."""
    defs = object_schemas(Result, EXTRA_KEYS)
    root = defs.pop("Result")
    root["properties"]["schema_version"] = {
        "type": "integer",
        "enum": list(READABLE_SCHEMA_VERSIONS),
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "harness result",
        "description": "A run's result (harness.analysis.result_types).",
        **root,
        "$defs": defs,
    }


__all__ = [
    "Accounting",
    "ChannelTokens",
    "Client",
    "Environment",
    "Files",
    "Histograms",
    "LatencyStats",
    "LengthHistogram",
    "PhaseAccount",
    "PhaseBlock",
    "PlanInfo",
    "Prediction",
    "Requests",
    "Result",
    "Sessions",
    "ShardAccount",
    "SloVerdict",
    "Target",
    "Throughput",
    "Tokens",
    "TraceCurve",
    "TurnTtft",
    "UsageRejected",
    "WorkloadView",
    "json_schema",
]
