"""The files a command reads its target from -- settings.json and config.toml -- and the
command-line options that name them and the API key's variable (`FILE_OPTIONS`,
`KEY_ENV_OPTION`, rows of harness.argtable tables). `harness.config.resolve` merges what they
say with the command line and the scenario."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from harness.argtable import opt
from harness.config.configfile import DEFAULT_CONFIG_FILE, ConfigFile, load_config
from harness.config.settings import DEFAULT_SETTINGS_FILE, Settings, load_settings


@dataclass(frozen=True)
class Sources:
    """The files a command read (None: absent) and notes on what was skipped."""

    settings: Settings | None = None
    config: ConfigFile | None = None
    notes: tuple[str, ...] = ()


# The variable a well-known gateway's users keep its key in: used when nothing names one, and
# only for that gateway's host, so a key is never sent to a server it does not belong to.
KNOWN_KEY_ENVS = {"taotoken.net": "TAOTOKEN_API_KEY", "api.openai.com": "OPENAI_API_KEY"}


def known_key_env(url: str | None) -> str | None:
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url.strip()).hostname or "") if url else ""
    except ValueError:
        return None
    return next((v for h, v in KNOWN_KEY_ENVS.items() if host == h or host.endswith("." + h)), None)


def _key_env_help() -> str:
    return (
        "environment variable holding the API key (default: as the files say; "
        + ", ".join(f"{v} for {h}" for h, v in KNOWN_KEY_ENVS.items())
        + ")"
    )


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise argparse.ArgumentTypeError(
            f"expected an environment variable name such as TAOTOKEN_API_KEY, "
            f"got {value[:6]!r}... (give the variable's name, not the key)"
        )
    return value


# --api-key-env NAME: the variable the key is read from (never the key on a command line).
KEY_ENV_OPTION = opt("--api-key-env", metavar="NAME", type=_env_name, help=_key_env_help())

# --settings and --config, shared by run, check, serve, sweep and capacity.
FILE_OPTIONS = (
    opt(
        "--settings",
        metavar="PATH",
        help=f"settings JSON (default: ./{DEFAULT_SETTINGS_FILE} when present)",
    ),
    opt(
        "--config",
        metavar="PATH",
        help=f"config TOML (default: ./{DEFAULT_CONFIG_FILE} when present)",
    ),
)


def load_sources(settings_path: str | None, config_path: str | None) -> Sources:
    """Read settings.json and config.toml. An explicit path must exist; a default one may not.

    Raises ConfigError for a named file that is missing or for any bad file."""
    notes = []
    settings = config = None
    sp = Path(settings_path or DEFAULT_SETTINGS_FILE)
    if settings_path or sp.is_file():
        settings = load_settings(sp)
    else:
        notes.append(f"no {DEFAULT_SETTINGS_FILE} in the working directory")
    cp = Path(config_path or DEFAULT_CONFIG_FILE)
    if config_path or cp.is_file():
        config = load_config(cp)
    else:
        notes.append(f"no {DEFAULT_CONFIG_FILE} in the working directory")
    return Sources(settings, config, tuple(notes))


__all__ = [
    "FILE_OPTIONS",
    "KEY_ENV_OPTION",
    "KNOWN_KEY_ENVS",
    "Sources",
    "known_key_env",
    "load_sources",
]
