"""What `plan` and the simulator take as input (issue 47): a trace whose requests all arrive at
once is refused with the fix named (it has no rate to scale), `[sim] preset_file` and a model
folder resolve against the scenario's folder as trace files do, and `plan --model` takes a
config.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import UsageError
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.virtual_capacity import probe_form
from harness.sim.settings import SimSettings

CONFIGS = Path(__file__).resolve().parent.parent / "data" / "hf_configs"
HEAD = """
name = "inputs"
seed = 3
[workload]
prompt_tokens = { dist = "fixed", value = 128 }
output_tokens = { dist = "fixed", value = 32 }
ignore_eos = true
"""


def _trace_scenario(folder: Path, times: list[float]) -> Path:
    rows = [{"t": t, "prompt_tokens": 100, "output_tokens": 20} for t in times]
    (folder / "batch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = folder / "batch.toml"
    p.write_text(
        HEAD + '[[phases]]\nname = "batch"\narrival = { process = "trace", file = "batch.jsonl" }\n'
    )
    return p


def test_a_trace_that_arrives_all_at_once_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = _trace_scenario(tmp_path, [5.0] * 40)
    with pytest.raises(UsageError) as err:
        probe_form(load_scenario(path), virtual=True)
    message = str(err.value)
    assert "all 40 requests of the trace arrive at once" in message
    assert "rate-scalable arrival" in message and "\n" not in message
    # plan says it in one line, exit 2, and never probes at n requests per nanosecond
    rc = main(["plan", str(path), "--slo", "ttft_p99=2s", "--target-load", "5rps", "--quiet"])
    assert rc == 2


def test_a_trace_spread_over_time_still_plans(tmp_path: Path) -> None:
    path = _trace_scenario(tmp_path, [0.5 * i for i in range(40)])
    form = probe_form(load_scenario(path), virtual=True)
    assert form.own_rate == pytest.approx(40 / 19.5)


def test_preset_file_and_model_folder_resolve_against_the_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "deploy"
    (folder / "qwen").mkdir(parents=True)
    shutil.copy(CONFIGS / "qwen3-8b.json", folder / "qwen" / "config.json")
    (folder / "gpus.toml").write_text(
        '[gpu."my-gpu"]\nmemory_gib = 96\nbandwidth_gb_per_s = 4000\nbf16_tflop_per_s = 500\n'
    )
    scn_path = folder / "s.toml"
    scn_path.write_text(
        HEAD
        + '[[phases]]\nname = "m"\nduration = "5s"\narrival = { process = "poisson", rate = 1.0 }\n'
        + '[sim]\ngpu = "my-gpu"\nmodel = "qwen"\npreset_file = "gpus.toml"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory holds neither file
    scn = load_scenario(scn_path)
    r = SimSettings.from_mapping(scn.sim, scn.path).resolved()
    assert r.gpu_preset.name == "my-gpu"
    assert (r.model_preset.name, r.model_preset.num_layers) == ("qwen", 36)


def test_plan_takes_a_config_json_as_the_model(tmp_path: Path) -> None:
    scn = tmp_path / "p.toml"
    scn.write_text(
        HEAD
        + '[[phases]]\nname = "m"\nduration = "10s"\narrival = { process = "poisson", rate = 1.0 }\n'
        + '[sim]\ngpu = "H100-SXM"\n'
    )
    out = tmp_path / "plan.json"
    model = str(CONFIGS / "qwen2.5-7b-instruct.json")
    argv = ["plan", str(scn), "--slo", "ttft_p99=2s", "--target-load", "2rps", "--model", model]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    assert any(o["feasible"] for o in doc["options"])
    assert main([*argv[:-1], str(tmp_path / "nope.json"), "--quiet"]) == 2
