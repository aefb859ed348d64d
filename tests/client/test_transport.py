"""The transport seam: one exception mapping for both transports, shared details."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import aiohttp
import pytest

from harness.client.fasthttp import ConnectFailed
from harness.client.openai import StreamError
from harness.client.sse import SSEError
from harness.client.transport import (
    HTTPProtocolError,
    classify_exception,
    stream_cut_detail,
    timeout_details,
)
from harness.record.records import ErrorKind

CONN_KEY = SimpleNamespace(
    host="127.0.0.1",
    port=1,
    is_ssl=False,
    ssl=True,
    proxy=None,
    proxy_auth=None,
    proxy_headers_hash=None,
)
REQUEST_INFO = SimpleNamespace(real_url="http://127.0.0.1:1/v1/chat/completions", method="POST")


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance of any aiohttp exception class, whatever its constructor wants."""
    obj = cls.__new__(cls)
    BaseException.__init__(obj, CONN_KEY, OSError(111, "refused"))
    for attr, value in (
        ("status", 0),
        ("message", "x"),
        ("headers", None),
        ("request_info", REQUEST_INFO),
        ("history", ()),
        ("_os_error", OSError(111, "refused")),
        ("_conn_key", CONN_KEY),
        ("_certificate_error", ValueError("cert")),
        ("_url", "http://x"),
        ("_description", None),
    ):
        try:
            object.__setattr__(obj, attr, value)
        except (AttributeError, TypeError):
            pass
    return obj


# Every exception class aiohttp exports, but its websocket ones: the harness opens no websocket.
AIOHTTP_EXCEPTIONS = sorted(
    (
        c
        for _, c in inspect.getmembers(aiohttp, inspect.isclass)
        if issubclass(c, Exception)
        and c.__module__.startswith("aiohttp")
        and not issubclass(c, Warning)
        and not c.__name__.startswith(("WS", "WebSocket"))
        and c.__name__ != "EofStream"
    ),
    key=lambda c: c.__name__,
)


@pytest.mark.parametrize("cls", AIOHTTP_EXCEPTIONS, ids=lambda c: c.__name__)
def test_every_aiohttp_exception_is_mapped(cls):
    kind, detail = classify_exception(_instance(cls))
    assert isinstance(kind, ErrorKind) and kind is not ErrorKind.INTERNAL and detail


@pytest.mark.parametrize(
    ("exc", "kind", "detail"),
    [
        (
            StreamError(ErrorKind.MALFORMED, "bad json"),
            ErrorKind.MALFORMED,
            "bad json",
        ),  # carries its kind
        (
            ConnectFailed(ErrorKind.TIMEOUT_CONNECT, "no connection"),
            ErrorKind.TIMEOUT_CONNECT,
            "no connection",
        ),
        (SSEError("event over 1 MiB"), ErrorKind.BODY_TOO_LARGE, "event over 1 MiB"),
        (HTTPProtocolError("bad chunk size"), ErrorKind.MALFORMED, "HTTP framing: bad chunk size"),
        (ValueError("nope"), ErrorKind.MALFORMED, "ValueError: nope"),
        (ConnectionResetError("reset"), ErrorKind.STREAM_CUT, "ConnectionResetError: reset"),
        (aiohttp.ServerDisconnectedError(), ErrorKind.STREAM_CUT, None),
    ],
)
def test_our_own_and_plain_exceptions(exc, kind, detail):
    got_kind, got_detail = classify_exception(exc)
    assert got_kind is kind
    if detail is not None:
        assert got_detail == detail


def test_an_unmapped_exception_is_our_bug_and_still_a_record():
    # not a server's doing: recorded as INTERNAL with the exception named, never raised
    kind, detail = classify_exception(KeyError("k"))
    assert kind is ErrorKind.INTERNAL
    assert detail == "harness error KeyError: 'k'"


def test_shared_details():
    assert stream_cut_detail(False) == "the stream ended before data: [DONE]"
    assert stream_cut_detail(True) == "the stream ended before data: [DONE] (mid-event)"
    assert timeout_details(0.5, 2, 600) == (
        "no token within 0.5s",
        "no token for 2s",
        "request exceeded 600s",
    )
