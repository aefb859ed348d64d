"""`run`'s command line as tables of options (harness.argtable), in the order --help lists
them: the scenario or the quick-run flags that build one, the target, vllm bench serve's
output and SLO flags, how the run goes, and `--repeat`."""

from __future__ import annotations

import argparse

from harness.argtable import Group, Option, opt
from harness.commands.flags import HTML_OPTION, scenario_options
from harness.commands.run_options import RUN_OPTIONS
from harness.config.sources import FILE_OPTIONS, KEY_ENV_OPTION
from harness.config.target import target_arg
from harness.config.vllm_flags import endpoint_name as vllm_endpoint_name


def endpoint_name(text: str) -> str:
    """`--endpoint`: chat, completions, responses or embeddings, or the path (vllm bench
    serve's --endpoint takes one)."""
    try:
        return vllm_endpoint_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def repeat_count(text: str) -> int:
    """--repeat: a number of runs, or 'auto' (0: --until-decided's budget)."""
    if text == "auto":
        return 0
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of runs or auto, got {text!r}"
        ) from None


QUICK = Group(
    "quick run (no scenario file; the names in parentheses are vllm bench serve's)",
    (
        opt(
            "--rate",
            "--request-rate",
            dest="rate",
            metavar="R",
            help="requests/s, open loop (--process decides the gaps); inf: all due at once, "
            "paced only by --concurrency (a closed loop)",
        ),
        opt(
            "--num-requests",
            "--num-prompts",
            dest="num_requests",
            type=int,
            metavar="N",
            help="how many requests to send (or --duration)",
        ),
        opt("--duration", metavar="TIME", help="how long to send: 60s, 2m (or --num-requests)"),
        opt(
            "--concurrency",
            "--max-concurrency",
            dest="concurrency",
            type=int,
            metavar="N",
            help="with --rate: at most N requests in flight; without: a closed loop of N users",
        ),
        opt(
            "--process",
            choices=("poisson", "constant", "gamma"),
            help="arrival process for --rate (default poisson; gamma when --burstiness is not 1)",
        ),
        opt(
            "--burstiness",
            type=float,
            metavar="B",
            help="gamma shape, as vllm bench serve's: 1 is Poisson, < 1 burstier, > 1 more regular",
        ),
        opt(
            "--input-len",
            "--random-input-len",
            dest="input_len",
            metavar="LEN",
            help="prompt tokens: 512, uniform:128:1024, lognormal:512:0.5, normal:512:64 (default 1024)",
        ),
        opt(
            "--output-len",
            "--random-output-len",
            dest="output_len",
            metavar="LEN",
            help="output tokens, same forms (default 128)",
        ),
        opt(
            "--random-range-ratio",
            dest="range_ratio",
            type=float,
            metavar="R",
            help="as vllm bench serve's (since 0.8.4): lengths uniform over "
            "[floor(L*(1-R)), ceil(L*(1+R))], R in [0, 1)",
        ),
        opt(
            "--dataset-name",
            metavar="NAME",
            help="as vllm bench serve's: random (default, synthetic), sharegpt, custom (JSON lines "
            "with prompt) or hf (a local copy), read from --dataset-path",
        ),
        opt("--dataset-path", metavar="FILE", help="the dataset file for --dataset-name"),
        opt(
            "--save-scenario",
            metavar="FILE.toml",
            help="also write the scenario these flags build as TOML (it loads back to the same plan)",
        ),
    ),
)

TARGET = (
    opt(
        "--target",
        "--base-url",
        dest="target",
        type=target_arg,
        help="base URL: http://host:8000, http://host:8000/v1 or https://taotoken.net/api "
        "(--base-url: vllm bench serve's name)",
    ),
    opt(
        "--model",
        help="model name sent in requests (default: the scenario's, else the server's first)",
    ),
    opt(
        "--endpoint",
        type=endpoint_name,
        metavar="chat|completions|responses|embeddings",
        help="OpenAI endpoint (default chat); vllm bench serve's paths /v1/chat/completions "
        "and /v1/completions mean the same, and /v1/responses, /v1/embeddings",
    ),
    opt(
        "--out",
        help="result path (default <results folder>/<scenario>-<UTC time>.json)",
    ),
    opt(
        "--result-dir",
        metavar="DIR",
        help="the results folder: result, journal and HTML report (default: config.toml "
        "[output] dir, else results/); vllm bench serve's name",
    ),
    opt(
        "--slo",
        action="append",
        default=[],
        metavar="NAME=LIMIT",
        help="an SLO, as [slo] in the scenario (repeatable): METRIC_STAT=LIMIT such as "
        "ttfo_p99=2s is checked on the run's figure; METRIC=LIMIT such as ttfo=2s is a "
        "per-request limit that goodput counts (as --set slo.NAME=LIMIT)",
    ),
)

VLLM_OUTPUT = Group(
    "vllm bench serve's output and SLO flags",
    (
        opt(
            "--goodput",
            nargs="+",
            metavar="KEY:MS",
            help="per-request SLOs in ms, KEY ttft, tpot or e2el: goodput counts the requests "
            "that met all (as --set slo.ttft=500ms ...)",
        ),
        opt(
            "--save-result",
            action="store_true",
            help="also write vllm bench serve's result JSON beside the result",
        ),
        opt(
            "--save-detailed",
            action="store_true",
            help="with --save-result: keep the per-request lists (ttfts, itls, ...)",
        ),
        opt(
            "--result-filename",
            metavar="NAME",
            help="the file name --save-result writes (implies --save-result; default vLLM's "
            "<backend>-<rate>qps-<model>-<date>.json)",
        ),
        opt(
            "--percentile-metrics",
            metavar="LIST",
            help="metrics --brief and --save-result give percentiles of: ttft,tpot,itl,e2el "
            "(default ttft,tpot,itl); implies --brief",
        ),
        opt(
            "--metric-percentiles",
            metavar="LIST",
            help="those percentiles: e.g. 50,90,99 (default 99); implies --brief",
        ),
        opt(
            "--tokenizer",
            metavar="PATH",
            help="a tokenizer.json (or its folder): exact prompt lengths offline "
            "(pip install 'harness[tokenizer]'; as --set workload.tokenizer=PATH)",
        ),
        opt(
            "--ignore-eos",
            action="store_true",
            help="generate exactly the output length (quick runs do already; for a scenario file: "
            "--set workload.ignore_eos=true)",
        ),
        opt(
            "--brief",
            action="store_true",
            help="print a compact block like vllm bench serve's instead of the full report",
        ),
    ),
)

RUN_CONTROL = (
    opt(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="after Ctrl-C/SIGTERM, let in-flight requests finish this long (default 10)",
    ),
    opt(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="skip the one unmeasured request sent before the run to check the target",
    ),
    opt(
        "--strict-request",
        action="store_true",
        help="stop (exit 2) when the target refuses part of the run's request shape (a vLLM "
        "extension such as ignore_eos) instead of dropping it for the run",
    ),
)

TRANSPORT = (
    opt(
        "--http-client",
        choices=("auto", "fast", "aiohttp"),
        default="auto",
        help="HTTP stack: fast (lean HTTP/1.1 client, http:// only), aiohttp (TLS, proxies, "
        "odd servers), auto (default: fast for http://, aiohttp for https://)",
    ),
    opt(
        "--workers",
        metavar="N|auto",
        help="split the plan over N worker processes on this machine (auto: from the "
        "plan's peak streams and request rate, at most one per CPU)",
    ),
    opt(
        "--ray",
        metavar="auto|ADDRESS",
        help="run the worker shards as Ray tasks (pip install 'harness[ray]'); auto "
        "starts or joins a local Ray, ADDRESS joins a cluster (ray://host:10001)",
    ),
    opt(
        "--insecure",
        action="store_true",
        help="do not verify the server's TLS certificate (recorded in the result)",
    ),
)

EXPLAIN_AND_PROMETHEUS = (
    opt(
        "--explain",
        action="store_true",
        help="print where each target value comes from (flag, scenario, settings.json, "
        "config.toml, default) and stop without running",
    ),
    opt(
        "--prometheus-port",
        type=int,
        metavar="N",
        help="serve the client's live counters and TTFT/ITL/E2E histograms at "
        "http://HOST:N/metrics while the run goes (docs/grafana-dashboard.json shows them "
        "beside vLLM's); 0: any free port",
    ),
    opt(
        "--prometheus-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --prometheus-port (default 127.0.0.1; 0.0.0.0 for a Prometheus "
        "on another machine)",
    ),
    opt(
        "--prometheus-linger",
        type=float,
        metavar="SECONDS",
        help="keep --prometheus-port's endpoint up this long after the run, with the final "
        "counts, so a scraper's last poll sees them (default 30: two 15 s scrapes; 0: stop "
        "with the run)",
    ),
)

REPEAT = (
    opt(
        "--repeat",
        type=repeat_count,
        default=1,
        metavar="N",
        help="run N times in a row, one result each (OUT-1.json ... OUT-N.json with --out "
        "OUT.json, else results/repeat-<UTC time>/run-K.json): a side of `compare` with the "
        "noise between runs measured; with --until-decided, at most N ('auto': 10)",
    ),
    opt(
        "--until-decided",
        metavar="BASELINE",
        help="run again until `compare BASELINE these-runs` can decide (pass or regression) or "
        "--repeat runs are spent; exit as compare does (0, 1, 3 undecided)",
    ),
    opt(
        "--max-regression",
        action="append",
        default=[],
        metavar="METRIC=PERCENT",
        help="--until-decided: compare's gate (repeatable; default: compare's defaults)",
    ),
)

RUN_TABLE: tuple[Option | Group, ...] = (
    opt(
        "scenario", nargs="?", help="scenario TOML file (or none: a quick run from the flags below)"
    ),
    QUICK,
    *TARGET,
    VLLM_OUTPUT,
    *scenario_options("phases.0.duration=5s"),
    *RUN_CONTROL,
    *FILE_OPTIONS,
    *TRANSPORT,
    KEY_ENV_OPTION,
    *EXPLAIN_AND_PROMETHEUS,
    HTML_OPTION,
    *RUN_OPTIONS,
    *REPEAT,
)

__all__ = ["RUN_TABLE", "endpoint_name", "repeat_count"]
