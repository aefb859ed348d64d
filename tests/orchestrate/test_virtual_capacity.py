"""capacity against a known knee: the true knee found on the simulator's virtual clock (long
probes, bisected fine, the same verdict); the search with the command's short probes must land
within 15 % of it on every shape, and never above what a capped server can serve. Those are the
search's logic and run on the virtual clock (`capacity --virtual`: the same search, prober and
verdict, each probe a virtual run). One shape also runs the real command over HTTP against the
same simulator (with its speedup): the real-time path, client and server, lands in the same
band."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis import capacity as cap
from harness.analysis.steady import SERVED_PRECISION
from harness.cli import main
from harness.orchestrate.scenario import load_scenario
from harness.orchestrate.virtual_capacity import DEFAULT_START_RATE, probe_form, virtual_capacity
from tests.virtual_shapes import DATASHEET_GPUS, virtual_at

KNEE_TOLERANCE = 0.15
VIRTUAL_PROBE_S = 60.0  # the known knee: every virtual probe at least this long ...
VIRTUAL_TOLERANCE = 0.02  # ... and bisected this fine

TEMPLATE = (
    '''
name = "{name}"
seed = 3
[workload]
prompt_tokens = {prompt}
output_tokens = {output}
ignore_eos = true
[[phases]]
name = "main"
duration = "5s"
arrival = {arrival}
[sim]
gpu = "L4"
preset_file = "'''
    + str(DATASHEET_GPUS)
    + '"\n{sim}\n'
)
CHAT = '{ dist = "lognormal", mean = 256, sigma = 0.4, min = 16, max = 2048 }'
# Each starts below its knee (about half; long_outputs at 4 req/s, about a quarter of its ~17),
# so the probes double once or twice and then bisect; no
# warm-up phase: the steady part starts after the fill-up. Rates stay low in real time (the
# simulator's speedup) so a busy 2-core machine can follow them.
SHAPES = {
    "steady": dict(
        prompt=CHAT,
        output='{ dist = "fixed", value = 32 }',
        arrival='{ process = "poisson", rate = 8.0 }',
        sim="max_num_seqs = 8\nspeedup = 5.0",
    ),
    "burst": dict(
        prompt=CHAT,
        output='{ dist = "fixed", value = 32 }',
        arrival='{ process = "gamma", rate = 8.0, burstiness = 0.5 }',
        sim="max_num_seqs = 8\nspeedup = 5.0",
    ),
    "long_prompts": dict(
        prompt='{ dist = "uniform", min = 1500, max = 2500 }',
        output='{ dist = "fixed", value = 16 }',
        arrival='{ process = "poisson", rate = 5.0 }',
        sim="max_num_seqs = 8\nspeedup = 5.0",
    ),
    "long_outputs": dict(
        prompt='{ dist = "fixed", value = 32 }',
        output='{ dist = "uniform", min = 96, max = 160 }',
        arrival='{ process = "poisson", rate = 4.0 }',
        sim="max_num_seqs = 16\nspeedup = 10.0",
    ),
}
SLOS = ["ttft_p99=1s", "itl_p99=120ms"]
# Bursty arrivals: a p99 TTFT near the knee takes minutes of bursts to settle (an 8 s probe sees
# a few), so the bursty shape is held to the limit where bursts average out: what it serves.
SHAPE_SLOS = {"burst": ["ttft_p99=5s", "itl_p99=120ms"]}


def _write(tmp_path: Path, name: str) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(TEMPLATE.format(name=name, **SHAPES[name]), encoding="utf-8")
    return p


# Probe lengths (wall time, at the simulator's speedup) per shape. Bursty arrivals put the TTFT
# p99 of a short probe at the mercy of which bursts it drew: a fresh-clone .ci/run of 2026-12-02
# passed a 4-8 s probe at 20.7 req/s against a knee of 16.9 (+23 %); twice as long for them.
PROBE_S = {"burst": ("8s", "16s")}


def _capacity(path: Path, out: Path, slos: list[str], virtual: bool) -> dict:  # type: ignore[type-arg]
    """`harness capacity` with the tests' short probes: on the virtual clock (`virtual`), or over
    HTTP against the simulator with no virtual estimate first (the knee is computed already)."""
    probe, max_probe = PROBE_S.get(path.stem, ("4s", "8s"))
    argv = [
        "capacity",
        str(path),
        "--probe-duration",
        probe,
        "--max-probe-duration",
        max_probe,
        "--tolerance",
        "10%",
        "--confirm-runs",
        "0",
        "--max-probes",
        "10",
        "--virtual" if virtual else "--no-estimate",
        "--out",
        str(out),
        "--quiet",
    ]
    for s in slos:
        argv += ["--slo", s]
    assert main(argv) == 0
    return json.loads((out / "capacity.json").read_text())


def _says_it_was_starved(rep: dict) -> bool:  # type: ignore[type-arg]
    """True when the answer's runs on both sides had the harness short of CPU and the report says
    the answer is UNRELIABLE (capacity.json `unreliable`, with its note): then no band holds, and
    what is checked is that the report said so, with every run at the bracket marked late."""
    if not rep["unreliable"]:
        return False
    lo, hi = rep["bracket_requests_per_s"]["passed"], rep["bracket_requests_per_s"]["failed"]
    at = [p for p in rep["probes"] if p["rate"] in (lo, hi)]
    assert at and all(p.get("suspect") for p in at if p["passed"] == (p["rate"] == lo)), at
    assert any(n.startswith("UNRELIABLE") for n in rep["notes"]), rep["notes"]
    return True


def _knee(path: Path, slos: list[str]) -> float:
    knee = virtual_capacity(
        str(path),
        [cap.parse_slo(s) for s in slos],
        min_duration_s=VIRTUAL_PROBE_S,
        tolerance=VIRTUAL_TOLERANCE,
    ).answer
    assert knee is not None
    return knee


def _lands_near(rep: dict, knee: float, shape: str) -> None:  # type: ignore[type-arg]
    answer = rep["answer_requests_per_s"]
    assert abs(answer / knee - 1) <= KNEE_TOLERANCE, (shape, answer, knee)
    lo, hi = rep["bracket_requests_per_s"]["passed"], rep["bracket_requests_per_s"]["failed"]
    assert lo == answer and (hi is None or hi > answer)
    ev = rep["evidence"]["answer"]
    assert ev["passed"] and ev["steady"]["fill_s"] > 0 and ev["steady"]["requests"] > 0
    assert rep["evidence"]["failed"] is None or not rep["evidence"]["failed"]["passed"]


@pytest.mark.slow
@pytest.mark.virtual
@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_search_lands_within_15_percent_of_the_known_knee(tmp_path: Path, shape: str) -> None:
    # the search's short probes (what a user's run affords) against the knee of long ones
    path = _write(tmp_path, shape)
    slos = SHAPE_SLOS.get(shape, SLOS)
    rep = _capacity(path, tmp_path / "out", slos, virtual=True)
    assert not rep["unreliable"]  # the virtual clock has no client to starve
    _lands_near(rep, _knee(path, slos), shape)


@pytest.mark.slow
@pytest.mark.every_core  # starved, it answers UNRELIABLE and checks less
def test_capacity_over_http_lands_within_15_percent_of_the_known_knee(tmp_path: Path) -> None:
    # the real-time path, once: the shapes' logic is checked on the virtual clock above
    path = _write(tmp_path, "steady")
    knee = _knee(path, SLOS)
    rep = _capacity(path, tmp_path / "out", SLOS, virtual=False)
    # every probe over HTTP leaves its run's result beside capacity.json
    assert all((tmp_path / "out" / p["result"]).is_file() for p in rep["probes"]), rep["probes"]
    if _says_it_was_starved(rep):
        return
    _lands_near(rep, knee, "steady")


@pytest.mark.slow
@pytest.mark.virtual
def test_the_answer_is_never_above_what_a_capped_server_serves(tmp_path: Path) -> None:
    # Only an ITL SLO, which a running set capped at 8 always meets: the one limit is how much
    # the server serves. The capacity answered above it.
    path = _write(tmp_path, "steady")
    virtual = virtual_capacity(
        str(path),
        [cap.parse_slo("itl_p99=120ms")],
        min_duration_s=VIRTUAL_PROBE_S,
        tolerance=VIRTUAL_TOLERANCE,
    )
    assert virtual.answer is not None
    saturation = max(
        virtual_at(path, k * virtual.answer, VIRTUAL_PROBE_S)[1].served_requests_per_s
        for k in (1.2, 1.5, 2.0)
    )
    rep = _capacity(path, tmp_path / "out", ["itl_p99=120ms"], virtual=True)
    answer = rep["answer_requests_per_s"]
    measured = rep["service_rate_cap_requests_per_s"]
    assert measured is not None and answer <= measured  # never above what it saw the server serve
    # ... nor above the saturation throughput measured on the virtual clock by more than a probe
    # can resolve: it is built to see a shortfall of SERVED_PRECISION (3 sigma), and a smaller
    # overload can pass it. 3 % failed once: 17.85 req/s against 17.23 (+3.6 %) in a full run of
    # 2026-12-02, where 12 seeds of a 20 s window on the virtual clock serve 16.9-17.55. A probe
    # that --max-probe-duration cut short of that resolves less, and says how much: its
    # allowance over what was offered (19.03 passed with 16 of 119 requests short, 16.6 allowed,
    # against 17.23 served at saturation: +10.4 %, in a slowed full run of 2026-12-03).
    steady = rep["evidence"]["answer"]["steady"]
    resolved = max(SERVED_PRECISION, steady["served_allowance_requests"] / steady["requests"])
    assert resolved <= 0.2, steady  # the test's probes are long enough to resolve 20 % at least
    assert answer <= (1 + resolved) * saturation, (answer, saturation, resolved)
    assert answer >= 0.8 * saturation


FIXED = '{ dist = "fixed", value = 16 }'


@pytest.mark.parametrize(
    ("arrival", "rate"),
    [('{ process = "poisson", rate = 8.0 }', 8.0), ('{ process = "constant", rate = 2.5 }', 2.5)],
)
def test_start_rate_is_the_first_measured_phases_rate(
    tmp_path: Path, arrival: str, rate: float
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(TEMPLATE.format(name="s", prompt=FIXED, output=FIXED, arrival=arrival, sim=""))
    assert probe_form(load_scenario(path)).start_rate == rate


def test_a_closed_loop_has_no_rate_of_its_own_and_says_where_the_first_probe_goes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.toml"
    closed = '{ process = "closed", users = 4 }'
    path.write_text(TEMPLATE.format(name="s", prompt=FIXED, output=FIXED, arrival=closed, sim=""))
    form = probe_form(load_scenario(path))
    assert form.own_rate is None and form.start_rate == DEFAULT_START_RATE
    assert f"first probe at {DEFAULT_START_RATE:g} req/s (--start-rate" in form.describe()
