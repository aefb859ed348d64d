"""Base URL normalisation and key masking."""

from __future__ import annotations

import re

import pytest

from harness.config.target import Secret, Target, mask_key, normalize_base_url
from harness.errors import ConfigError


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        ("http://h:8000/v1/v1", "http://h:8000"),  # a doubled /v1 is undone
        ("https://taotoken.net/api", "https://taotoken.net/api"),
        ("https://taotoken.net/api/v1", "https://taotoken.net/api"),
        ("http://h/v1/chat/completions", "http://h"),  # a full endpoint URL
        ("  http://h:1/  ", "http://h:1"),
    ],
)
def test_normalize(url, base):
    assert normalize_base_url(url) == base
    t = Target("http", normalize_base_url(url), "m", "chat")
    assert t.url("/v1/chat/completions").count("/v1/") == 1


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("127.0.0.1:8000", "starting with http:// or https://"),
        ("ftp://h", "starting with http://"),
        ("http://", "with a host"),
        ("http://h:99999", "port out of range"),
        ("http://h:0", "port out of range"),
        ("http://h/v1?x=1", "without ?query"),
    ],
)
def test_bad_urls(url, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        normalize_base_url(url)


def test_secret_never_prints_itself():
    s = Secret("sk-verysecretvalue")
    assert "verysecret" not in repr(s) and "verysecret" not in str(s) and "verysecret" not in f"{s}"
    assert s.masked() == "sk-ver***" and mask_key("") == "(none)"
    t = Target("http", "http://h", "m", "chat", s)
    assert "verysecret" not in repr(t) and t.describe()["api_key"] == "sk-ver***"


def test_request_headers_are_built_in_one_place():
    from harness.config.target import Secret, Target

    t = Target(
        "http", "http://h", "m", "chat", api_key=Secret("sk-abcdef123"), headers={"X-Org": "o"}
    )
    assert t.request_headers({"Content-Type": "application/json"}) == {
        "Content-Type": "application/json",
        "X-Org": "o",
        "Authorization": "Bearer sk-abcdef123",
    }
    assert "Authorization" not in Target("http", "http://h", "m", "chat").request_headers()
