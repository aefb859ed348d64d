"""Bad input: every malformed scenario, config.toml, settings.json, trace file or flag exits with
status 2 and one or two lines naming the file (or flag), the key (and line where the parser
gives it) and what is allowed; never a traceback. Plus a property: any scenario document either
loads or fails with such a ConfigError/UsageError."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import cli
from harness.errors import HarnessError
from harness.workload.scenario import validate_scenario

BASE = """\
name = "bad"
seed = 1
[workload]
prompt_tokens = { dist = "fixed", value = 64 }
output_tokens = { dist = "uniform", min = 8, max = 16 }
[[phases]]
name = "main"
duration = "1s"
arrival = { process = "poisson", rate = 2 }
"""


def _sub(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new)


TRACE_SCN = _sub(
    'duration = "1s"\narrival = { process = "poisson", rate = 2 }',
    'arrival = { process = "trace", file = "t.jsonl" }',
)

# (id, files to write {name: text or bytes}, argv after `python -m harness`, words the message
# must contain). `s.toml` holds the scenario; {tmp} is the test's folder.
ROWS: list[tuple[str, dict[str, Any], list[str], list[str]]] = [
    # --- scenario files ---------------------------------------------------------------------
    # an unclosed string: TOML syntax error with its line
    (
        "toml-syntax",
        {"s.toml": _sub('name = "bad"', 'name = "bad')},
        ["run", "s.toml"],
        ["s.toml:1", "TOML"],
    ),
    # a key misspelt at the top
    (
        "unknown-top-key",
        {"s.toml": _sub("seed = 1", "sed = 1")},
        ["run", "s.toml"],
        ["s.toml", "sed", "unknown key", "seed"],
    ),
    # a key misspelt in a phase
    (
        "unknown-phase-key",
        {"s.toml": _sub('name = "main"', 'name = "main"\nwarmpu = true')},
        ["run", "s.toml"],
        ["phases.0.warmpu", "warmup"],
    ),
    # seed as a word
    (
        "seed-type",
        {"s.toml": _sub("seed = 1", 'seed = "seven"')},
        ["run", "s.toml"],
        ["s.toml", "seed", "integer"],
    ),
    # negative seed
    (
        "seed-negative",
        {"s.toml": _sub("seed = 1", "seed = -1")},
        ["run", "s.toml"],
        ["seed", ">= 0"],
    ),
    # a negative rate
    (
        "rate-negative",
        {"s.toml": _sub("rate = 2", "rate = -5")},
        ["run", "s.toml"],
        ["phases.0.arrival.rate", "> 0"],
    ),
    # a zero rate
    (
        "rate-zero",
        {"s.toml": _sub("rate = 2", "rate = 0")},
        ["run", "s.toml"],
        ["phases.0.arrival.rate", "> 0"],
    ),
    # rate as a word
    (
        "rate-word",
        {"s.toml": _sub("rate = 2", 'rate = "fast"')},
        ["run", "s.toml"],
        ["phases.0.arrival.rate", "requests/s"],
    ),
    # a duration without unit (string)
    (
        "duration-no-unit",
        {"s.toml": _sub('duration = "1s"', 'duration = "30"')},
        ["run", "s.toml"],
        ["phases.0.duration", "unit", '"30s"'],
    ),
    # a duration as a bare number
    (
        "duration-number",
        {"s.toml": _sub('duration = "1s"', "duration = 30")},
        ["run", "s.toml"],
        ["phases.0.duration", "unit"],
    ),
    # a zero duration
    (
        "duration-zero",
        {"s.toml": _sub('duration = "1s"', 'duration = "0s"')},
        ["run", "s.toml"],
        ["phases.0.duration", "> 0"],
    ),
    # neither duration nor requests
    (
        "phase-no-length",
        {"s.toml": _sub('duration = "1s"\n', "")},
        ["run", "s.toml"],
        ["phases.0.duration", "requests"],
    ),
    # both duration and requests
    (
        "phase-both-lengths",
        {"s.toml": _sub('duration = "1s"', 'duration = "1s"\nrequests = 5')},
        ["run", "s.toml"],
        ["phases.0.duration", "exactly one"],
    ),
    # zero requests
    (
        "requests-zero",
        {"s.toml": _sub('duration = "1s"', "requests = 0")},
        ["run", "s.toml"],
        ["phases.0.requests", ">= 1"],
    ),
    # an empty phases array
    (
        "phases-empty",
        {"s.toml": "phases = []\n" + BASE.split("[[phases]]")[0]},
        ["run", "s.toml"],
        ["s.toml", "phases", "at least one"],
    ),
    # no phases at all
    (
        "phases-missing",
        {"s.toml": BASE.split("[[phases]]")[0]},
        ["run", "s.toml"],
        ["s.toml", "phases", "required"],
    ),
    # phases as a table instead of an array
    (
        "phases-table",
        {"s.toml": BASE.replace("[[phases]]", "[phases]")},
        ["run", "s.toml"],
        ["phases", "array"],
    ),
    # uniform with min > max
    (
        "uniform-min-gt-max",
        {"s.toml": _sub("min = 8, max = 16", "min = 16, max = 8")},
        ["run", "s.toml"],
        ["workload.output_tokens.min", "<= max"],
    ),
    # an unknown distribution
    (
        "dist-unknown",
        {"s.toml": _sub('dist = "fixed"', 'dist = "gaussian"')},
        ["run", "s.toml"],
        ["workload.prompt_tokens.dist", "lognormal"],
    ),
    # a zero token count
    (
        "fixed-zero",
        {"s.toml": _sub("value = 64", "value = 0")},
        ["run", "s.toml"],
        ["workload.prompt_tokens.value", ">= 1"],
    ),
    # empirical weights summing to zero
    (
        "weights-zero-sum",
        {
            "s.toml": _sub(
                '{ dist = "uniform", min = 8, max = 16 }',
                '{ dist = "empirical", values = [8, 16], weights = [0, 0] }',
            )
        },
        ["run", "s.toml"],
        ["workload.output_tokens.weights"],
    ),
    # a negative weight
    (
        "weights-negative",
        {
            "s.toml": _sub(
                '{ dist = "uniform", min = 8, max = 16 }',
                '{ dist = "empirical", values = [8, 16], weights = [1, -1] }',
            )
        },
        ["run", "s.toml"],
        ["workload.output_tokens.weights"],
    ),
    # weights not matching the values
    (
        "weights-length",
        {
            "s.toml": _sub(
                '{ dist = "uniform", min = 8, max = 16 }',
                '{ dist = "empirical", values = [8, 16], weights = [1] }',
            )
        },
        ["run", "s.toml"],
        ["workload.output_tokens.weights", "2"],
    ),
    # a lognormal with negative sigma
    (
        "lognormal-sigma",
        {
            "s.toml": _sub(
                '{ dist = "fixed", value = 64 }', '{ dist = "lognormal", mean = 64, sigma = -1 }'
            )
        },
        ["run", "s.toml"],
        ["workload.prompt_tokens.sigma", ">= 0"],
    ),
    # an unknown arrival process
    (
        "process-unknown",
        {"s.toml": _sub('process = "poisson"', 'process = "uniform"')},
        ["run", "s.toml"],
        ["phases.0.arrival.process", "poisson"],
    ),
    # gamma burstiness zero
    (
        "gamma-burstiness",
        {
            "s.toml": _sub(
                'process = "poisson", rate = 2', 'process = "gamma", rate = 2, burstiness = 0'
            )
        },
        ["run", "s.toml"],
        ["phases.0.arrival.burstiness", "> 0"],
    ),
    # a zero max_concurrency
    (
        "max-concurrency-zero",
        {"s.toml": _sub('name = "main"', 'name = "main"\nmax_concurrency = 0')},
        ["run", "s.toml"],
        ["phases.0.max_concurrency", ">= 1"],
    ),
    # every phase a warm-up
    (
        "all-warmup",
        {"s.toml": _sub('name = "main"', 'name = "main"\nwarmup = true')},
        ["run", "s.toml"],
        ["phases", "warm-up"],
    ),
    # an unknown SLO
    (
        "slo-unknown",
        {"s.toml": BASE + '[slo]\nttft_p98 = "1s"\n'},
        ["run", "s.toml"],
        ["slo.ttft_p98", "ttft_p99"],
    ),
    # an SLO without unit
    (
        "slo-no-unit",
        {"s.toml": BASE + "[slo]\nttft_p99 = 2\n"},
        ["run", "s.toml"],
        ["slo.ttft_p99", "unit"],
    ),
    # retry on a number instead of a string
    (
        "retry-on-int",
        {"s.toml": BASE + "[retry]\non = [429]\nmax = 2\n"},
        ["run", "s.toml"],
        ["retry.on", '"429"'],
    ),
    # retry max negative
    (
        "retry-max-negative",
        {"s.toml": BASE + '[retry]\non = ["429"]\nmax = -1\n'},
        ["run", "s.toml"],
        ["retry.max", ">= 0"],
    ),
    # a target URL without a scheme
    (
        "target-url-scheme",
        {"s.toml": BASE + '[target]\nurl = "localhost:8000"\n'},
        ["run", "s.toml"],
        ["s.toml", "url", "http://"],
    ),
    # a target URL with its port out of range
    (
        "target-url-port",
        {"s.toml": BASE + '[target]\nurl = "http://127.0.0.1:70000"\n'},
        ["run", "s.toml"],
        ["s.toml", "url", "1..65535"],
    ),
    # an unknown endpoint
    (
        "target-endpoint",
        {"s.toml": BASE + '[target]\nendpoint = "rerank"\n'},
        ["run", "s.toml"],
        ["target.endpoint", "chat"],
    ),
    # an empty key variable name
    (
        "target-key-env-empty",
        {"s.toml": BASE + '[target]\napi_key_env = ""\n'},
        ["run", "s.toml"],
        ["target.api_key_env", "variable"],
    ),
    # an unknown [sim] key
    (
        "sim-unknown",
        {"s.toml": BASE + "[sim]\nmax_num_seq = 4\n"},
        ["run", "s.toml"],
        ["sim.max_num_seq", "max_num_seqs"],
    ),
    # a fault rate above 1
    (
        "sim-fault-rate",
        {"s.toml": BASE + "[sim]\nfaults = { http500 = 2 }\n"},
        ["run", "s.toml"],
        ["sim.faults", "[0, 1]"],
    ),
    # a scenario name with a slash (it names files)
    (
        "name-slash",
        {"s.toml": _sub('name = "bad"', 'name = "../x"')},
        ["run", "s.toml"],
        ["name", "letters"],
    ),
    # duplicate phase names
    (
        "phase-dup",
        {"s.toml": BASE + BASE[BASE.index("[[phases]]") :]},
        ["run", "s.toml"],
        ["phases", "unique", "main"],
    ),
    # the scenario file does not exist
    ("scenario-missing", {}, ["run", "nope.toml"], ["nope.toml", "not found"]),
    # the scenario is a folder
    ("scenario-folder", {"d/x": "x"}, ["run", "d"], ["d", "cannot read"]),
    # the scenario is not UTF-8
    ("scenario-binary", {"s.toml": b'name = "\xff\xfe"\n'}, ["run", "s.toml"], ["s.toml", "UTF-8"]),
    # --- trace files --------------------------------------------------------------------------
    # times not sorted
    (
        "trace-unsorted",
        {
            "s.toml": TRACE_SCN,
            "t.jsonl": '{"t": 1, "prompt_tokens": 5, "output_tokens": 5}\n{"t": 0.5, "prompt_tokens": 5, "output_tokens": 5}\n',
        },
        ["run", "s.toml"],
        ["t.jsonl:2", "sorted"],
    ),
    # a negative time
    (
        "trace-negative",
        {"s.toml": TRACE_SCN, "t.jsonl": '{"t": -1, "prompt_tokens": 5, "output_tokens": 5}\n'},
        ["run", "s.toml"],
        ["t.jsonl:1", "t", ">= 0"],
    ),
    # a line that is not JSON
    (
        "trace-not-json",
        {
            "s.toml": TRACE_SCN,
            "t.jsonl": '{"t": 0, "prompt_tokens": 5, "output_tokens": 5}\n{"t": 1,\n',
        },
        ["run", "s.toml"],
        ["t.jsonl:2", "JSON"],
    ),
    # a zero output length
    (
        "trace-zero-tokens",
        {"s.toml": TRACE_SCN, "t.jsonl": '{"t": 0, "prompt_tokens": 5, "output_tokens": 0}\n'},
        ["run", "s.toml"],
        ["t.jsonl:1", "output_tokens", ">= 1"],
    ),
    # an empty trace
    (
        "trace-empty",
        {"s.toml": TRACE_SCN, "t.jsonl": "\n"},
        ["run", "s.toml"],
        ["t.jsonl", "no requests"],
    ),
    # the trace is missing
    (
        "trace-missing",
        {"s.toml": TRACE_SCN},
        ["run", "s.toml"],
        ["phases.0.arrival.file", "t.jsonl"],
    ),
    # trace files of the other formats (issue 13): columns matching no format
    (
        "trace-no-format",
        {"s.toml": TRACE_SCN.replace("t.jsonl", "t.csv"), "t.csv": "when,size\n1,2\n"},
        ["run", "s.toml"],
        ["t.csv:1", "matches no trace format", "azure", "burstgpt", "csv"],
    ),
    # format = "azure" with a missing column
    (
        "trace-azure-column",
        {
            "s.toml": TRACE_SCN.replace('"t.jsonl"', '"t.csv", format = "azure"'),
            "t.csv": "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.97,5\n",
        },
        ["run", "s.toml"],
        ["t.csv:1", "GeneratedTokens", "the header has"],
    ),
    # a Mooncake line that is not JSON
    (
        "trace-mooncake-json",
        {
            "s.toml": TRACE_SCN,
            "t.jsonl": '{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": 9\n',
        },
        ["run", "s.toml"],
        ["t.jsonl:2", "not valid JSON"],
    ),
    # non-monotonic absolute times
    (
        "trace-azure-unsorted",
        {
            "s.toml": TRACE_SCN.replace("t.jsonl", "t.csv"),
            "t.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,5,5\n2023-11-16 18:17:03,5,5\n",
        },
        ["run", "s.toml"],
        ["t.csv:3", "sorted"],
    ),
    # an empty window after start/duration
    (
        "trace-empty-window",
        {
            "s.toml": TRACE_SCN.replace('"t.jsonl"', '"t.jsonl", start = "1h"'),
            "t.jsonl": '{"t": 1, "prompt_tokens": 5, "output_tokens": 5}\n',
        },
        ["run", "s.toml"],
        ["phases.0.arrival.start", "holds no rows", "t.jsonl"],
    ),
    # datasets: a malformed JSON line, no usable prompt
    (
        "dataset-json-line",
        {
            "s.toml": BASE.replace(
                'prompt_tokens = { dist = "fixed", value = 64 }',
                'dataset = { format = "jsonl", file = "d.jsonl" }',
            ),
            "d.jsonl": '{"prompt": "a b", "output_tokens": 3}\n{"prompt"\n',
        },
        ["run", "s.toml"],
        ["d.jsonl:2", "not valid JSON"],
    ),
    (
        "dataset-no-prompt",
        {
            "s.toml": BASE.replace(
                'prompt_tokens = { dist = "fixed", value = 64 }',
                'dataset = { format = "sharegpt", file = "d.json" }',
            ),
            "d.json": '[{"conversations": [{"from": "gpt", "value": "hi"}]}]',
        },
        ["run", "s.toml"],
        ["d.json", "no usable prompt among 1 rows", "no prompt text"],
    ),
    # multi-turn sessions (issue 13): no turns, a history mode that does not exist, last_n
    # missing, a think time without a unit, sessions over a trace's rows
    (
        "conversation-no-turns",
        {"s.toml": _sub("[workload]", '[workload]\nconversation = { think_time = "1s" }')},
        ["run", "s.toml"],
        ["s.toml", "workload.conversation.turns", "is required", "dist"],
    ),
    (
        "conversation-history",
        {"s.toml": _sub("[workload]", '[workload]\nconversation = { turns = 3, history = "all" }')},
        ["run", "s.toml"],
        ["workload.conversation.history", "'full'", "'last_n'", "'all'"],
    ),
    (
        "conversation-last-n",
        {
            "s.toml": _sub(
                "[workload]", '[workload]\nconversation = { turns = 3, history = "last_n" }'
            )
        },
        ["run", "s.toml"],
        ["workload.conversation.last_n", "required"],
    ),
    (
        "conversation-think-unit",
        {"s.toml": _sub("[workload]", "[workload]\nconversation = { turns = 3, think_time = 2 }")},
        ["run", "s.toml"],
        ["workload.conversation.think_time", "unit"],
    ),
    (
        "conversation-trace",
        {
            "s.toml": TRACE_SCN.replace("[workload]", "[workload]\nconversation = { turns = 2 }"),
            "t.jsonl": '{"t": 0, "prompt_tokens": 5, "output_tokens": 5}\n',
        },
        ["run", "s.toml"],
        ["workload.conversation", "trace's rows are single requests"],
    ),
    # exact lengths from the server's /tokenize: a value that is not auto, on or off
    (
        "server-tokenize-value",
        {"s.toml": _sub("[workload]", "[workload]\nserver_tokenize = true")},
        ["run", "s.toml"],
        ["workload.server_tokenize", "string"],
    ),
    (
        "server-tokenize-word",
        {"s.toml": _sub("[workload]", '[workload]\nserver_tokenize = "yes"')},
        ["run", "s.toml"],
        ["workload.server_tokenize", "'auto'", "'on'", "'off'"],
    ),
    # --- config.toml --------------------------------------------------------------------------
    # a TOML syntax error
    (
        "config-syntax",
        {"s.toml": BASE, "config.toml": "[timeout]\nconnect = \n"},
        ["run", "s.toml"],
        ["config.toml:2", "TOML"],
    ),
    # an unknown table
    (
        "config-unknown-table",
        {"s.toml": BASE, "config.toml": "[timeouts]\nconnect = 5\n"},
        ["run", "s.toml"],
        ["config.toml", "timeouts", "timeout"],
    ),
    # a negative timeout
    (
        "config-timeout-negative",
        {"s.toml": BASE, "config.toml": "[timeout]\nconnect = -1\n"},
        ["run", "s.toml"],
        ["config.toml", "timeout.connect"],
    ),
    # a timeout as a word
    (
        "config-timeout-word",
        {"s.toml": BASE, "config.toml": '[timeout]\nconnect = "soon"\n'},
        ["run", "s.toml"],
        ["config.toml", "timeout.connect"],
    ),
    # --config naming a missing file
    (
        "config-missing",
        {"s.toml": BASE},
        ["run", "s.toml", "--config", "nope.toml"],
        ["nope.toml", "not found"],
    ),
    # --- settings.json ------------------------------------------------------------------------
    # a trailing comma
    (
        "settings-json-syntax",
        {"s.toml": BASE, "settings.json": '{"base_url": "http://127.0.0.1:8000",}\n'},
        ["run", "s.toml"],
        ["settings.json:1", "JSON"],
    ),
    # a base URL without scheme
    (
        "settings-url-scheme",
        {"s.toml": BASE, "settings.json": '{"base_url": "127.0.0.1:8000"}'},
        ["run", "s.toml"],
        ["settings.json", "base_url", "http"],
    ),
    # a port out of range
    (
        "settings-url-port",
        {"s.toml": BASE, "settings.json": '{"provider": {"base_url": "http://127.0.0.1:0"}}'},
        ["run", "s.toml"],
        ["settings.json", "base_url", "65535"],
    ),
    # an unknown key
    (
        "settings-unknown",
        {"s.toml": BASE, "settings.json": '{"provider": {"base_ulr": "http://x"}}'},
        ["run", "s.toml"],
        ["settings.json", "base_ulr", "base_url"],
    ),
    # the key as a number
    (
        "settings-key-type",
        {
            "s.toml": BASE,
            "settings.json": '{"base_url": "http://127.0.0.1:8000", "api_key": 12345}',
        },
        ["run", "s.toml"],
        ["settings.json", "api_key", "string"],
    ),
    # --- command-line flags -------------------------------------------------------------------
    # --target without a scheme
    (
        "flag-target-scheme",
        {"s.toml": BASE},
        ["run", "s.toml", "--target", "127.0.0.1:8000"],
        ["--target", "http://"],
    ),
    # --target port out of range
    (
        "flag-target-port",
        {"s.toml": BASE},
        ["run", "s.toml", "--target", "http://127.0.0.1:99999"],
        ["--target", "1..65535"],
    ),
    # --set without '='
    (
        "flag-set-form",
        {"s.toml": BASE},
        ["run", "s.toml", "--set", "phases.0.duration"],
        ["--set", "KEY=VALUE"],
    ),
    # --set with an index past the end
    (
        "flag-set-index",
        {"s.toml": BASE},
        ["run", "s.toml", "--set", "phases.3.duration=2s"],
        ["--set", "phases.3.duration", "0..0"],
    ),
    # --set with a bad value
    (
        "flag-set-value",
        {"s.toml": BASE},
        ["run", "s.toml", "--set", "phases.0.duration=2"],
        ["--set", "phases.0.duration", "unit"],
    ),
    # --seed not a number
    ("flag-seed", {"s.toml": BASE}, ["run", "s.toml", "--seed", "abc"], ["--seed", "int"]),
    # an unknown endpoint
    (
        "flag-endpoint",
        {"s.toml": BASE},
        ["run", "s.toml", "--endpoint", "rerank"],
        ["--endpoint", "chat"],
    ),
    # a negative grace period
    (
        "flag-grace-negative",
        {"s.toml": BASE},
        ["run", "s.toml", "--grace", "-1"],
        ["--grace", ">= 0"],
    ),
    # an unknown flag
    ("flag-unknown", {"s.toml": BASE}, ["run", "s.toml", "--taget", "http://x"], ["--taget"]),
    # sweep and capacity read the same files as run, and refuse a missing one before starting anything
    (
        "sweep-settings-missing",
        {"s.toml": BASE, "sw.toml": 'scenario = "s.toml"\n[load]\nrate = [1]\n'},
        ["sweep", "sw.toml", "--settings", "nope.json"],
        ["nope.json", "not found"],
    ),
    (
        "capacity-config-missing",
        {"s.toml": BASE},
        ["capacity", "s.toml", "--slo", "ttft_p99=1s", "--config", "nope.toml"],
        ["nope.toml", "not found"],
    ),
    # capacity's search bounds: a zero or NaN start, a tolerance outside (0, 100 %)
    (
        "capacity-start-zero",
        {"s.toml": BASE},
        ["capacity", "s.toml", "--slo", "ttft_p99=1s", "--start-rate", "0"],
        ["--start-rate 0", "0 < start <= max"],
    ),
    (
        "capacity-rate-nan",
        {"s.toml": BASE},
        ["capacity", "s.toml", "--slo", "ttft_p99=1s", "--max-rate", "nan"],
        ["--max-rate nan", "0 < start <= max"],
    ),
    (
        "capacity-tolerance",
        {"s.toml": BASE},
        ["capacity", "s.toml", "--slo", "ttft_p99=1s", "--tolerance", "150%"],
        ["--tolerance 150%", "less than 100%"],
    ),
    # report of a missing file
    ("report-missing", {}, ["report", "nope.json"], ["nope.json", "not found"]),
    # report of a JSON file that is not a result
    (
        "report-not-result",
        {"x.json": '{"a": 1}'},
        ["report", "x.json"],
        ["x.json", "schema_version"],
    ),
    # report of a journal without header
    (
        "report-not-journal",
        {"x.journal.jsonl": '{"t": "rec"}\n'},
        ["report", "x.journal.jsonl"],
        ["x.journal.jsonl", "journal"],
    ),
    # report of a folder named like a journal
    (
        "report-journal-folder",
        {"d.journal.jsonl/keep": ""},
        ["report", "d.journal.jsonl"],
        ["d.journal.jsonl", "cannot read"],
    ),
]


def test_table_is_large_enough() -> None:
    assert len(ROWS) >= 40
    assert len({r[0] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize(
    ("files", "argv", "words"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_bad_input(
    files: dict[str, Any],
    argv: list[str],
    words: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
    monkeypatch.chdir(tmp_path)
    extra = ["--out", str(tmp_path / "out" / "r.json"), "--quiet"] if argv[0] == "run" else []
    with pytest.raises(SystemExit) as exc_info:
        raise SystemExit(cli.main([*argv, *extra]))
    err = capsys.readouterr().err
    assert exc_info.value.code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert 1 <= len(lines) <= 2, err
    assert "Traceback" not in err
    assert lines[0].startswith("error: "), err
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "out" / "r.journal.jsonl").exists(), "nothing may run"


# -- property: random documents load or fail cleanly ----------------------------------------

_scalar = st.one_of(
    st.integers(-5, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from(
        [
            "1s",
            "0s",
            "-1s",
            "5",
            "30ms",
            "2m",
            "1h",
            "poisson",
            "fixed",
            "uniform",
            "gamma",
            "constant",
            "closed",
            "ramp",
            "lognormal",
            "empirical",
            "mixture",
            "trace",
            "chat",
            "429",
        ]
    ),
)
_KEYS = st.sampled_from(
    [
        "name",
        "seed",
        "duration",
        "requests",
        "rate",
        "process",
        "dist",
        "value",
        "min",
        "max",
        "mean",
        "sigma",
        "std",
        "users",
        "think_time",
        "burstiness",
        "start",
        "end",
        "warmup",
        "max_concurrency",
        "arrival",
        "values",
        "weights",
        "components",
        "weight",
        "url",
        "endpoint",
        "on",
        "file",
        "x",
    ]
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=12,
)


def _phase() -> st.SearchStrategy[dict[str, Any]]:
    arrival = st.fixed_dictionaries(
        {"process": st.sampled_from(["poisson", "constant", "gamma", "closed", "ramp", "nope"])},
        optional={
            "rate": _scalar,
            "users": _scalar,
            "burstiness": _scalar,
            "start": _scalar,
            "end": _scalar,
            "x": _value,
        },
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "name": _scalar,
            "duration": _scalar,
            "requests": _scalar,
            "arrival": st.one_of(arrival, _value),
            "warmup": _scalar,
            "max_concurrency": _scalar,
            "x": _value,
        },
    )


def _length() -> st.SearchStrategy[Any]:
    return st.one_of(
        _value,
        st.fixed_dictionaries(
            {
                "dist": st.sampled_from(
                    ["fixed", "uniform", "normal", "lognormal", "empirical", "mixture", "zipf"]
                )
            },
            optional={
                "value": _scalar,
                "min": _scalar,
                "max": _scalar,
                "mean": _scalar,
                "sigma": _scalar,
                "std": _scalar,
                "values": _value,
                "weights": _value,
                "components": _value,
            },
        ),
    )


_doc = st.fixed_dictionaries(
    {},
    optional={
        "name": _scalar,
        "seed": _scalar,
        "description": _scalar,
        "workload": st.one_of(
            _value,
            st.fixed_dictionaries(
                {},
                optional={
                    "prompt_tokens": _length(),
                    "output_tokens": _length(),
                    "ignore_eos": _scalar,
                    "temperature": _scalar,
                    "x": _value,
                },
            ),
        ),
        "phases": st.one_of(_value, st.lists(st.one_of(_phase(), _value), max_size=3)),
        "slo": _value,
        "retry": _value,
        "target": _value,
        "sim": _value,
        "x": _value,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_doc)
def test_random_scenarios_load_or_fail_cleanly(doc: dict[str, Any]) -> None:
    try:
        validate_scenario(doc, "random.toml", Path("."))
    except HarnessError as exc:
        msg = str(exc)
        assert msg.startswith(("random.toml", "--set")), msg
        assert "\n" not in msg.strip(), msg


def test_random_scenario_files_roundtrip_through_toml(tmp_path: Path) -> None:
    """The table's base document is valid, so the property's failures come from the mutations."""
    p = tmp_path / "ok.toml"
    p.write_text(BASE)
    validate_scenario(tomllib.loads(BASE), str(p), tmp_path)
    assert os.path.exists(p)


def test_empty_key_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key variable that is set but empty (a shell that did not export it) is refused, not run
    keyless; unset, the run may go without a key (a local server)."""
    (tmp_path / "s.toml").write_text(
        BASE.replace(
            "[workload]",
            '[target]\nurl = "http://127.0.0.1:9"\n'
            'api_key_env = "HARNESS_TEST_EMPTY_KEY"\n[workload]',
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_TEST_EMPTY_KEY", " ")
    assert cli.main(["run", "s.toml", "--quiet", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HARNESS_TEST_EMPTY_KEY" in err[0] and "is set but empty" in err[0]
