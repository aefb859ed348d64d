"""Fixtures of the tests against real engines: whether llama.cpp's server and model are here."""

from __future__ import annotations

import os

import pytest

from harness.server import llamacpp


@pytest.fixture(scope="module")
def llama_ready() -> None:
    """Skip with the reason when llama-server or its model is missing, unless
    HARNESS_REQUIRE_LLAMACPP is set (CI sets it after building them): then missing fails."""
    reason = llamacpp.available()
    if reason is None:
        return
    if os.environ.get("HARNESS_REQUIRE_LLAMACPP"):
        pytest.fail(f"HARNESS_REQUIRE_LLAMACPP is set but {reason}")
    pytest.skip(reason)
