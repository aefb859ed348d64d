"""`harness plan SCENARIO.toml --slo ... --target-load 50rps --gpus H100-SXM,L40S,L4`: which GPUs,
max_num_seqs, tensor parallel size and how many replicas serve the load within the SLOs, and
at what cost -- searched on the simulator's virtual clock before anything is deployed
(`harness.orchestrate.planner`). Writes a JSON plan and prints the ranked table."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.analysis import capacity as cap
from harness.analysis.numbers import plural
from harness.errors import UsageError
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.stopping import CommandStop, Interrupted, stop_on_signals
from harness.safe_write import write_file
from harness.termtext import terminal_safe
from harness.units import parse_duration_s, parse_percent

PLAN_KIND = "deployment_plan"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="plan a deployment: GPUs x max_num_seqs x tensor parallel x replicas, by cost",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness plan scenarios/steady.toml --slo ttft_p99=2s --slo itl_p99=80ms \\\n"
        "      --target-load 50rps --gpus H100-SXM,L40S,L4 --max-num-seqs 64,256 \\\n"
        "      --price H100-SXM=2.5 --price L40S=1.0 --price L4=0.7 --html plan.html\n"
        "  python -m harness plan scenarios/trace.toml --slo ttft_p99=1s --gpus L4,L40S --tp 1,2 --verify\n"
        "  python -m harness plan scenarios/steady.toml --slo ttft_p99=2s --slo tpot_p99=50ms \\\n"
        "      --target-load 10rps --gpus H100-SXM --tp 2,4 --pp 1,2 --confidence 0.8",
    )
    p.add_argument(
        "scenario",
        help="scenario TOML: its plan (arrivals, lengths, traces, length files) is the workload",
    )
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC_STAT=LIMIT",
        help="e.g. ttft_p99=2s or error_share=1%% (repeatable); default: the scenario's aggregate [slo]",
    )
    p.add_argument(
        "--target-load",
        metavar="RATE",
        help="requests/s to serve (default: the scenario's own rate)",
    )
    p.add_argument(
        "--gpus", help="GPU presets, comma-separated (default: the scenario's [sim] gpu)"
    )
    p.add_argument(
        "--max-num-seqs", help="values to try, comma-separated (default: vLLM's default per GPU)"
    )
    p.add_argument(
        "--tp", default="1", help="tensor parallel sizes to try, comma-separated (default 1)"
    )
    p.add_argument(
        "--pp",
        default="1",
        help="pipeline parallel sizes to try, comma-separated (default 1): vLLM's "
        "--pipeline-parallel-size, layers split into stages of tp GPUs each",
    )
    p.add_argument(
        "--model",
        help="model preset, Hugging Face model folder, config.json, or a repo in the local HF "
        "cache (default: the scenario's [sim] model)",
    )
    p.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="GPU=USD_PER_HOUR",
        help="price of one GPU for an hour, e.g. H100-SXM=2.5 (repeatable); ranks by cost",
    )
    _sizing_args(p)
    p.set_defaults(func=_main)


def _sizing_args(p: argparse.ArgumentParser) -> None:
    """How replicas are sized and what is written: headroom, margin, limits, outputs."""
    p.add_argument("--headroom", default="20%", help="spare capacity per replica (default 20%%)")
    p.add_argument(
        "--margin",
        default="none",
        metavar="none|median|worst|pNN|N%",
        help="size replicas for the capacity divided by 1 + the GPU class's error on held-out "
        "published measurements (median or worst; docs/validation.md), by the NN-th percentile "
        "of predicted/published over held-out capacity checks (pNN, as --confidence), or by "
        "1 + N%% (default none)",
    )
    p.add_argument(
        "--confidence",
        metavar="SHARE",
        help="size replicas so that this share (0.5..0.95, e.g. 0.8) of held-out capacity checks "
        "under an SLO would have met it (docs/validation.md, 'How predict and plan use them')",
    )
    p.add_argument(
        "--max-replicas",
        type=int,
        default=100,
        help="more replicas than this is not an option (default 100)",
    )
    p.add_argument(
        "--min-duration", help="shortest virtual probe (default: the scenario's measured phases)"
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="run the top pick's per-replica load through the real HTTP path against the simulator",
    )
    p.add_argument("--html", metavar="OUT", help="also write the cost/latency frontier as HTML")
    p.add_argument(
        "--out",
        metavar="JSON",
        help="where the plan goes (default results/plan-<name>-<time>.json)",
    )
    p.add_argument("--quiet", action="store_true")


def _list(text: str | None, flag: str, cast: Any) -> list[Any]:
    if text is None:
        return []
    try:
        out = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(
            f"{flag} {text!r}: expected comma-separated values such as 64,128,256"
        ) from None
    if not out:
        raise UsageError(f"{flag}: expected at least one value")
    return out


def _positive_int(x: str) -> int:
    v = int(x)
    if v < 1:
        raise ValueError(x)
    return v


def _prices(items: list[str], known: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        gpu, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if not sep or price < 0 or price != price:
            raise UsageError(f"--price {item!r}: expected GPU=USD_PER_HOUR such as H100-SXM=2.5")
        if gpu not in known:
            raise UsageError(f"--price {item!r}: unknown GPU {gpu!r}; allowed: {', '.join(known)}")
        out[gpu] = price
    return out


def _slo_doc(s: cap.Slo) -> dict[str, Any]:
    return {
        "name": s.name,
        "metric": s.metric,
        "stat": s.stat,
        "limit_ms": s.limit_ms,
        "limit_share": s.limit_share,
        "limit": s.limit_text(),
        "limit_value": s.limit_share if s.is_share else s.limit_ms,
    }


@dataclass
class _Inputs:
    """What the command line and the scenario ask for, checked (UsageError otherwise)."""

    scn: Any
    form: Any
    base: Any
    gpus: list[str]
    seqs: list[int | None]
    tps: list[int]
    pps: list[int]
    prices: dict[str, float]
    slos: list[cap.Slo]
    target: float
    headroom: float
    min_duration: float | None
    margin: str


def _gpus_and_model(a: argparse.Namespace, base: Any) -> tuple[list[str], list[str]]:
    """The GPUs to try and every GPU the presets know; refuses an unknown GPU or model
    (naming the allowed ones)."""
    from harness.sim.presets import load_presets

    presets = load_presets(base.preset_file)
    known = list(presets.gpus)
    gpus = _list(a.gpus, "--gpus", str) or [base.gpu]
    for g in gpus:
        if g not in presets.gpus:
            raise UsageError(f"--gpus: unknown GPU {g!r}; allowed: {', '.join(known)}")
    if a.model is not None and a.model not in presets.models:
        from harness.sim.hf_config import find_config

        if find_config(a.model) is None:
            raise UsageError(
                f"--model: unknown model {a.model!r}; allowed: {', '.join(presets.models)}, or a "
                "Hugging Face model folder, its config.json, or a repo name in the local cache"
            )
        presets.model(a.model, "--model", "model")  # a bad config.json: its file and key
    return gpus, known


def _slos(a: argparse.Namespace, scn: Any) -> list[cap.Slo]:
    return cap.slos_from(a.slo, scn.slo)


def _target(a: argparse.Namespace, form: Any) -> float:
    if a.target_load:
        return cap.parse_target_load(a.target_load)
    if form.own_rate is not None:
        return float(form.own_rate)
    raise UsageError(
        f"{a.scenario}: its first measured phase is a closed loop, which has no rate to plan "
        "for; give --target-load RATE (e.g. 50rps)"
    )


def _margin(a: argparse.Namespace) -> str:
    """--margin (none, median, worst, pNN, N%) or --confidence SHARE as one margin string."""
    from harness.sim.validation.errors import MARGIN_CHOICES, confidence_margin
    from harness.sim.validation.intervals import parse_confidence

    if a.confidence is not None:
        if a.margin != "none":
            raise UsageError("--confidence and --margin: give one of them")
        try:
            margin = f"p{parse_confidence(a.confidence) * 100:g}"
            confidence_margin(margin)  # the stored intervals have the checks it needs
        except ValueError as exc:
            raise UsageError(f"--confidence {a.confidence}: {exc} (e.g. 0.8)") from None
        return margin
    if a.margin.lower().startswith("p"):
        try:
            confidence_margin(a.margin)
        except ValueError as exc:
            raise UsageError(f"--margin {a.margin}: {exc} (e.g. p80)") from None
    elif a.margin not in MARGIN_CHOICES:
        try:
            given = parse_percent(a.margin)
        except ValueError:
            given = -1.0
        if not 0 <= given <= 10:
            raise UsageError(
                f"--margin {a.margin}: expected none, median, worst, pNN or a percentage 0%..1000%"
            )
    return str(a.margin)


def _inputs(a: argparse.Namespace) -> _Inputs:
    from harness.orchestrate.virtual_capacity import probe_form
    from harness.sim.settings import SimSettings

    scn = load_scenario(a.scenario)
    form = probe_form(scn, virtual=True)  # what cannot run as a probe is refused here
    base = SimSettings.from_mapping(scn.sim, scn.path)
    gpus, known = _gpus_and_model(a, base)
    seqs: list[int | None] = _list(a.max_num_seqs, "--max-num-seqs", _positive_int) or [
        base.max_num_seqs
    ]
    tps = _list(a.tp, "--tp", _positive_int)
    pps = _list(a.pp, "--pp", _positive_int)
    prices = _prices(a.price, known)
    slos = _slos(a, scn)
    target = _target(a, form)
    try:
        headroom = parse_percent(a.headroom)
        min_duration = (
            parse_duration_s(a.min_duration, allow_zero=False) if a.min_duration else None
        )
    except ValueError as exc:
        raise UsageError(f"--headroom/--min-duration: {exc}") from None
    if not 0 <= headroom < 1:
        raise UsageError(f"--headroom {a.headroom}: expected 0%..99%")
    margin = _margin(a)
    if a.max_replicas < 1:
        raise UsageError(f"--max-replicas {a.max_replicas}: expected at least 1")
    return _Inputs(
        scn, form, base, gpus, seqs, tps, pps, prices, slos, target, headroom, min_duration, margin
    )


def _main(a: argparse.Namespace) -> int:
    from harness.orchestrate.planner import configs, plan_deployment, rank

    i = _inputs(a)

    def say(*parts: object) -> None:
        if not a.quiet:
            print(terminal_safe(" ".join(map(str, parts))), file=sys.stderr, flush=True)

    candidates = configs(i.gpus, i.seqs, i.tps, i.pps)
    if i.form.describe():
        say(i.form.describe())
    say(
        f"plan: {len(candidates)} configurations of {a.model or i.base.model} for {i.target:g} "
        "req/s, on the simulator's virtual clock"
    )
    started = time.monotonic()
    planned: list[Any] = []  # the configurations done, for a plan a signal stops

    def progress(o: Any) -> None:
        planned.append(o)
        what = (
            f"{o.capacity_requests_per_s:.3g} req/s per replica -> {plural(o.replicas, 'replica')}"
            if o.capacity_requests_per_s
            else "-"
        )
        say(
            f"  {o.config.label()}: {what}{'' if o.feasible else '; not feasible: ' + o.reason} "
            f"({o.probes} virtual probes, {time.monotonic() - started:.0f}s so far)"
        )

    a.margin = i.margin  # the plan document records the margin it sized with
    with stop_on_signals() as signals:  # SIGINT/SIGTERM: what finished, no pick, 130/143
        try:
            options = plan_deployment(
                a.scenario,
                i.slos,
                i.target,
                candidates,
                i.headroom,
                i.prices,
                a.model,
                i.min_duration,
                progress,
                a.max_replicas,
                i.margin,
            )
        except Interrupted:
            options = rank(planned)
        return _finish(
            a,
            i.scn,
            options,
            len(candidates),
            i.gpus,
            i.base,
            i.slos,
            i.target,
            i.headroom,
            i.prices,
            started,
            model_name=a.model or i.base.model,
            signals=signals,
        )


def _finish(
    a: argparse.Namespace,
    scn: Any,
    options: list[Any],
    configurations: int,
    gpus: list[str],
    base: Any,
    slos: list[cap.Slo],
    target: float,
    headroom: float,
    prices: dict[str, float],
    started: float,
    model_name: str,
    signals: CommandStop,
) -> int:
    """The plan document (written, printed); `--verify` runs the top pick over HTTP first. A
    plan a signal stopped keeps the configurations done, marked `interrupted`, with no pick."""
    from harness.analysis.plan_report import render_plan_html, render_plan_text
    from harness.orchestrate.plan_verify import verify
    from harness.orchestrate.planner import calibration_text
    from harness.sim.validation.errors import validation_line

    model = next((o.model for o in options if o.model), model_name)
    calibration = {g: calibration_text(g, base.preset_file) for g in gpus}
    doc: dict[str, Any] = {
        "kind": PLAN_KIND,
        "scenario": a.scenario,
        "model": model,
        "target_requests_per_s": target,
        "headroom": headroom,
        "slos": [_slo_doc(s) for s in slos],
        "prices_per_gpu_hour": prices,
        "options": [o.as_dict() for o in options],
        "calibration": calibration,
        "validation": {g: validation_line(g) for g in gpus},
        "margin": a.margin,
        "notes": sorted(
            {f"{k} is not modelled on the virtual clock" for o in options for k in o.ignored}
        ),
        "search_s": time.monotonic() - started,
        "verification": None,
        "configurations": configurations,
    }
    top = options[0] if options and options[0].feasible and not signals.is_set() else None
    if a.verify and top is not None:
        try:
            doc["verification"] = verify(a.scenario, top, slos, model, signals)
        except Interrupted:
            doc["verification_cut_short"] = True
    if signals.is_set():
        doc["interrupted"], doc["stop_reason"], top = signals.name, signals.reason, None
    out = (
        Path(a.out)
        if a.out
        else Path("results")
        / f"plan-{scn.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    write_file(out, orjson.dumps(doc, option=orjson.OPT_INDENT_2))  # harness.safe_write
    print(terminal_safe(render_plan_text(doc)))
    if a.html:
        from harness.analysis.html import write_html

        write_html(Path(a.html), render_plan_html(doc))
        print(f"HTML: {a.html}")
    print(out)
    if signals.is_set():
        return signals.status
    if a.verify and doc["verification"] is not None and not doc["verification"]["passed"]:
        return 1
    return 0 if top is not None else 1
