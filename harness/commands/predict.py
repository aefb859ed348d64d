"""`harness predict SCENARIO.toml --gpu H100-SXM --model ... --tp 2`: the scenario on that
hardware, predicted on the simulator's virtual clock in seconds and written as a run's result,
marked as a prediction (`harness.orchestrate.predict`)."""

from __future__ import annotations

import argparse

from harness.argtable import Option, add_options, opt
from harness.commands.flags import HTML_OPTION, scenario_options
from harness.orchestrate.predict import PredictArgs, predict_command

PREDICT_TABLE: tuple[Option, ...] = (
    opt("scenario", help="scenario TOML file: its plan is the workload"),
    opt("--gpu", help="GPU preset (default: the scenario's [sim] gpu)"),
    opt(
        "--model",
        help="model preset, Hugging Face model folder, config.json, or a repo in the local HF "
        "cache (default: the scenario's [sim] model)",
    ),
    opt("--tp", metavar="N", help="tensor parallel size (default: the scenario's [sim], else 1)"),
    opt(
        "--max-num-seqs",
        metavar="N",
        help="vLLM's max_num_seqs (default: the scenario's [sim], else vLLM's default for the GPU)",
    ),
    *scenario_options("sim.max_num_batched_tokens=4096"),
    opt("--out", help="result path (default results/<scenario>-predict-<gpu>-<UTC time>.json)"),
    HTML_OPTION,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "predict",
        help="predict a scenario on a GPU/model/TP on the simulator's virtual clock",
        description="Run a scenario's plan (arrivals, lengths, traces) through the simulator on "
        "its virtual clock and write the result JSON a run would write, marked as a "
        "prediction with its GPU preset's validation. No server, no real time.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m harness predict scenarios/steady.toml --gpu H100-SXM --model "
        "Llama-3.1-8B-Instruct --tp 2\n"
        "  python -m harness predict scenarios/steady.toml --gpu L4 --max-num-seqs 64 "
        "--set phases.1.arrival.rate=4 --html\n"
        "  python -m harness compare results/steady-predict-L4-*.json "
        "results/steady-predict-H100-SXM-*.json",
    )
    add_options(p, PREDICT_TABLE)
    p.set_defaults(func=_main)


def _main(a: argparse.Namespace) -> int:
    return predict_command(
        PredictArgs(
            scenario=a.scenario,
            gpu=a.gpu,
            model=a.model,
            tp=a.tp,
            max_num_seqs=a.max_num_seqs,
            sets=a.sets,
            seed=a.seed,
            out=a.out,
            html=a.html,
            quiet=a.quiet,
        )
    )
