"""Issue 24 item 6: the habits of `vllm bench serve` users. Its flags mean what they mean there
(harness/config/vllm_flags.py) or are refused with one line naming the equivalent, and
`--brief` prints a compact block like vLLM's."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.config.quick import QuickArgs, quick_scenario
from harness.errors import UsageError
from harness.orchestrate.scenario import load_scenario
from harness.workload.plan import build_plan

ROOT = Path(__file__).resolve().parents[1]


def _saved(tmp_path: Path, monkeypatch, *flags: str) -> dict:
    """The scenario the flags build, as --save-scenario writes it (nothing is run: --explain)."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", *flags, "--save-scenario", "s.toml", "--explain"]) == 0
    return tomllib.loads((tmp_path / "s.toml").read_text())


def test_num_prompts_alone_is_rate_inf():
    # vLLM's default --request-rate is inf: all N due at once, a closed loop of N users.
    doc = quick_scenario(QuickArgs(num_requests=200))
    assert doc["phases"][0]["arrival"] == {"process": "closed", "users": 200}
    assert doc["phases"][0]["requests"] == 200
    with pytest.raises(UsageError, match="--process shapes.*no --rate"):
        quick_scenario(QuickArgs(num_requests=5, process="poisson"))  # never blames --rate inf


def test_goodput_becomes_per_request_slos(tmp_path, monkeypatch):
    doc = _saved(tmp_path, monkeypatch, "--num-prompts", "10", "--goodput", "ttft:500", "e2el:2000")
    assert doc["slo"] == {"ttft": "500ms", "e2e": "2000ms"}
    scn = load_scenario(str(tmp_path / "s.toml"))
    assert {(s.name, s.stat, s.limit_s) for s in scn.slo} == {
        ("ttft", None, 0.5),
        ("e2e", None, 2.0),
    }


@pytest.mark.parametrize(
    ("pairs", "words"),
    [
        (["ttft=500"], "KEY:MILLISECONDS"),  # vLLM's separator is ':'
        (["itl:5"], "ttft, tpot, e2el"),  # vLLM accepts no itl goodput either
        (["tpot:-1"], "milliseconds >= 0"),
    ],
)
def test_goodput_refuses_what_vllm_refuses(pairs, words, capsys):
    assert main(["run", "--num-prompts", "5", "--goodput", *pairs, "--explain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_sharegpt_dataset_becomes_the_dataset_workload(tmp_path, monkeypatch):
    data = ROOT / "scenarios" / "datasets" / "sharegpt_sample.json"
    assert data.is_file()
    doc = _saved(
        tmp_path,
        monkeypatch,
        "--num-prompts",
        "5",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(data),
    )
    assert doc["workload"]["dataset"] == {"format": "sharegpt", "file": str(data)}
    assert "prompt_tokens" not in doc["workload"] and "output_tokens" not in doc["workload"]
    plan = build_plan(load_scenario(str(tmp_path / "s.toml")))
    assert plan.total_requests == 5


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--dataset-name", "sonnet"], "docs/workloads.md"),
        (["--dataset-name", "burstgpt"], 'format = "burstgpt"'),
        (["--dataset-name", "sharegpt"], "needs --dataset-path"),
        (["--dataset-path", "x.json"], "the random dataset reads no file"),
    ],
)
def test_other_datasets_point_to_the_equivalent(flags, words, capsys):
    assert main(["run", "--num-prompts", "5", *flags, "--explain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_random_range_ratio_is_vllms_uniform_range():
    # vLLM since 0.8.4: uniform over [floor(L(1-R)), ceil(L(1+R))]; outputs at least 1.
    doc = quick_scenario(
        QuickArgs(num_requests=2000, input_len="100", output_len="3", range_ratio=0.25)
    )
    wl = doc["workload"]
    assert wl["prompt_tokens"] == {"dist": "uniform", "min": 75, "max": 125}
    assert wl["output_tokens"] == {"dist": "uniform", "min": 2, "max": 4}  # floor 2.25, ceil 3.75
    plan = build_plan(load_scenario(doc))
    lengths = np.concatenate([p.prompt_tokens for p in plan.phases])
    assert lengths.min() == 75 and lengths.max() == 125  # both ends drawn, nothing outside
    small = quick_scenario(QuickArgs(num_requests=1, output_len="1", range_ratio=0.9))
    assert small["workload"]["output_tokens"]["min"] == 1  # never a 0-token answer
    fixed = quick_scenario(QuickArgs(num_requests=1, input_len="64", range_ratio=0.0))
    assert fixed["workload"]["prompt_tokens"] == {"dist": "fixed", "value": 64}
    for bad in (1.0, -0.1, math.nan):  # vLLM's range: [0, 1)
        with pytest.raises(
            UsageError, match=r"--random-range-ratio: expected a number in \[0, 1\)"
        ):
            quick_scenario(QuickArgs(num_requests=1, range_ratio=bad))
    with pytest.raises(UsageError, match="is a distribution already"):
        quick_scenario(QuickArgs(num_requests=1, input_len="uniform:1:9", range_ratio=0.5))


def test_tokenizer_gives_exact_lengths_offline(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tokenizers", reason="the optional tokenizers package is not installed")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from harness.workload.prompts import PromptMaker

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))  # a tiny BPE: our words are several tokens
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=120,
        special_tokens=["[UNK]"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([PromptMaker().text(400, 1)] * 3, trainer)
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    doc = _saved(
        tmp_path, monkeypatch, "--num-prompts", "4", "--input-len", "40", "--tokenizer", "tok"
    )
    assert doc["workload"]["tokenizer"] == str(folder / "tokenizer.json")  # the folder's file
    plan = build_plan(load_scenario(str(tmp_path / "s.toml")))
    counter = PromptMaker(str(folder / "tokenizer.json"))
    assert all(counter.count(plan.prompt_text(40, i)) == 40 for i in range(4))
    # A hub id is not fetched: one line saying what to give instead.
    capsys.readouterr()
    assert main(["run", "--num-prompts", "4", "--tokenizer", "Qwen/Qwen2.5-7B-Instruct"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "offline" in err[0] and "tokenizer.json" in err[0]


def test_ignore_eos_sets_it_for_a_scenario_file(tmp_path):
    scn = tmp_path / "s.toml"
    scn.write_text(
        'name = "s"\n[workload]\nignore_eos = false\n'
        'prompt_tokens = { dist = "fixed", value = 8 }\noutput_tokens = { dist = "fixed", value = 4 }\n'
        '[[phases]]\nrequests = 1\narrival = { process = "constant", rate = 1 }\n'
    )
    from harness.cli import build_parser
    from harness.commands.run import vllm_sets

    a = build_parser().parse_args(["run", str(scn), "--ignore-eos"])
    assert load_scenario(str(scn), vllm_sets(a)).workload.ignore_eos is True
    assert load_scenario(str(scn)).workload.ignore_eos is False


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> tuple[Path, str, int]:
    """One short simulated run with --brief, --save-result and vLLM's percentile flags."""
    import contextlib
    import io
    import os

    folder = tmp_path_factory.mktemp("parity")
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(
                [
                    "run",
                    "--num-prompts",
                    "12",
                    "--max-concurrency",
                    "4",
                    "--input-len",
                    "32",
                    "--output-len",
                    "6",
                    "--set",
                    "sim.speedup=50",
                    "--goodput",
                    "ttft:60000",
                    "--result-dir",
                    "rd",
                    "--save-result",
                    "--percentile-metrics",
                    "ttft,e2el",
                    "--metric-percentiles",
                    "50,99.9",
                ]
            )
    finally:
        os.chdir(cwd)
    return folder, out.getvalue(), status


def test_save_result_writes_vllms_json_beside_the_result(saved_run):
    folder, out, status = saved_run
    assert status == 0, out
    lines = out.strip().splitlines()
    result = Path(lines[-1])
    saved = Path(
        next(ln for ln in lines if ln.startswith("vllm bench serve result: ")).split(": ", 1)[1]
    )
    assert saved.is_absolute() and saved.parent == result.parent == folder / "rd"
    # vLLM's default name: <backend>-<rate>qps-concurrency<N>-<model>-<date>.json
    assert saved.name.startswith("openai-chat-infqps-concurrency4-Qwen2.5-7B-Instruct-"), saved.name
    doc = json.loads(saved.read_text())
    assert doc["completed"] == 12 and doc["num_prompts"] == 12 and doc["request_rate"] == "inf"
    for key in (
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p50_ttft_ms",
        "p99.9_ttft_ms",
        "p99.9_e2el_ms",
    ):
        assert key in doc, key
    assert "mean_itl_ms" not in doc and "mean_tpot_ms" not in doc  # not in --percentile-metrics
    assert "ttfts" not in doc and "itls" not in doc  # the lists need --save-detailed, as in vLLM
    assert doc["request_goodput"] == pytest.approx(doc["request_throughput"])  # all within 60 s


def test_result_filename_and_save_detailed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    flags = [
        "--num-prompts",
        "3",
        "--input-len",
        "8",
        "--output-len",
        "3",
        "--set",
        "sim.speedup=50",
    ]
    assert main(["run", *flags, "--quiet", "--result-filename", "v.json", "--save-detailed"]) == 0
    doc = json.loads((tmp_path / "results" / "v.json").read_text())  # implies --save-result
    assert len(doc["ttfts"]) == 3 and len(doc["itls"]) == 3
    assert {"mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "p99_itl_ms"} <= set(
        doc
    )  # vLLM's defaults
    assert "mean_e2el_ms" not in doc and "p50_ttft_ms" not in doc


def test_brief_is_a_compact_block_like_vllms(saved_run):
    _folder, out, _status = saved_run
    block = out[: out.index("vllm bench serve result: ")].strip().splitlines()
    assert len(block) <= 30, block
    text = "\n".join(block)
    for words in (
        "successful requests",
        "request goodput (req/s)",
        "output token throughput (tok/s)",
        "time to first token (ms)",
        "end-to-end latency (ms)",
        "p99.9",
    ):
        assert words in text, words
    assert "inter-chunk" not in text and "inter-token latency" not in text  # only those asked
    assert "phase main" not in text  # no per-phase tables


def test_brief_refuses_a_percentile_the_result_does_not_keep(capsys):
    assert main(["run", "--num-prompts", "3", "--metric-percentiles", "75", "--explain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--save-result" in err[0] and "99.9" in err[0]
