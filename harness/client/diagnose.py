"""Causes and fixes of a failure to talk to a target, in one place: `diagnose_status` for an
HTTP error status, `diagnose_exception` for an exception. `check` prints them per step; the
run's pre-flight probe (harness.client.probe) says the same when it cannot reach the target."""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
import orjson

from harness.client.openai import server_text
from harness.client.transport import redirect_target
from harness.config.target import Target


def _key_note(target: Target) -> str:
    if not target.api_key:
        return "no key was sent"
    return f"sent {target.api_key.masked()} from {target.key_source or 'the command line'}"


def diagnose_status(
    status: int, body: bytes, headers: Any, target: Target, path: str
) -> tuple[str, str]:
    """(cause, fix) for an HTTP error status."""
    msg = _message(body)
    if 300 <= status < 400:
        location = headers.get("Location") if headers is not None else None
        return (
            f"the server redirects{redirect_target(location)} (HTTP {status}), and the "
            "harness follows no redirect: it would carry the key and settings.json's headers "
            "to another address",
            "point base_url at the final address",
        )
    if status == 401:
        return (
            f"the key is missing, wrong, or has stray whitespace ({_key_note(target)}); "
            f"server says: {msg}",
            "export the key in the variable named by api_key_env (no quotes, spaces or newline), "
            "or put it in settings.json",
        )
    if status == 403:
        return (
            f"the key is valid but not allowed here ({_key_note(target)}); server says: {msg}",
            "check the key's permissions or the model's access on the provider",
        )
    if status == 404:
        if "model" in msg.lower():
            return (
                f"the model name is not served: {msg}",
                "set the model to one that GET /v1/models lists (--model, defaults.model, [inference] model)",
            )
        return (
            f"nothing at {target.url(path)}: the base URL's path is wrong; server says: {msg}",
            "fix base_url: it is the part before /v1 (e.g. http://host:8000 or https://taotoken.net/api)",
        )
    if status == 429:
        ra = headers.get("Retry-After") if headers is not None else None
        return (
            f"rate limited{f' (Retry-After: {ra} s)' if ra else ''}; server says: {msg}",
            "wait and retry, lower the request rate, or ask the provider for a higher limit",
        )
    if status in (400, 422):
        return (
            f"the server rejected the request: {msg}",
            "check the model's context length and max_tokens, and the endpoint (chat vs completions)",
        )
    if status >= 500:
        return (
            f"the server failed (HTTP {status}): {msg}",
            "look at the server's log; retry later",
        )
    return (f"HTTP {status}: {msg}", "see the server's message")


def diagnose_exception(
    exc: BaseException, target: Target, read_timeout_s: float, phase: str
) -> tuple[str, str, str]:
    """(detail, cause, fix) for an exception raised while talking to the target."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
        return (
            "TLS certificate not trusted",
            f"{exc}",
            "fix the server's certificate, or pass --insecure for a self-signed test server",
        )
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return ("host name does not resolve", f"{exc}", "check the host in base_url")
    if isinstance(exc, aiohttp.ClientConnectorError):
        refused = isinstance(exc.os_error, ConnectionRefusedError)
        return (
            ("connection refused" if refused else "cannot connect"),
            f"the server is not up or listens on another port ({target.base_url}): {exc.os_error}",
            "start the server (python -m harness serve) or fix the port in base_url",
        )
    if isinstance(exc, TimeoutError):
        if phase == "connect" or isinstance(exc, aiohttp.ConnectionTimeoutError):
            return (
                "connect timeout",
                f"no TCP connection within {target.timeouts.connect_s:g}s: host "
                "unreachable or filtered",
                "check the host and any firewall or proxy",
            )
        return (
            "read timeout",
            f"no answer within {read_timeout_s:g}s",
            "raise [timeout] read in config.toml (or provider.timeout_seconds) for long prompts, "
            "or check that the server is not stuck",
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return (
            "connection cut",
            f"the server closed the connection mid-answer: {exc}",
            "look at the server's log (crash, proxy idle timeout)",
        )
    return (type(exc).__name__, str(exc) or type(exc).__name__, "see the error above")


def _message(body: bytes) -> str:
    """What the server said, as `server_text` keeps it (first line, 200 characters)."""
    try:
        d = orjson.loads(body)
    except orjson.JSONDecodeError:
        return server_text(body[:4096].decode("utf-8", "replace")) or "(empty body)"
    if isinstance(d, dict):
        err = d.get("error", d)
        if isinstance(err, dict):
            return server_text(err.get("message") or err.get("detail") or err)
        return server_text(d.get("message") or d.get("detail") or err)
    return server_text(d)


__all__ = ["diagnose_exception", "diagnose_status"]
