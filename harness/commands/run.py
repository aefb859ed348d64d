"""`harness run SCENARIO.toml`: measure a target (the built-in simulator when none is given)."""

from __future__ import annotations

import argparse

from harness.config.resolve import add_file_args, add_key_env_arg
from harness.orchestrate.run import RunArgs, run_command


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run a scenario and write a result JSON",
                       description="Run a scenario against a target and write a result JSON. With no target "
                       "anywhere, the built-in simulator is started on 127.0.0.1.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n"
                       "  python -m harness run scenarios/burst.toml\n"
                       "  python -m harness run scenarios/steady.toml --target http://127.0.0.1:8000 --model Qwen2.5-7B-Instruct\n"
                       "  python -m harness run scenarios/steady.toml --set phases.0.duration=5s --out r.json\n"
                       "  python -m harness report r.json")
    p.add_argument("scenario", help="scenario TOML file")
    p.add_argument("--target", help="base URL: http://host:8000, http://host:8000/v1 or https://taotoken.net/api")
    p.add_argument("--model", help="model name sent in requests (default: the scenario's, else the server's first)")
    p.add_argument("--endpoint", choices=("chat", "completions"), help="OpenAI endpoint (default chat)")
    p.add_argument("--out", help="result path (default results/<scenario>-<UTC time>.json)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario value by dotted path, e.g. phases.0.duration=5s (repeatable)")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--quiet", action="store_true", help="print only the result path")
    p.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                   help="after Ctrl-C/SIGTERM, let in-flight requests finish this long (default 10)")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="skip the one unmeasured request sent before the run to check the target")
    p.add_argument("--strict-request", action="store_true",
                   help="stop (exit 2) when the target refuses part of the run's request shape (a vLLM "
                   "extension such as ignore_eos) instead of dropping it for the run")
    add_file_args(p)
    p.add_argument("--http-client", choices=("auto", "fast", "aiohttp"), default="auto",
                   help="HTTP stack: fast (lean HTTP/1.1 client, http:// only), aiohttp (TLS, proxies, "
                   "odd servers), auto (default: fast for http://, aiohttp for https://)")
    p.add_argument("--workers", metavar="N|auto",
                   help="split the plan over N worker processes on this machine (auto: from the "
                   "plan's peak streams and request rate, at most one per CPU)")
    p.add_argument("--ray", metavar="auto|ADDRESS",
                   help="run the worker shards as Ray tasks (pip install 'harness[ray]'); auto "
                   "starts or joins a local Ray, ADDRESS joins a cluster (ray://host:10001)")
    p.add_argument("--insecure", action="store_true",
                   help="do not verify the server's TLS certificate (recorded in the result)")
    add_key_env_arg(p)
    p.add_argument("--explain", action="store_true",
                   help="print where each target value comes from (flag, scenario, settings.json, "
                   "config.toml, default) and stop without running")
    p.add_argument("--html", nargs="?", const="", default=None, metavar="OUT.html",
                   help="also write the HTML report (default: next to the result, r.json -> r.html)")
    p.set_defaults(func=_main)


def _main(a: argparse.Namespace) -> int:
    return run_command(RunArgs(scenario=a.scenario, target=a.target, model=a.model, endpoint=a.endpoint,
                               out=a.out, sets=a.sets, seed=a.seed, quiet=a.quiet, grace_s=a.grace,
                               probe=a.probe, settings=a.settings, config=a.config,
                               insecure=a.insecure, explain=a.explain, api_key_env=a.api_key_env,
                               http_client=a.http_client, workers=a.workers, ray=a.ray, html=a.html,
                               strict_request=a.strict_request))
