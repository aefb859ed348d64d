"""The quick run: a one-phase scenario document built from `run` flags, no file needed.

`run --rate 8 --num-requests 200 --input-len 512 --output-len 128` becomes the same plain
scenario document a TOML file would hold, and is validated by the same validator; so
`--save-scenario FILE` writes TOML that loads back to the identical plan (same
`Plan.digest()`). `flag_error` says a validator's error in terms of the flag that set the key
(the command validates the document: harness/commands/run.py). Flags that share a name with `vllm bench serve`'s mean what they mean
there (`--burstiness`, `--model`, `--seed`), and vLLM's own names are accepted as aliases
(`--request-rate`, `--num-prompts`, `--random-input-len`, `--random-output-len`,
`--max-concurrency`; the aliases live in harness/commands/run.py).

`--rate inf` (vllm bench serve's default, so also `--num-requests N` with neither --rate nor
--concurrency) means every request is due at once, so what paces
them is the concurrency cap: the quick run writes it as what it is, a closed loop -- N users
for `--num-requests N` (all sent at the start), or `--concurrency C` users (each sends its next
request when its last answer ends, as vLLM's semaphore releases one). A duration needs the cap.

Lengths: a number (`512`) or a short form `uniform:MIN:MAX`, `lognormal:MEAN:SIGMA`,
`normal:MEAN:STD`; vLLM's `--random-range-ratio` widens a number into its uniform range, and
`--dataset-name`/`--dataset-path` replace the lengths with a dataset (harness/config/vllm_flags.py
says how each vLLM flag is read). Errors are UsageErrors naming the flag (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.config.vllm_flags import dataset_table, range_ratio_length
from harness.errors import ConfigError, UsageError

QUICK_NAME = "quick"  # names the result file: results/quick-<UTC time>.json
DEFAULT_INPUT_LEN = "1024"  # as vllm bench serve's --random-input-len default
DEFAULT_OUTPUT_LEN = "128"  # as vllm bench serve's --random-output-len default
PROCESSES = ("poisson", "constant", "gamma")
LENGTH_FORMS = "a number (512), uniform:MIN:MAX, lognormal:MEAN:SIGMA or normal:MEAN:STD"


@dataclass(frozen=True, slots=True)
class QuickArgs:
    """The quick-run flags as given (None: not given)."""

    rate: str | None = None  # requests/s (open loop)
    num_requests: int | None = None
    duration: str | None = None  # "60s", "2m"
    concurrency: int | None = None  # with --rate: a cap on requests in flight; alone: closed loop
    process: str | None = None  # poisson | constant | gamma
    burstiness: float | None = None  # gamma shape, as vllm bench serve's (1 = Poisson)
    input_len: str | None = None
    output_len: str | None = None
    range_ratio: float | None = None  # vllm bench serve's --random-range-ratio
    dataset_name: str | None = None  # vllm bench serve's --dataset-name (random: synthetic)
    dataset_path: str | None = None  # ... and --dataset-path

    def given(self) -> bool:
        return any(
            v is not None
            for v in (
                self.rate,
                self.num_requests,
                self.duration,
                self.concurrency,
                self.process,
                self.burstiness,
                self.input_len,
                self.output_len,
                self.range_ratio,
                self.dataset_name,
                self.dataset_path,
            )
        )


# Where each flag's value lands in the document: a validator error at that key names the flag.
FLAG_OF_KEY = {
    "phases.0.arrival.rate": "--rate",
    "phases.0.arrival.burstiness": "--burstiness",
    "phases.0.arrival.users": "--concurrency",
    "phases.0.max_concurrency": "--concurrency",
    "phases.0.requests": "--num-requests",
    "phases.0.duration": "--duration",
    "workload.prompt_tokens": "--input-len",
    "workload.output_tokens": "--output-len",
    "workload.dataset": "--dataset-path",
}


def parse_length_form(text: str, flag: str) -> dict[str, Any]:
    """`512` -> {dist = "fixed", value = 512}; `uniform:128:1024`, `lognormal:512:0.5`,
    `normal:512:64` -> that distribution's table. Raises UsageError naming the flag."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 1:
            return {"dist": "fixed", "value": int(parts[0])}
        if parts[0] == "uniform" and len(parts) == 3:
            return {"dist": "uniform", "min": int(parts[1]), "max": int(parts[2])}
        if parts[0] == "lognormal" and len(parts) == 3:
            return {"dist": "lognormal", "mean": float(parts[1]), "sigma": float(parts[2])}
        if parts[0] == "normal" and len(parts) == 3:
            return {"dist": "normal", "mean": float(parts[1]), "std": float(parts[2])}
    except ValueError:
        pass
    raise UsageError(f"{flag}: expected {LENGTH_FORMS}, got {text!r}")


def quick_scenario(q: QuickArgs) -> dict[str, Any]:
    """The one-phase scenario document for these flags. Raises UsageError for a combination
    that means nothing (e.g. --burstiness with --process constant)."""
    if (q.num_requests is None) == (q.duration is None):
        raise UsageError(
            "give exactly one of --num-requests N or --duration TIME (e.g. 60s) for a quick run"
        )
    if q.rate is None and q.concurrency is None and q.duration is not None:
        raise UsageError(
            "a quick run for a --duration needs --rate R (requests/s, open loop) or "
            "--concurrency N (N users, each sending when its last answer ends)"
        )
    process = q.process
    if q.rate is None and q.concurrency is None:  # --num-requests N alone: vLLM's default rate inf
        return _document(q, _all_at_once(q), max_concurrency=None)
    if q.rate is not None and _is_infinite(q.rate):
        return _document(q, _all_at_once(q), max_concurrency=None)
    if q.rate is None:
        if process is not None or q.burstiness is not None:
            raise UsageError(
                f"--{'process' if process is not None else 'burstiness'} shapes arrivals at "
                "a --rate; without --rate, --concurrency N is a closed loop"
            )
        arrival: dict[str, Any] = {"process": "closed", "users": q.concurrency}
    else:
        if process is None:  # as vllm bench serve: burstiness other than 1 means gamma
            process = "gamma" if q.burstiness is not None and q.burstiness != 1.0 else "poisson"
        if process not in PROCESSES:
            raise UsageError(f"--process: expected one of {', '.join(PROCESSES)}, got {process!r}")
        if (
            q.burstiness is not None
            and process != "gamma"
            and not (process == "poisson" and q.burstiness == 1.0)
        ):
            raise UsageError(
                f"--burstiness is the gamma process's shape; it does not apply to "
                f"--process {process} (use --process gamma, or drop --burstiness)"
            )
        arrival = {"process": process, "rate": _rate(q.rate)}
        if process == "gamma":
            arrival["burstiness"] = 1.0 if q.burstiness is None else q.burstiness
    return _document(q, arrival, max_concurrency=q.concurrency if q.rate is not None else None)


def _all_at_once(q: QuickArgs) -> dict[str, Any]:
    """`--rate inf` (given, or vLLM's default when no --rate and no --concurrency): the
    closed loop it amounts to."""
    rate = "--rate inf" if q.rate is not None else "no --rate (vLLM's default: inf)"
    if q.process is not None or (
        q.burstiness is not None and q.burstiness != 1.0
    ):  # 1: vLLM's default
        raise UsageError(
            f"--{'process' if q.process is not None else 'burstiness'} shapes the gaps between "
            f"arrivals; {rate} has none (every request is due at once): give --rate R"
        )
    if q.concurrency is not None:
        return {"process": "closed", "users": q.concurrency}
    if q.num_requests is None:
        raise UsageError(
            "--rate inf with --duration sends without end: give --num-requests N (all sent at "
            "once) or --concurrency C (C requests in flight for the duration)"
        )
    return {"process": "closed", "users": q.num_requests}


def _is_infinite(text: str) -> bool:
    return text.strip().lower() in ("inf", "infinity", "+inf")


def _document(q: QuickArgs, arrival: dict[str, Any], max_concurrency: int | None) -> dict[str, Any]:
    phase: dict[str, Any] = {"name": "main"}
    if q.duration is not None:  # a bare number is seconds on the command line
        phase["duration"] = q.duration + "s" if _is_number(q.duration) else q.duration
    else:
        phase["requests"] = q.num_requests
    phase["arrival"] = arrival
    if max_concurrency is not None:
        phase["max_concurrency"] = max_concurrency
    return {
        "name": QUICK_NAME,
        "description": "quick run from command-line flags",
        "seed": 0,
        "workload": _workload(q),
        "phases": [phase],
    }


def _workload(q: QuickArgs) -> dict[str, Any]:
    """The lengths (synthetic, as vLLM's random dataset) or the dataset the flags name."""
    dataset = dataset_table(q.dataset_name or "random", q.dataset_path)
    if dataset is not None:
        if q.input_len is not None or q.range_ratio is not None:
            raise UsageError(
                f"--{'input-len' if q.input_len is not None else 'random-range-ratio'}: the "
                f"dataset's prompts have their own lengths (--dataset-name {q.dataset_name})"
            )
        workload: dict[str, Any] = {"dataset": dataset, "ignore_eos": True}
        if q.output_len is not None:  # as vLLM's --output-len over a dataset's answer lengths
            workload["output_tokens"] = parse_length_form(q.output_len, "--output-len")
        return workload
    input_len = q.input_len or DEFAULT_INPUT_LEN
    output_len = q.output_len or DEFAULT_OUTPUT_LEN
    if q.range_ratio is not None:
        prompt = range_ratio_length(input_len, q.range_ratio, "--input-len", 1)
        output = range_ratio_length(output_len, q.range_ratio, "--output-len", 1)
    else:
        prompt = parse_length_form(input_len, "--input-len")
        output = parse_length_form(output_len, "--output-len")
    return {"prompt_tokens": prompt, "output_tokens": output, "ignore_eos": True}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _rate(text: str) -> float | str:
    """A plain number stays a number in the document (and in a saved TOML); "8/s" stays text."""
    try:
        return float(text)
    except ValueError:
        return text


def flag_error(exc: ConfigError) -> UsageError:
    """A validator error on a quick-run document, said in terms of the flag that set the key."""
    for key, flag in FLAG_OF_KEY.items():
        if exc.key == key or exc.key.startswith(key + "."):
            return UsageError(f"{flag}: {exc.detail}")
    return UsageError(
        f"quick run: {exc.key}: {exc.detail}" if exc.key else f"quick run: {exc.detail}"
    )
