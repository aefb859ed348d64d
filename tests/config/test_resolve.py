"""The precedence chain: command line > scenario [target] > settings.json > config.toml > default."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.config.configfile import parse_config
from harness.config.resolve import CliValues, Sources, load_sources, resolve, url_warnings
from harness.config.scenario import TargetOverrides
from harness.config.settings import parse_settings
from harness.errors import ConfigError

ST = parse_settings(
    {
        "provider": {
            "base_url": "https://taotoken.net/api",
            "api_key_env": "TK",
            "api_key": "sk-filekey999",
            "timeout_seconds": 45,
        },
        "defaults": {"model": "settings-model", "temperature": 0.5},
    },
    "settings.json",
)
CF = parse_config(
    {
        "inference": {"model": "config-model", "top_p": 0.8},
        "api": {"base_url": "http://cfg:8000/v1", "endpoint": "completions"},
        "timeout": {"connect": 3, "read": 99, "retry": 2},
    },
    "config.toml",
)


def _src(settings=True, config=True):
    return Sources(ST if settings else None, CF if config else None)


def _row(res, name):
    return next((v, s) for n, v, s in res.explain if n == name)


@pytest.mark.parametrize(
    ("cli", "scn", "settings", "config", "url", "model"),
    [
        # the command line wins over everything
        (
            CliValues("http://cli:1", "cli-model"),
            TargetOverrides("http://scn:2", "scn-model"),
            True,
            True,
            "http://cli:1",
            "cli-model",
        ),
        # then the scenario's [target]
        (
            CliValues(),
            TargetOverrides("http://scn:2", "scn-model"),
            True,
            True,
            "http://scn:2",
            "scn-model",
        ),
        # then settings.json
        (CliValues(), TargetOverrides(), True, True, "https://taotoken.net/api", "settings-model"),
        # then config.toml
        (CliValues(), TargetOverrides(), False, True, "http://cfg:8000", "config-model"),
        # nothing: the simulator
        (CliValues(), TargetOverrides(), False, False, None, None),
    ],
)
def test_precedence(cli, scn, settings, config, url, model):
    res = resolve(cli, scn, "s.toml", _src(settings, config), env={})
    assert (res.target.base_url if res.target else None) == url
    assert (res.target.model if res.target else None) == model


def test_explain_names_sources_and_masks_key():
    res = resolve(CliValues(), None, None, _src(), env={"TK": "sk-envkey12345678"})
    text = res.explain_text()
    assert _row(res, "base_url") == ("https://taotoken.net/api", "settings.json provider.base_url")
    assert _row(res, "api_key") == (
        "sk-env***",
        "env TK (named by settings.json provider.api_key_env)",
    )
    assert _row(res, "endpoint") == ("completions", "config.toml [api] endpoint")
    assert _row(res, "read_timeout_s") == ("45", "settings.json provider.timeout_seconds")
    assert _row(res, "connect_timeout_s") == ("3", "config.toml [timeout] connect")
    assert "envkey" not in text and "filekey" not in text
    assert res.target.describe()["api_key"] == "sk-env***"


def test_empty_env_falls_back_to_file_key_with_warning():
    res = resolve(CliValues(), None, None, _src(), env={"TK": ""})
    assert res.target.api_key.reveal() == "sk-filekey999"
    assert res.target.key_source == "settings.json provider.api_key"
    assert any("set but empty" in w for w in res.warnings)


def test_empty_env_and_no_file_key_is_refused():
    import pytest

    from harness.errors import ConfigError

    src = _src()
    src = type(src)(replace(src.settings, file_key=None), src.config)
    with pytest.raises(ConfigError, match="TK: is set but empty, and no key is in settings.json"):
        resolve(CliValues(), None, None, src, env={"TK": "  "})
    assert (
        resolve(CliValues(), None, None, src, env={}).target.api_key is None
    )  # unset: no key, fine


def test_insecure_and_workload_defaults():
    from harness.config.validate import Table
    from harness.workload.lengths import parse_length
    from harness.workload.scenario import Workload

    wl = Workload(
        parse_length(Table({"dist": "fixed", "value": 8}, "s"), None),
        parse_length(Table({"dist": "fixed", "value": 8}, "s"), None),
        top_p=0.3,
    )
    res = resolve(CliValues(insecure=True), None, None, _src(), wl, env={})
    assert res.target.tls_verify is False and res.target.describe()["tls_verify"] is False
    assert (res.workload.temperature, res.workload.top_p) == (0.5, 0.3)  # settings, scenario
    assert res.retry is not None and res.retry.max == 2


def test_bad_url_names_its_file():
    st = parse_settings({"base_url": "taotoken.net/api"}, "my.json")
    with pytest.raises(ConfigError) as e:
        resolve(CliValues(), None, None, Sources(st, None), env={})
    assert e.value.where == "my.json" and e.value.key == "base_url"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://h:8000/V1", "typo of 'v1'"),  # capital V
        ("http://h:8000/vl", "typo of 'v1'"),  # letter l for 1
        ("https://taotoken.net", "lives under /api"),
        ("http://taotoken.net/api", "served over https"),
        ("http://h/v1/chat", "part of an endpoint path"),
    ],
)
def test_url_warnings(url, fragment):
    assert any(fragment in w for w in url_warnings(url))


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1", "https://taotoken.net/api", "http://h:8000/"]
)
def test_good_urls_do_not_warn(url):
    assert url_warnings(url) == []


def test_load_sources_defaults_and_explicit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = load_sources(None, None)
    assert src.settings is None and src.config is None and len(src.notes) == 2
    with pytest.raises(ConfigError, match="file not found"):
        load_sources("nope.json", None)
    (tmp_path / "config.toml").write_text('[api]\nbase_url = "http://x:1"\n')
    assert load_sources(None, None).config.api.base_url == "http://x:1"


def test_gateway_key_variable_by_host_and_flag():
    from harness.config.resolve import Sources

    empty = Sources(None, None)
    env = {
        "TAOTOKEN_API_KEY": "sk-tao123456",
        "OPENAI_API_KEY": "sk-oai123456",
        "MY_KEY": "sk-mine12345",
    }
    tao = resolve(
        CliValues(target="https://taotoken.net/api", model="m"), None, None, empty, env=env
    )
    assert tao.target.api_key.reveal() == "sk-tao123456"
    assert tao.target.key_source.startswith("env TAOTOKEN_API_KEY")
    # A key is never sent to a host it does not belong to by default ...
    other = resolve(
        CliValues(target="https://example.com/api", model="m"), None, None, empty, env=env
    )
    assert other.target.api_key is None
    # ... but --api-key-env names it for any host, and wins over the host default.
    named = resolve(
        CliValues(target="https://taotoken.net/api", model="m", api_key_env="MY_KEY"),
        None,
        None,
        empty,
        env=env,
    )
    assert (
        named.target.api_key.reveal() == "sk-mine12345" and named.target.key_source == "env MY_KEY"
    )


def test_api_key_env_flag_refuses_a_key(capsys):
    import pytest

    from harness.cli import main

    with pytest.raises(SystemExit) as ei:  # argparse's own exit for a bad flag value
        main(["run", "s.toml", "--api-key-env", "sk-secretvalue123"])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "variable's name, not the key" in err and "secretvalue" not in err


def test_config_served_model_name_wins_over_model_name():
    """config.toml that starts vLLM with --served-model-name: requests must carry that name, not
    [model] name (vLLM answers 404 to the path); [inference] model still wins over both."""
    cf = parse_config(
        {
            "api": {"base_url": "http://127.0.0.1:8000"},
            "server": {"extra_args": ["--served-model-name", "tiny"]},
            "model": {"name": "/models/tiny"},
        },
        "config.toml",
    )
    res = resolve(CliValues(), TargetOverrides(), "s.toml", Sources(None, cf))
    assert res.target.model == "tiny"
    assert _row(res, "model") == ("tiny", "config.toml [server] extra_args --served-model-name")
    cf2 = replace(cf, inference=replace(cf.inference, model="named"))
    assert (
        resolve(CliValues(), TargetOverrides(), "s.toml", Sources(None, cf2)).target.model
        == "named"
    )
