"""`vllm bench serve`'s flags, said in the harness's terms: pure translations, no I/O but
`os.path` checks of the paths given.

Each flag either means what it means in vLLM (the source followed: vLLM 0.32,
`vllm/benchmarks/serve.py` and `vllm/benchmarks/datasets/`) or is refused with one line naming
the harness's equivalent (a UsageError, exit 2):

- `--goodput ttft:500 tpot:50 e2el:2000` (ms): per-request SLOs, `[slo] ttft`, `tpot`, `e2e`;
  goodput is the completed requests per second that met all of them, as in vLLM.
- `--dataset-name random` (the default) is the synthetic workload; `sharegpt` and `custom` (a
  JSON-lines file with `prompt`) with `--dataset-path F` become `[workload] dataset` (formats
  `sharegpt` and `jsonl`), `hf` with a local path the `hf` format; the others point to
  docs/workloads.md.
- `--random-range-ratio R`: lengths uniform over the integers
  [floor(L * (1 - R)), ceil(L * (1 + R))], R in [0, 1), outputs at least 1 -- vLLM's
  definition since 0.8.4 (`RandomDataset.get_sampling_params`); before 0.8.4 it was
  [L * R, L]. vLLM also subtracts the tokenizer's special tokens from L; the harness does not
  (it counts the prompt it sends).
- `--tokenizer PATH` (a tokenizer.json or a folder holding one): `[workload] tokenizer`, exact
  prompt lengths offline through the optional `tokenizers` package; a hub id is refused (the
  harness downloads nothing).
- `--percentile-metrics ttft,tpot,itl,e2el` and `--metric-percentiles 50,99`: what `--brief`
  prints and `--save-result` writes; vLLM's defaults are `ttft,tpot,itl` and `99`.
- `--backend NAME` (the first flag of a pasted `vllm bench serve` command): the endpoint its
  request function posts to (`VLLM_BACKENDS`: vLLM's `ASYNC_REQUEST_FUNCS` in
  `vllm/benchmarks/lib/endpoint_request_func.py`, and the older `benchmarks/
  backend_request_func.py` names lmdeploy, scalellm, sglang, llama.cpp, tgi, tensorrt-llm,
  deepspeed-mii); one with no OpenAI-endpoint equivalent is refused by name
  (`BACKENDS_REFUSED`). `--endpoint` also takes vLLM's paths (`ENDPOINT_NAMES`).
"""

from __future__ import annotations

import math
import os
from typing import Any

from harness.errors import UsageError

GOODPUT_SLO = {"ttft": "ttft", "tpot": "tpot", "e2el": "e2e"}  # vLLM's key -> [slo] key
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")  # --percentile-metrics' names
VLLM_DEFAULT_METRICS = ("ttft", "tpot", "itl")  # vLLM's default for generation
VLLM_DEFAULT_PERCENTILES = (99.0,)  # vLLM's default --metric-percentiles
DATASETS_POINTED = {
    "burstgpt": 'a BurstGPT CSV is a trace: [[phases]] arrival = { process = "trace", '
    'format = "burstgpt", file = "..." }',
    "sonnet": "no sonnet dataset: give the text as a jsonl dataset ([workload] dataset = "
    '{ format = "jsonl", file = "..." })',
    "random-mm": "multimodal prompts are not generated",
    "random-rerank": "reranking requests are not sent (chat and completions only)",
    "prefix_repetition": "shared prefixes are [workload] prefix_groups or system_prompt_tokens",
    "spec_bench": "give its prompts as a jsonl dataset",
}


# `--endpoint`: the harness's names and vllm bench serve's paths -> the harness's endpoint
ENDPOINT_NAMES = {
    "chat": "chat",
    "completions": "completions",
    "responses": "responses",
    "embeddings": "embeddings",
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
}
# vllm bench serve's --backend -> the endpoint its request function posts to
VLLM_BACKENDS = {
    "vllm": "completions",
    "openai": "completions",
    "openai-chat": "chat",
    "openai-embeddings": "embeddings",
    "infinity-embeddings": "embeddings",  # Infinity's OpenAI-shaped /embeddings
    # older vLLM (benchmarks/backend_request_func.py): these posted to /v1/completions too
    "lmdeploy": "completions",
    "scalellm": "completions",
    "sglang": "completions",
    "llama.cpp": "completions",
}
BACKENDS_REFUSED = {
    "openai-audio": "audio transcription requests are not sent",
    "openai-embeddings-chat": "embeddings of chat messages are not sent (--backend "
    "openai-embeddings sends text inputs)",
    "openai-embeddings-clip": "multimodal embedding inputs are not sent",
    "openai-embeddings-vlm2vec": "multimodal embedding inputs are not sent",
    "infinity-embeddings-clip": "multimodal embedding inputs are not sent",
    "vllm-rerank": "reranking requests are not sent",
    "tgi": "TGI's /generate_stream is not spoken; TGI serves the OpenAI API too: "
    "--backend openai-chat",
    "tensorrt-llm": "TensorRT-LLM's generate_stream is not spoken; trtllm-serve serves the "
    "OpenAI API: --backend openai or openai-chat",
    "deepspeed-mii": "DeepSpeed-MII's unstreamed /mii endpoint is not spoken (no token stamps)",
}


def endpoint_name(text: str) -> str:
    """`--endpoint`: chat, completions, responses or embeddings, or the path (vllm bench
    serve's --endpoint takes one); ValueError names the allowed values."""
    try:
        return ENDPOINT_NAMES[text.strip()]
    except KeyError:
        raise ValueError(f"expected one of {', '.join(ENDPOINT_NAMES)}, got {text!r}") from None


def backend_endpoint(backend: str | None, endpoint: str | None) -> str | None:
    """The endpoint for `--backend NAME` (vllm bench serve's) and `--endpoint` (already an
    endpoint name, or None): the backend's endpoint, or `endpoint` when no backend is given;
    a UsageError for a backend with no equivalent, an unknown one, or the two disagreeing."""
    if backend is None:
        return endpoint
    name = backend.strip()
    if name in BACKENDS_REFUSED:
        raise UsageError(
            f"--backend {name}: {BACKENDS_REFUSED[name]}; the harness sends "
            "chat, completions, responses and embeddings requests"
        )
    if name not in VLLM_BACKENDS:
        raise UsageError(
            f"--backend {name}: not a vllm bench serve backend the harness speaks; expected "
            f"one of {', '.join(VLLM_BACKENDS)} (refused, with no equivalent: "
            f"{', '.join(BACKENDS_REFUSED)})"
        )
    wanted = VLLM_BACKENDS[name]
    if endpoint is not None and endpoint != wanted:
        raise UsageError(
            f"--backend {name} posts to the {wanted} endpoint but --endpoint says {endpoint}: "
            "drop one of them"
        )
    return wanted


def goodput_sets(pairs: list[str]) -> list[str]:
    """`--goodput ttft:500 tpot:50` -> `--set` overrides `slo.ttft=500ms`, `slo.tpot=50ms`."""
    sets = []
    for pair in pairs:
        key, sep, value = pair.partition(":")
        slo = GOODPUT_SLO.get(key.strip())
        if not sep or slo is None:
            raise UsageError(
                f"--goodput: expected KEY:MILLISECONDS with KEY in {', '.join(GOODPUT_SLO)} "
                f"(as vllm bench serve's), got {pair!r}"
            )
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not (math.isfinite(ms) and ms >= 0):
            raise UsageError(f"--goodput {key}: expected milliseconds >= 0, got {value!r}")
        sets.append(f"slo.{slo}={ms:g}ms")
    return sets


def range_ratio_length(text: str, ratio: float, flag: str, low_min: int) -> dict[str, Any]:
    """A length of L tokens with vLLM's `--random-range-ratio R`: uniform over
    [floor(L(1-R)), ceil(L(1+R))] (lower end at least `low_min`); R = 0 keeps L fixed."""
    if not (math.isfinite(ratio) and 0.0 <= ratio < 1.0):
        raise UsageError(f"--random-range-ratio: expected a number in [0, 1), got {ratio:g}")
    try:
        length = int(text)
    except ValueError:
        raise UsageError(
            f"--random-range-ratio widens a fixed {flag} (a number of tokens); "
            f"{flag} {text} is a distribution already: drop one of them"
        ) from None
    if ratio == 0.0:
        return {"dist": "fixed", "value": length}
    low = max(low_min, math.floor(length * (1.0 - ratio)))
    high = max(low, math.ceil(length * (1.0 + ratio)))
    return {"dist": "uniform", "min": low, "max": high}


def dataset_table(name: str, path: str | None) -> dict[str, Any] | None:
    """`--dataset-name N --dataset-path F` -> the `[workload] dataset` table (None: `random`,
    the synthetic workload)."""
    if name == "random":
        if path is not None:
            raise UsageError(
                f"--dataset-path {path}: the random dataset reads no file; give "
                "--dataset-name sharegpt (or custom, hf) for it"
            )
        return None
    formats = {"sharegpt": "sharegpt", "custom": "jsonl", "hf": "hf"}
    if name in formats:
        if path is None:
            raise UsageError(f"--dataset-name {name} needs --dataset-path FILE")
        if not os.path.exists(os.path.expanduser(path)):
            raise UsageError(
                f"--dataset-path {path}: no such file (the harness reads datasets from disk; "
                "nothing is downloaded)"
            )
        return {"format": formats[name], "file": os.path.abspath(os.path.expanduser(path))}
    why = DATASETS_POINTED.get(name, "not a dataset vllm bench serve names")
    raise UsageError(
        f"--dataset-name {name}: {why}; the harness reads random (the default), sharegpt, "
        "custom (jsonl) and hf (a local copy): docs/workloads.md"
    )


def tokenizer_file(text: str) -> str:
    """`--tokenizer PATH`: the absolute path of a tokenizer.json (PATH or PATH/tokenizer.json)."""
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise UsageError(
            f"--tokenizer {text}: no tokenizer.json there; the harness reads tokenizers offline: "
            "give the path of the model's tokenizer.json (or its folder), e.g. from "
            "`huggingface-cli download MODEL tokenizer.json`"
        )
    return path


def percentile_metrics(text: str) -> tuple[str, ...]:
    """`--percentile-metrics ttft,tpot,itl,e2el` -> the names, checked."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in VLLM_METRICS]
    if not names or bad:
        raise UsageError(
            f"--percentile-metrics: expected a comma-separated list of {', '.join(VLLM_METRICS)}, "
            f"got {text!r}"
        )
    return names


def metric_percentiles(text: str) -> tuple[float, ...]:
    """`--metric-percentiles 50,90,99` -> the percentiles, each in (0, 100]."""
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
    if not values or not all(0.0 < p <= 100.0 for p in values):
        raise UsageError(
            f"--metric-percentiles: expected comma-separated percentiles in (0, 100], "
            f"e.g. 50,90,99; got {text!r}"
        )
    return values


def percentile_key(p: float) -> str:
    """vLLM's name for a percentile in its keys and labels: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def result_filename(doc: dict[str, Any]) -> str:
    """vLLM's default name for `--save-result`'s file:
    `<backend>-<rate>qps[-concurrency<N>]-<model's last path part>-<date>.json`."""
    rate = doc.get("request_rate")
    rate_text = "inf" if rate in (None, "inf") else f"{float(rate)}"
    conc = doc.get("max_concurrency")
    model = str(doc.get("model_id") or "model").split("/")[-1]
    return (
        f"{doc.get('backend') or 'openai'}-{rate_text}qps"
        f"{f'-concurrency{conc}' if conc is not None else ''}-{model}-{doc.get('date')}.json"
    )


__all__ = [
    "BACKENDS_REFUSED",
    "ENDPOINT_NAMES",
    "VLLM_BACKENDS",
    "VLLM_DEFAULT_METRICS",
    "VLLM_DEFAULT_PERCENTILES",
    "VLLM_METRICS",
    "backend_endpoint",
    "dataset_table",
    "endpoint_name",
    "goodput_sets",
    "metric_percentiles",
    "percentile_key",
    "percentile_metrics",
    "range_ratio_length",
    "result_filename",
    "tokenizer_file",
]
