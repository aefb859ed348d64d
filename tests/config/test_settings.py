"""settings.json: both shapes, key precedence, errors with file, key and line."""

from __future__ import annotations

import json

import pytest

from harness.config.settings import load_settings, parse_settings
from harness.errors import ConfigError

NESTED = {
    "provider": {
        "base_url": "https://taotoken.net/api",
        "api_key_env": "TAOTOKEN_API_KEY",
        "timeout_seconds": 60,
    },
    "defaults": {"model": "m", "temperature": 0.7, "max_tokens": 512, "top_p": 0.9},
    "local_engine": {
        "enabled": False,
        "endpoint": "http://127.0.0.1:8000/v1",
        "health_path": "/health",
    },
}


def test_example_file_loads():
    from tests.conftest import REPO

    s = load_settings(REPO / "settings.example.json")
    assert s.shape == "nested" and s.api_key_env == "TAOTOKEN_API_KEY" and s.file_key is None


def test_nested_shape():
    s = parse_settings(NESTED, "settings.json")
    assert (s.base_url, s.model, s.timeout_s, s.max_tokens, s.top_p) == (
        "https://taotoken.net/api",
        "m",
        60.0,
        512,
        0.9,
    )
    assert not s.local_engine.enabled


def test_flat_shape():
    s = parse_settings(
        {
            "base_url": "http://h/v1",
            "api_key": " sk-flatkey123 \n",
            "default_model": "m",
            "headers": {"X-Team": "perf"},
            "env_fallback": "MY_KEY",
        },
        "s.json",
    )
    assert s.shape == "flat" and s.model == "m" and s.headers == {"X-Team": "perf"}
    assert s.file_key is not None and s.file_key.reveal() == "sk-flatkey123"  # whitespace stripped


@pytest.mark.parametrize(
    ("env", "file_key", "want", "source"),
    [
        ({"K": "sk-env123456"}, "sk-file12345", "sk-env123456", "env K"),  # env wins
        ({"K": ""}, "sk-file12345", "sk-file12345", "s.json api_key"),  # empty env never overrides
        (
            {"K": "   "},
            "sk-file12345",
            "sk-file12345",
            "s.json api_key",
        ),  # whitespace-only is empty
        ({}, "sk-file12345", "sk-file12345", "s.json api_key"),  # unset: the file's key
        ({}, None, None, ""),  # nothing: no key
        ({"K": " sk-env123456\n"}, None, "sk-env123456", "env K"),  # stray whitespace stripped
    ],
)
def test_key_precedence(env, file_key, want, source):
    doc = {"base_url": "http://h", "env_fallback": "K"}
    if file_key:
        doc["api_key"] = file_key
    key, src = parse_settings(doc, "s.json").key(env)
    assert (key.reveal() if key else None) == want
    assert src == source


def test_key_never_printed():
    s = parse_settings({"base_url": "http://h", "api_key": "sk-secretvalue999"}, "s.json")
    assert "secretvalue" not in repr(s) and "sk-sec***" in repr(s)


@pytest.mark.parametrize(
    ("doc", "key", "fragment"),
    [
        ({"provider": {"base_urll": "x"}}, "provider.base_urll", "did you mean 'base_url'"),
        ({"provider": {"timeout_seconds": "60"}}, "provider.timeout_seconds", "expected a number"),
        (
            {"provider": {"api_key_env": "sk-abcdef123"}},
            "provider.api_key_env",
            "NAME of an environment",
        ),
        ({"defaults": {"top_p": 2}}, "defaults.top_p", "<= 1"),
        ({"local_engine": {"enabled": True}}, "local_engine.endpoint", "required"),
        ({"base_url": "x", "provider": {}}, "base_url", "mixes the flat shape"),
        (
            {"base_url": "x", "headers": {"Authorization": "Bearer x"}},
            "headers",
            "do not put Authorization",
        ),
        ({"base_url": "x", "modle": "m"}, "modle", "unknown key"),
        (
            {"base_url": "x", "headers": {"X-Team": "perf\r\nX-Evil: 1"}},
            "headers",
            "X-Team: the value holds a control",
        ),
        (
            {"base_url": "x", "headers": {"X Team": "perf"}},
            "headers",
            "'X Team' is not an HTTP header name",
        ),
        (
            {"base_url": "x", "headers": {"X-Team": "caf\u00e9 \u2026"}},
            "headers",
            "cannot carry (U+2026) at position 6",
        ),
    ],
)
def test_errors_name_key(doc, key, fragment):
    with pytest.raises(ConfigError) as e:
        parse_settings(doc, "s.json", json.dumps(doc, indent=2))
    assert e.value.key == key and fragment in str(e.value)
    assert e.value.line is not None


def test_error_line_and_bad_json(tmp_path):
    p = tmp_path / "settings.json"
    p.write_text('{\n  "provider": {\n    "base_url": "x",\n    "timeout_seconds": true\n  }\n}\n')
    with pytest.raises(ConfigError) as e:
        load_settings(p)
    assert e.value.line == 4 and f"{p}:4: provider.timeout_seconds" in str(e.value)
    p.write_text('{"base_url": "x",}\n')
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_settings(p)
    with pytest.raises(ConfigError, match="file not found"):
        load_settings(tmp_path / "missing.json")


def test_a_key_http_cannot_carry_is_one_line_naming_where_it_came_from(monkeypatch, capsys):
    """A pasted ellipsis or a newline in the key: exit 2 before any request, the key masked."""
    from harness.cli import main

    for key in ("sk-abcdefgh\u2026ijkl", "sk-abcdefgh\nijkl"):
        monkeypatch.setenv("MYKEY", key)
        assert (
            main(
                [
                    "run",
                    "scenarios/steady.toml",
                    "--target",
                    "http://127.0.0.1:9/v1",
                    "--model",
                    "m",
                    "--api-key-env",
                    "MYKEY",
                    "--explain",
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(
            "error: env MYKEY: the API key (sk-abc***) holds"
        ), err
        assert "defgh" not in err[0]
