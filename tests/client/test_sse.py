"""SSE splitting: every case whole, byte by byte, and split at every index gives the same events."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.client.sse import SSEError, SSESplitter


def events(chunks: list[bytes]) -> tuple[list[tuple[bytes, str]], bool]:
    s = SSESplitter()
    out = []
    for c in chunks:
        out += [(e.data, e.event) for e in s.feed(c)]
    return out, s.close()


CASES = [
    # (name, stream, expected events, torn at EOF)
    ("one event", b"data: hello\n\n", [(b"hello", "message")], False),
    ("two events", b"data: a\n\ndata: b\n\n", [(b"a", "message"), (b"b", "message")], False),
    ("CRLF", b"data: a\r\n\r\ndata: b\r\n\r\n", [(b"a", "message"), (b"b", "message")], False),
    ("CR only", b"data: a\r\rdata: b\r\r", [(b"a", "message"), (b"b", "message")], False),
    ("comment lines", b": ping\n\ndata: x\n: note\n\n", [(b"x", "message")], False),
    ("multi-line data joins with LF", b"data: a\ndata: b\n\n", [(b"a\nb", "message")], False),
    ("no space after colon", b"data:x\n\n", [(b"x", "message")], False),
    ("only one space removed", b"data:  x\n\n", [(b" x", "message")], False),
    ("event name", b"event: error\ndata: {}\n\n", [(b"{}", "error")], False),
    ("id and retry ignored", b"id: 1\nretry: 5\ndata: y\n\n", [(b"y", "message")], False),
    ("DONE passes through", b"data: [DONE]\n\n", [(b"[DONE]", "message")], False),
    (
        "blank lines between",
        b"\n\ndata: a\n\n\n\ndata: b\n\n",
        [(b"a", "message"), (b"b", "message")],
        False,
    ),
    ("torn final event", b"data: a\n\ndata: partial", [(b"a", "message")], True),
    (
        "U+2028 is not a line end",
        'data: {"t":"a\u2028b"}\n\n'.encode(),
        [('{"t":"a\u2028b"}'.encode(), "message")],
        False,
    ),
    ("utf-8 split inside char", "data: é😀\n\n".encode(), [("é😀".encode(), "message")], False),
]


@pytest.mark.parametrize(("name", "stream", "expected", "torn"), CASES, ids=[c[0] for c in CASES])
def test_whole_bytewise_and_every_split(name, stream, expected, torn):
    assert events([stream]) == (expected, torn)
    assert events([bytes([b]) for b in stream]) == (expected, torn)
    for i in range(len(stream) + 1):
        assert events([stream[:i], stream[i:]]) == (expected, torn), f"split at {i}"


@given(st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_random_splits_of_a_chat_stream(cuts):
    stream = (
        b"".join(b'data: {"choices":[{"delta":{"content":"w%d"}}]}\r\n\r\n' % i for i in range(12))
        + b": keepalive\n\ndata: [DONE]\n\n"
    )
    whole, _ = events([stream])
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert events(pieces)[0] == whole
    assert len(whole) == 13


def test_trailing_garbage_is_torn_not_an_event():
    evs, torn = events([b"data: a\n\n", b"garbage without end"])
    assert evs == [(b"a", "message")] and torn


def test_event_over_the_cap_raises():
    s = SSESplitter(max_pending_bytes=1000)
    s.feed(b"data: " + b"x" * 900)
    with pytest.raises(SSEError):
        s.feed(b"x" * 200)


def test_cap_applies_to_leftover_after_complete_events():
    s = SSESplitter(max_pending_bytes=100)
    with pytest.raises(SSEError):
        s.feed(b"data: a\n\n" + b"y" * 200)
