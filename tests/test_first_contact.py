"""Issue 24 item 5, first contact: what a new user meets in the first minutes works and says
where things are (check with the shipped files, --explain, an unreachable target, --html's
path, serve without vLLM, absolute paths, --result-dir and [output] dir, docs' references)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import build_parser, main
from harness.sim.app import start_sim_server
from harness.sim.settings import SimSettings

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def sim_in_thread() -> Iterator[str]:
    """The simulator on 127.0.0.1 in a thread of its own (the commands run their own loops)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}

    async def serve() -> None:
        server = await start_sim_server(SimSettings(speedup=200.0))
        box["server"] = server
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=30)
    started.wait(30)
    server = box["server"]
    try:
        yield server.url  # type: ignore[attr-defined]
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(timeout=30)  # type: ignore[attr-defined]
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_check_passes_against_the_simulator_with_the_shipped_config(tmp_path, capsys, monkeypatch):
    # config.toml names the model by its Hugging Face id (what `serve` starts); the simulator
    # answers to that id and now lists it, as vLLM lists each --served-model-name.
    monkeypatch.chdir(tmp_path)  # no settings.json here
    with sim_in_thread() as url:
        status = main(["check", "--target", url, "--config", str(ROOT / "config.toml")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "model 'Qwen/Qwen2.5-7B-Instruct' is not in the list" not in out


def test_explain_shows_the_simulators_model(tmp_path, capsys, monkeypatch):
    # No target anywhere: the run starts the simulator and sends its model, not config.toml's.
    monkeypatch.chdir(tmp_path)
    scenario = ROOT / "scenarios" / "steady.toml"
    assert main(["run", str(scenario), "--config", str(ROOT / "config.toml"), "--explain"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("model "))
    assert "Qwen2.5-7B-Instruct" in row and "Qwen/" not in row, row
    assert "simulator" in row
    main(["run", str(scenario), "--model", "Llama-3.1-8B-Instruct", "--explain"])
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("model "))
    assert "Llama-3.1-8B-Instruct" in row and "--model" in row


def test_run_against_a_closed_port_says_cause_and_fix(tmp_path, capsys, monkeypatch):
    import socket

    import harness.client.probe as probe

    monkeypatch.setattr(probe, "PROBE_BACKOFF_S", 0.0)  # the probe's retries, without waiting
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status = main(
        [
            "run",
            str(ROOT / "scenarios" / "steady.toml"),
            "--target",
            f"http://127.0.0.1:{port}",
            "--out",
            str(tmp_path / "r.json"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert status == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    assert "ClientConnectorError" not in err
    assert "connection refused" in lines[0] and "fix: start the server" in lines[0]


@pytest.mark.parametrize(
    ("argv", "scenario", "html"),
    [
        (["run", "--html", "scenarios/steady.toml"], "scenarios/steady.toml", ""),  # the bug
        (["run", "scenarios/steady.toml", "--html"], "scenarios/steady.toml", ""),
        (["run", "--html", "r.html", "s.toml"], "s.toml", "r.html"),  # a path that looks like one
        (["run", "--html=out/r.txt", "s.toml"], "s.toml", "out/r.txt"),  # any path after =
        (["run", "s.toml", "--html", "--quiet"], "s.toml", ""),
        (["predict", "--html", "scenarios/steady.toml"], "scenarios/steady.toml", ""),
        (["run", "s.toml"], "s.toml", None),
    ],
)
def test_html_takes_only_a_path_that_is_one(argv, scenario, html):
    a = build_parser().parse_args(argv)
    assert (a.scenario, a.html) == (scenario, html)


def test_serve_vllm_without_vllm_names_the_script_and_python(tmp_path, capsys):
    import importlib.util
    import sys

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is importable here")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[server]\nengine = "vllm"\nport = 1\nlog_dir = "{tmp_path}"\n[model]\nname = "m"\n'
        f'[api]\nendpoint = "chat"\n'
    )
    status = main(["serve", "--config", str(cfg), "--python", sys.executable, "--timeout", "60"])
    err = capsys.readouterr().err
    assert status == 2, err
    line = err.strip().splitlines()[-1]
    assert "scripts/install_vllm_cpu.sh" in line and "--python" in line, err
    assert len(err.strip().splitlines()) == 1, err


def _quick_run(tmp_path, extra: list[str], monkeypatch, config: str | None = None) -> int:
    monkeypatch.chdir(tmp_path)
    if config is not None:
        (tmp_path / "config.toml").write_text(config)
    return main(
        [
            "run",
            "--rate",
            "50",
            "--num-requests",
            "6",
            "--input-len",
            "16",
            "--output-len",
            "4",
            "--set",
            "sim.speedup=50",
            "--quiet",
            *extra,
        ]
    )


def test_result_dir_and_output_dir_set_the_folder_and_paths_print_absolute(
    tmp_path, capsys, monkeypatch
):
    # --result-dir: result, journal and the HTML report (next to it) go there; printed absolute.
    assert _quick_run(tmp_path, ["--result-dir", "mine", "--html"], monkeypatch) == 0
    out = capsys.readouterr().out.strip().splitlines()
    last = Path(out[-1])
    assert last.is_absolute() and last.parent == tmp_path / "mine" and last.is_file()
    html = next(ln for ln in out if ln.startswith("HTML report: "))
    assert Path(html.removeprefix("HTML report: ")) == last.with_suffix(".html")
    assert not (tmp_path / "results").exists()
    # config.toml [output] dir does the same when no flag says otherwise.
    assert _quick_run(tmp_path, [], monkeypatch, config='[output]\ndir = "from-config"\n') == 0
    last = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert last.parent == tmp_path / "from-config" and last.is_file()


def test_output_dir_is_validated_and_out_with_result_dir_is_refused(tmp_path, capsys, monkeypatch):
    assert _quick_run(tmp_path, [], monkeypatch, config="[output]\ndir = 3\n") == 2
    assert "output.dir" in capsys.readouterr().err
    (tmp_path / "config.toml").unlink()
    assert _quick_run(tmp_path, ["--out", "a.json", "--result-dir", "d"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "--result-dir" in err


def test_docs_cite_only_files_that_exist():
    # docs/exports.md cited a DESIGN.md that is not in the repository.
    cited = re.compile(r"(?<![\w/.-])([A-Z][A-Za-z_-]*\.md)\b")
    for page in [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in cited.findall(page.read_text(encoding="utf-8")):
            assert (ROOT / name).is_file() or (ROOT / "docs" / name).is_file(), (page.name, name)
