"""Server-sent events, sans-I/O: bytes in, complete events out.

Theory of operation
-------------------
`SSESplitter.feed(data)` takes whatever one socket read returned and gives back every event
completed by it; the engine stamps all of them with that read's clock reading. No awaits, no
clock, no logging here.

Line ends are CR, LF or CRLF (only those: `str.splitlines` would also split on U+2028 and
friends, which may legitimately appear inside JSON). Input is normalised to LF as it arrives; a
CR at the very end of a read may be the first half of a CRLF, so the next read's leading LF is
dropped. Events end at a blank line (LF LF). Inside an event, `:` lines are comments, `data:`
lines are joined with LF, `event:` names the event; `id:` and `retry:` are accepted and ignored
(no reconnects in a measured run). One space after the colon is removed. The fast path is the
common OpenAI shape, one `data:` line per event. `[DONE]` is OpenAI's convention and is handled
a layer up, in `harness.client.openai`.
"""

from __future__ import annotations

from dataclasses import dataclass

# An incomplete event may grow to this size before the stream is abandoned. A chat chunk is
# well under 1 KiB; even with logprobs for every token of a large top-k it stays within tens of
# KiB. 4 MiB bounds memory per stream against a server that never sends a blank line.
MAX_PENDING_BYTES = 4 * 1024 * 1024


class SSEError(Exception):
    """The stream broke the SSE format beyond repair (an event over MAX_PENDING_BYTES)."""


@dataclass(slots=True)
class SSEEvent:
    data: bytes
    event: str = "message"


class SSESplitter:
    __slots__ = ("_pending", "_drop_lf", "max_pending_bytes")

    def __init__(self, max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self._pending = b""
        self._drop_lf = False
        self.max_pending_bytes = max_pending_bytes

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Zero or more events completed by `data`. Raises SSEError past MAX_PENDING_BYTES."""
        return split_region(self.feed_region(data))

    def feed_region(self, data: bytes) -> bytes:
        """The events completed by `data` as one LF-normalised region ending in a blank line
        (b"" when none), for callers that decode a read's events at once; `split_region` turns
        it into events. Raises SSEError past MAX_PENDING_BYTES."""
        if self._drop_lf and data:
            if data[:1] == b"\n":
                data = data[1:]
            self._drop_lf = False
        if b"\r" in data:
            self._drop_lf = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._pending + data if self._pending else data
        end = buf.rfind(b"\n\n")
        if end < 0:
            if len(buf) > self.max_pending_bytes:
                self._pending = b""
                raise SSEError(
                    f"an SSE event grew past {self.max_pending_bytes} bytes without ending"
                )
            self._pending = buf
            return b""
        self._pending = buf[end + 2 :]
        if len(self._pending) > self.max_pending_bytes:
            self._pending = b""
            raise SSEError(f"an SSE event grew past {self.max_pending_bytes} bytes without ending")
        return buf[: end + 2] if end + 2 < len(buf) else buf

    def close(self) -> bool:
        """End of stream. Returns True when an incomplete event was left (a torn stream)."""
        rest = self._pending.strip(b"\n")
        self._pending = b""
        return bool(rest)


def split_region(region: bytes) -> list[SSEEvent]:
    """The events of a region from `SSESplitter.feed_region`."""
    events: list[SSEEvent] = []
    if region:
        for block in region[:-2].split(b"\n\n"):
            if block.startswith(b"data:") and b"\n" not in block:
                # Fast path: one data line.
                payload = block[5:]
                events.append(SSEEvent(payload[1:] if payload[:1] == b" " else payload))
            elif block:
                ev = _parse_block(block)
                if ev is not None:
                    events.append(ev)
    return events


def _parse_block(block: bytes) -> SSEEvent | None:
    data_lines: list[bytes] = []
    event = "message"
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data_lines.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")
        # id, retry and unknown fields are ignored, as the SSE spec says.
    if not data_lines:
        return None
    return SSEEvent(b"\n".join(data_lines), event)
