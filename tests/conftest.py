"""Shared fixtures: paths and a helper to write scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def write_scenario(tmp_path: Path):
    """Write a scenario TOML into tmp_path and return its path."""

    def write(text: str, name: str = "s.toml") -> Path:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return p

    return write
