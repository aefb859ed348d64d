"""`run --ray` ships the harness with the job (issue 45): a Ray worker process where `import
harness` fails runs its shard all the same, because the actors' runtime_env carries the
driver's package (`py_modules`), plus pip for the dependencies a node lacks.

How a node without the harness is made here: the local Ray instance's job-level runtime_env puts
a stub `harness` package first on every worker's PYTHONPATH, whose import raises ImportError
(this venv's editable install is found after PYTHONPATH, so the stub hides it), and Ray is
started from an empty folder (Ray puts the driver's working directory on its workers' path). Ray puts a
runtime_env's `py_modules` before PYTHONPATH, so only a shipped harness gets past the stub.
Proven both ways: without the shipping (HARNESS_RAY_RUNTIME_ENV=none) the same run cannot start
its workers, and with it a worker's `harness` is the copy Ray unpacked, not this tree's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.client import ray_ship
from harness.errors import UsageError
from harness.record.journal import read_journal
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario
from tests.client.test_workers import SCENARIO
from tests.fake_sse_server import FakeSSEServer

STUB = "raise ImportError('the harness is not installed on this node (test stub)')\n"


# --- the runtime_env, without Ray ---------------------------------------------------------------


def test_dependencies_are_the_projects_without_extras() -> None:
    deps = ray_ship.dependencies()
    assert {"aiohttp", "numpy", "orjson", "hdrhistogram"} <= set(deps)
    assert not {"ray", "pytest", "pyarrow", "pandas"} & set(deps)
    assert all("==" in p for p in ray_ship.pinned(deps))  # the driver's versions


def test_the_default_ships_the_package_and_installs_only_what_is_missing() -> None:
    env = ray_ship.default_env([])
    assert env["py_modules"] == [str(ray_ship.package_dir())]
    assert (Path(env["py_modules"][0]) / "client" / "ray_ship.py").is_file()
    assert "__pycache__" in env["excludes"] and "pip" not in env
    pip = ray_ship.default_env(["orjson"])["pip"]
    assert pip["packages"] == ray_ship.pinned(["orjson"]) and pip["pip_check"] is False
    assert "orjson==" in ray_ship.describe(ray_ship.default_env(["orjson"]))
    assert "no pip install" in ray_ship.describe(env)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (None, None),
        ("none", {}),
        ('{"pip": null}', {"pip": None}),
        ('{"env_vars": {"A": "1"}}', {"env_vars": {"A": "1"}}),
    ],
)
def test_the_user_overrides_it(raw: str | None, want: Any) -> None:
    assert ray_ship.user_override(raw) == want


def test_an_override_merges_key_by_key_and_null_drops() -> None:
    default = ray_ship.default_env(["orjson"])
    got = ray_ship.merge(default, {"pip": None, "env_vars": {"A": "1"}})
    assert "pip" not in got and got["env_vars"] == {"A": "1"}
    assert got["py_modules"] == default["py_modules"]


def test_the_override_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "env.json"
    f.write_text('{"py_modules": null, "pip": ["harness==0.1.0"]}', encoding="utf-8")
    assert ray_ship.user_override(str(f)) == {"py_modules": None, "pip": ["harness==0.1.0"]}


@pytest.mark.parametrize("raw", ["{not json", "[1]", "{}", "/no/such/env.json"])
def test_a_bad_override_is_one_line_naming_the_variable(raw: str) -> None:
    with pytest.raises(UsageError) as e:
        ray_ship.user_override(raw)
    assert "\n" not in str(e.value) and ray_ship.ENV_VAR in str(e.value)


# --- a Ray worker where the harness is not installed ---------------------------------------------


@pytest.fixture(scope="module")
def bare_ray(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A local Ray instance whose worker processes cannot import the harness."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'harness[ray]')")
    if ray.is_initialized():
        ray.shutdown()
    stub = tmp_path_factory.mktemp("bare-node")
    (stub / "harness").mkdir()
    (stub / "harness" / "__init__.py").write_text(STUB, encoding="utf-8")
    # Ray puts the driver's working directory first on its workers' sys.path (this checkout's
    # root would hand them its harness): Ray starts from an empty folder instead
    here = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("driver-cwd"))
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(stub)}},
        )
    finally:
        os.chdir(here)
    yield ray
    ray.shutdown()


def _where_is_harness() -> Any:
    """A task, pickled by value (nested), that says where its worker imports the harness from."""

    def where() -> str:
        try:
            import harness
        except ImportError as exc:
            return f"ImportError: {exc}"
        return str(harness.__file__)

    return where


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_imports_only_the_shipped_harness(bare_ray: Any) -> None:
    where = bare_ray.remote(num_cpus=0)(_where_is_harness())
    bare = bare_ray.get(where.remote(), timeout=120)
    assert bare.startswith("ImportError") and "test stub" in bare  # the node has no harness
    env = ray_ship.runtime_env(bare_ray, environ={})
    assert env is not None and "pip" not in env  # this node has the dependencies: none installed
    shipped = bare_ray.get(where.options(runtime_env=env).remote(), timeout=120)
    here = ray_ship.package_dir()
    assert not shipped.startswith("ImportError"), shipped
    assert not Path(shipped).resolve().is_relative_to(here) and "runtime_resources" in shipped


def _run(scn: Path, out: Path, url: str) -> int:
    return main(
        [
            "run",
            str(scn),
            "--target",
            url,
            "--out",
            str(out),
            "--quiet",
            "--no-probe",
            "--ray",
            "auto",
            "--workers",
            "2",
        ]
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_shards_run_on_workers_without_the_harness(
    bare_ray: Any, write_scenario: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    scn = write_scenario(SCENARIO)
    plan = build_plan(load_scenario(scn, [], None))
    with FakeSSEServer(0.02, 0.004) as srv:
        # the control: without the shipping, the workers cannot start (the stub is all they see)
        monkeypatch.setenv(ray_ship.ENV_VAR, "none")
        assert _run(scn, tmp_path / "bare.json", srv.url) == 2
        err = capsys.readouterr().err.strip()
        assert "--ray: the workers did not start" in err and ray_ship.ENV_VAR in err
        assert len(err.splitlines()) == 1, err
        # shipped: the same run, every request of the plan answered
        monkeypatch.delenv(ray_ship.ENV_VAR)
        assert _run(scn, tmp_path / "r.json", srv.url) == 0
    j = read_journal(tmp_path / "r.journal.jsonl")
    want = list(range(plan.phases[0].count)) + [plan.phases[1].first_seq + k for k in range(14)]
    assert sorted(r.seq for r in j.records) == want and all(r.ok for r in j.records)


def test_the_kuberay_manifest_is_a_raycluster_of_stock_images() -> None:
    """docs/kuberay/raycluster.yaml parses as a RayCluster whose pods install no harness (the
    run ships it), and docs/performance.md gives its command."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    root = Path(__file__).resolve().parents[2]
    doc = yaml.safe_load((root / "docs" / "kuberay" / "raycluster.yaml").read_text("utf-8"))
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayCluster"
    spec = doc["spec"]
    pods = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
    images = [c["image"] for p in pods for c in p["spec"]["containers"]]
    assert images and all(i.startswith("rayproject/ray:") for i in images)
    assert all(spec["rayVersion"] in i for i in images)
    assert "harness" not in str([p["spec"]["containers"] for p in pods]).replace("harness-ray", "")
    guide = (root / "docs" / "performance.md").read_text("utf-8")
    assert "kubectl apply -f docs/kuberay/raycluster.yaml" in guide
    assert "--ray ray://127.0.0.1:10001" in guide
