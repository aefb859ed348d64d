"""Secrets and terminal text, unit by unit: the Redactor that server text passes through where it
enters the harness, the terminal escaper used where commands print, credentials in URLs refused
at load, and errors about a file's contents that never quote its lines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config.resolve import CliValues, Sources, resolve
from harness.config.settings import load_settings
from harness.config.target import Secret, Target, normalize_base_url
from harness.errors import ConfigError, preview
from harness.redact import Redactor, mask
from harness.termtext import terminal_safe

KEY = "sk-rel-SECRETSECRET-7f3a9c1e5b2d4a60"
HDR = "hdr-SECRET-9d8c7b6a5f4e3d2c1b0a"
# what a terminal would obey: C0 but newline and tab, DEL, C1, bidi overrides/isolates, U+2028/9
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def pieces(secret: str, text: str) -> list[str]:
    """Pieces of `secret` longer than its visible prefix found in `text`."""
    return [secret[i : i + 7] for i in range(len(secret) - 6) if secret[i : i + 7] in text]


# -- the Redactor ------------------------------------------------------------------------------


def test_masks_an_echoed_key_and_header_value() -> None:
    r = Redactor([KEY, HDR])
    out = r(f"401 bad key: Bearer {KEY} (api-key: {HDR})")
    assert out == f"401 bad key: Bearer {mask(KEY)} (api-key: {mask(HDR)})"
    assert out.count("***") == 2 and not pieces(KEY, out) and not pieces(HDR, out)


def test_masks_a_key_cut_by_truncation_even_before_a_quote() -> None:
    r = Redactor([KEY])
    cut = ("x" * 290 + KEY)[:300]  # error_message keeps 300 characters
    assert r(cut).endswith("x" + mask(KEY)) and not pieces(KEY, r(cut))
    as_repr = repr(("b" * 70 + KEY).encode()[:80])  # the decoder's `chunk is not JSON: b'...'`
    assert as_repr.endswith("'") and not pieces(KEY, r(as_repr))


def test_masks_json_escaped_and_percent_encoded_spellings() -> None:
    odd = 'tok/with"quote\\and space'
    r = Redactor([odd])
    for spelled in (json.dumps(odd)[1:-1], quote(odd, safe="")):
        assert spelled != odd
        out = r(f"echo: {spelled} end")
        assert spelled not in out and "***" in out and out.endswith(" end")


def test_a_secret_that_contains_another_is_masked_whole() -> None:
    short, long = "abcdefgh12", "abcdefgh12345678"
    out = Redactor([short, long])(f"{long} {short}")
    assert out == f"{mask(long)} {mask(short)}"


def test_repeated_leading_characters_cannot_hide_the_rest() -> None:
    secret = "aaaaaaaXYZ1234567"
    out = Redactor([secret])("a" + secret + " then a" + secret[:14] + "!")
    assert not pieces(secret, out), out


def test_short_values_are_not_searched_and_empty_text_is_kept() -> None:
    r = Redactor(["perf", "", "abcdef"])  # 6 characters or fewer: the mask would show them whole
    assert not r.has_secrets
    assert r("perf abcdef") == "perf abcdef" and r("") == ""
    assert "7f3a" not in repr(Redactor([KEY]))


def test_the_redactor_escapes_control_characters_on_one_line() -> None:
    out = Redactor([KEY])(f"\x1b]52;c;{KEY}\x07\nnext\x9b2J\u202e")
    assert not UNSAFE.search(out) and "\n" not in out
    assert out == f"\\u001b]52;c;{mask(KEY)}\\u0007\\u000anext\\u009b2J\\u202e"


def test_value_reaches_every_string_of_a_json_document() -> None:
    doc = {"info": {f"k{KEY}": [f"x {KEY}", 1, None]}, "n": 2.5, "t": (KEY,)}
    out = Redactor([KEY]).value(doc)
    assert not pieces(KEY, json.dumps(out, default=list)) and out["n"] == 2.5


def test_the_target_redacts_its_key_and_header_values() -> None:
    t = Target("http", "http://h", None, "chat", Secret(KEY), headers={"api-key": HDR, "X-T": "a"})
    out = t.redactor()(f"{KEY} {HDR} a")
    assert out == f"{mask(KEY)} {mask(HDR)} a"
    assert Target("http", "http://h", None, "chat").redactor()(f"{KEY}\x1b") == f"{KEY}\\u001b"


_ALPHABET = "abcXYZ019-_."  # no '*': the mask's own stars are outside every secret


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(_ALPHABET, min_size=7, max_size=30),
    parts=st.lists(
        st.one_of(st.text(_ALPHABET, max_size=12), st.integers(7, 30)), min_size=1, max_size=6
    ),
)
def test_property_no_prefix_of_seven_survives(secret: str, parts: list[str | int]) -> None:
    """Text of random filler and echoes of the secret, whole or cut to its first n characters:
    after redaction no 7-character start of the secret is left, and the filler is kept."""
    text = "".join(p if isinstance(p, str) else secret[:p] for p in parts)
    out = Redactor([secret])(text)
    assert secret[:7] not in out
    if secret[:7] not in text:
        assert out == text


# -- the terminal escaper ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "\x1b[2J\x1b[H",  # clear screen, cursor home
        "\x1b]0;pwned\x07",  # window title (OSC 0)
        "\x1b]52;c;cHduZWQ=\x07",  # write the clipboard (OSC 52)
        "\x1bP+q\x1b\\",  # DCS
        "\x9b31m\x9d0;t\x9c",  # C1 CSI, OSC, ST
        "over\rwrite",  # carriage return
        "\u202etxt.exe\u2066\u2028",  # bidi override, isolate, line separator
        "\x00\x08\x7f",
    ],
)
def test_terminal_safe_leaves_no_control(raw: str) -> None:
    out = terminal_safe(f"model {raw} end")
    assert not UNSAFE.search(out) and out.startswith("model ") and out.endswith(" end")
    assert "\\u00" in out or "\\u20" in out


def test_terminal_safe_keeps_text_and_optionally_newlines() -> None:
    text = "é 模型 🙂 tab\there\nline two"
    assert terminal_safe(text) == text
    assert terminal_safe(text, keep_newlines=False) == "é 模型 🙂 tab\\u0009here\\u000aline two"
    assert terminal_safe(terminal_safe("\x1b[2J")) == "\\u001b[2J"  # idempotent


def test_terminal_safe_output_of_json_is_still_json() -> None:
    doc = {"model": "m\x1b[2J\x9b\u202e"}
    text = terminal_safe(json.dumps(doc, ensure_ascii=False))
    assert not UNSAFE.search(text) and json.loads(text) == doc


# -- credentials in URLs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://user:pw-SECRET-77@127.0.0.1:8000/v1", "https://tok-SECRET-77@h.example/api"]
)
def test_a_url_with_credentials_is_refused_without_repeating_it(url: str) -> None:
    with pytest.raises(ConfigError) as ei:
        normalize_base_url(url)
    msg = str(ei.value)
    assert "credentials" in msg and "SECRET" not in msg and "\n" not in msg
    with pytest.raises(ConfigError) as ei:
        resolve(CliValues(target=url), None, None, Sources(), env={})
    assert "SECRET" not in str(ei.value)


def test_an_at_sign_in_the_path_is_not_a_credential() -> None:
    assert normalize_base_url("http://h:8000/team@x/v1") == "http://h:8000/team@x"


def test_settings_with_a_credential_url_name_the_key_not_the_url(tmp_path: Path) -> None:
    p = tmp_path / "settings.json"
    p.write_text(json.dumps({"provider": {"base_url": "http://u:pw-SECRET-77@h/v1"}}))
    with pytest.raises(ConfigError) as ei:
        load_settings(p)
    assert "provider.base_url" in str(ei.value) and "SECRET" not in str(ei.value)


# -- errors about a file's contents ------------------------------------------------------------


def test_preview_shows_numbers_and_short_strings_only() -> None:
    assert preview(1.5) == "1.5" and preview(None) == "None" and preview("abc") == "'abc'"
    assert preview("2023-11-16 18:17:03.97") == "'2023-11-16 18:17:03.97'"
    assert preview(f"OPENAI_API_KEY={KEY}") == f"'OPENAI…' ({len(KEY) + 15} characters)"
    assert (
        preview([KEY, KEY]) == "a list of 2 items" and preview({"k": KEY}) == "an object with 1 key"
    )


def test_settings_errors_do_not_echo_values(tmp_path: Path) -> None:
    p = tmp_path / "settings.json"
    for doc in ({"provider": KEY}, {"api_key": [KEY]}, {"default_model": {"k": KEY}}):
        p.write_text(json.dumps(doc))
        with pytest.raises(ConfigError) as ei:
            load_settings(p)
        assert not pieces(KEY, str(ei.value)), str(ei.value)
    p.write_text('{"base_url": "http://h",\n  "api_key": sk-rel-SECRETSECRET}')
    with pytest.raises(ConfigError) as ei:
        load_settings(p)
    assert ei.value.line == 2 and ei.value.column == 14 and "SECRET" not in str(ei.value)


def _env_file(folder: Path) -> Path:
    p = folder / ".env"
    p.write_text(f"OPENAI_API_KEY={KEY}\nOTHER=1\n")
    return p


def test_a_dotenv_given_as_a_trace_is_named_not_quoted(tmp_path: Path) -> None:
    """The issue's case: a `.env` handed over as a trace printed its first line, key included."""
    from harness.workload.trace_formats import TraceSpec, detect_format, read_chunks

    env = _env_file(tmp_path)
    with pytest.raises(ConfigError) as ei:
        detect_format(env)
    assert ei.value.line == 1 and "matches no trace format" in str(ei.value)
    assert not pieces(KEY, str(ei.value)) and "OPENAI" not in str(ei.value)
    for fmt, cols in (("azure", ()), ("csv", (("t", "t"), ("prompt_tokens", "p")))):
        with pytest.raises(ConfigError) as ei:
            list(read_chunks(TraceSpec(env, fmt, False, cols), {}))
        assert not pieces(KEY, str(ei.value)), str(ei.value)
    rows = tmp_path / "t.csv"
    rows.write_text(f"t,p,o\n{KEY},5,5\n")
    cols = (("t", "t"), ("prompt_tokens", "p"), ("output_tokens", "o"))
    with pytest.raises(ConfigError) as ei:
        list(read_chunks(TraceSpec(rows, "csv", False, cols), {}))
    assert ei.value.line == 2 and "expected a number, got 'sk-rel…'" in str(ei.value)
    assert not pieces(KEY, str(ei.value))


def test_data_files_show_a_value_by_its_first_characters(tmp_path: Path) -> None:
    from harness.config.validate import Table
    from harness.workload.datasets import RowError, row_prompt
    from harness.workload.lengths import parse_length

    with pytest.raises(RowError) as ei:
        row_prompt({"prompt": "hi", "output_tokens": KEY}, {})
    assert not pieces(KEY, str(ei.value)) and "output_tokens" in str(ei.value)
    env = _env_file(tmp_path)
    t = Table({"dist": "empirical", "file": str(env)}, "s.toml", "workload.output_tokens")
    with pytest.raises(ConfigError) as ei:
        parse_length(t, tmp_path)
    assert ":1: expected one integer per line" in str(ei.value)
    assert not pieces(KEY, str(ei.value))
