"""config.toml: every table, unknown keys and wrong types name the file, key and line."""

from __future__ import annotations

import pytest

from harness.config.configfile import key_line, load_config
from harness.errors import ConfigError
from tests.conftest import REPO


def test_repo_example_loads_cleanly():
    cfg = load_config(REPO / "config.toml")
    assert cfg.server.engine == "vllm" and cfg.metrics.scrape_interval_s == 1.0
    assert cfg.deprecations == ()


def test_removed_keys_still_load_with_one_warning_each(tmp_path):
    """A config.toml written before the dead keys went: it loads, each key named once."""
    p = tmp_path / "config.toml"
    p.write_text(
        "[inference]\nstream = false\n[metrics]\nrecord_ttft = true\nrecord_tokens = false\n"
        "scrape = false\n"
    )
    cfg = load_config(p)
    assert cfg.metrics.scrape is False
    assert [d.split(": ")[1] for d in cfg.deprecations] == [
        "inference.stream",
        "metrics.record_ttft",
        "metrics.record_tokens",
    ]
    assert all(d.startswith(f"{p}: ") and "deprecated and ignored" in d for d in cfg.deprecations)
    # the old type is still checked: a typo'd value is an error, not a warning
    p.write_text('[metrics]\nrecord_ttft = "yes"\n')
    with pytest.raises(ConfigError, match="metrics.record_ttft"):
        load_config(p)


def test_run_and_check_show_the_deprecation(tmp_path):
    from harness.config.resolve import CliValues, load_sources, resolve

    p = tmp_path / "config.toml"
    p.write_text("[inference]\nstream = true\n")
    res = resolve(CliValues(), None, None, load_sources(None, str(p)), env={})
    assert res.warnings == [
        f"{p}: inference.stream: deprecated and ignored (every request streams: "
        "the harness measures SSE streams); remove it"
    ]


def test_all_tables(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        '[inference]\nmodel = "m"\nmax_tokens = 8\n[timeout]\nconnect = "2s"\nread = 30\nretry = 2\n'
        '[metrics]\nscrape_interval = "500ms"\n[server]\nengine = "sim"\nport = 9000\n'
        'extra_args = ["--x", "1"]\n[model]\nname = "n"\ndtype = "bfloat16"\n'
        '[engine]\nblock_size = 32\n[api]\nbase_url = "http://h/v1"\nendpoint = "completions"\n'
    )
    c = load_config(p)
    assert (c.inference.model, c.timeout.connect_s, c.timeout.read_s, c.timeout.retry) == (
        "m",
        2.0,
        30.0,
        2,
    )
    assert c.metrics.scrape_interval_s == 0.5 and c.server.extra_args == ("--x", "1")
    assert (c.model.dtype, c.engine.block_size, c.api.endpoint) == ("bfloat16", 32, "completions")


@pytest.mark.parametrize(
    ("text", "key", "line", "fragment"),
    [
        (
            '[server]\nhost = "h"\nmax_num_seq = 4\n',
            "server.max_num_seq",
            3,
            "did you mean 'max_num_seqs'",
        ),
        ('[server]\nport = "8000"\n', "server.port", 2, "expected an integer"),
        ("# c\n[timeout]\nread = -1\n", "timeout.read", 3, "> 0"),
        ('[metrics]\nscrape_interval = "10ms"\n', "metrics.scrape_interval", 2, "at least"),
        ('[model]\ndtype = "fp8x"\n', "model.dtype", 2, "expected one of"),
        (
            '[engine]\nenable_chunked_prefill = "yes"\n',
            "engine.enable_chunked_prefill",
            2,
            "true or false",
        ),
        ('[api]\napi_key = "sk-x"\n', "api.api_key", 2, "does not hold keys"),
        ('[infernce]\nmodel = "m"\n', "infernce", 1, "did you mean 'inference'"),
        ('\n\n[server]\nengine = "tgi"\n', "server.engine", 4, "expected one of"),
    ],
)
def test_errors(tmp_path, text, key, line, fragment):
    p = tmp_path / "config.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert (e.value.key, e.value.line) == (key, line)
    assert fragment in str(e.value) and str(p) in str(e.value)


def test_syntax_error_line(tmp_path):
    p = tmp_path / "config.toml"
    p.write_text("[server]\nport = \n")
    with pytest.raises(ConfigError, match="TOML syntax error") as e:
        load_config(p)
    assert e.value.line == 2


def test_key_line_dotted_form():
    assert key_line("a = 1\nserver.port = 3\n", "server.port") == 2
    assert key_line("[server]\nport = 3\n[model]\nport = 4\n", "model.port") == 4
