"""HTTP/1.1 response framing, sans-I/O: bytes in, body bytes out (no clock, no awaits).

`ResponseParser` parses the status line and headers, then the body framing:
`Transfer-Encoding: chunked` (decoding only the chunk framing of what arrived),
`Content-Length`, or read-until-close. It says when the response is complete and whether the
connection may be reused. `harness.client.fasthttp` feeds it from the connection's callback.

The framing rules both transports and the pre-run check keep (`harness.client.framing`): an
interim 1xx answer is passed over, but `101 Switching Protocols` is a framing error at once (no
HTTP answer follows it); a response with both `Transfer-Encoding` and `Content-Length` is
refused (RFC 9112 section 6.3: a possible response-smuggling attempt, as aiohttp refuses it);
bytes past a response's end are counted in `extra` (they belong to no request asked for).
"""

from __future__ import annotations

from harness.client.transport import HTTPProtocolError

MAX_HEAD_BYTES = 64 * 1024  # status line + headers; servers send well under 8 KiB (h11 uses 16 KiB)
MAX_CHUNK_LINE_BYTES = 1024  # a chunk-size line: hex digits plus optional extensions


SWITCHING_PROTOCOLS = "101 Switching Protocols: the server switched away from HTTP"
BOTH_LENGTHS = "both Transfer-Encoding and Content-Length (RFC 9112 6.3: refused)"

_HEX_DIGITS = b"0123456789abcdefABCDEF"
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class ResponseParser:
    """Parse one HTTP/1.1 response. `feed(data)` returns the body bytes that `data` completed.

    After the head: `status`, `headers` (lower-case names; repeated names joined with ", "),
    `keep_alive`. `complete` turns True when the body's framing says it ended; `eof()` tells
    the parser the connection closed and returns True when that ended the body cleanly
    (read-until-close framing). Raises HTTPProtocolError for framing it cannot follow.
    """

    __slots__ = (
        "_state",
        "_buf",
        "_left",
        "status",
        "headers",
        "keep_alive",
        "head_done",
        "extra",
    )

    def __init__(self) -> None:
        self._state = _HEAD
        self._buf = b""
        self._left = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.head_done = False
        self.extra = 0  # bytes that arrived after the response's end

    @property
    def complete(self) -> bool:
        return self._state == _DONE

    def feed(self, data: bytes) -> bytes:
        state = self._state
        if state == _CHUNK_DATA and not self._buf and len(data) < self._left:
            # Fast path: a read wholly inside one chunk.
            self._left -= len(data)
            return data
        buf = self._buf + data if self._buf else data
        self._buf = b""
        if state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise HTTPProtocolError(f"response head over {MAX_HEAD_BYTES} bytes")
                self._buf = buf
                return b""
            self._parse_head(buf[:end])
            buf = buf[end + 4 :]
            if 100 <= self.status < 200:  # interim (never 101): the real head follows
                self.head_done = False
                self.headers = {}
                return self.feed(buf) if buf else b""
            state = self._state
        if state == _LENGTH:
            n = self._left
            if len(buf) >= n:
                self._state = _DONE
                self.extra += len(buf) - n
                return buf[:n]
            self._left = n - len(buf)
            return buf
        if state == _UNTIL_CLOSE:
            return buf
        if state == _DONE:
            self.extra += len(buf)
            return b""
        return self._feed_chunked(buf)

    def _feed_chunked(self, buf: bytes) -> bytes:
        out: list[bytes] = []
        pos = 0
        n = len(buf)
        state = self._state
        left = self._left
        while pos < n:
            if state == _CHUNK_DATA:
                take = n - pos if n - pos < left else left
                out.append(buf[pos : pos + take])
                pos += take
                left -= take
                if left == 0:
                    state = _CHUNK_CRLF
            elif state == _CHUNK_SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > MAX_CHUNK_LINE_BYTES:
                        raise HTTPProtocolError("chunk-size line too long")
                    break
                line = buf[pos:eol]
                semi = line.find(b";")
                if semi >= 0:
                    line = line[:semi]
                line = line.strip(b" \t")
                if not line or line.translate(None, _HEX_DIGITS):
                    raise HTTPProtocolError(f"bad chunk size {buf[pos:eol][:40]!r}")
                size = int(line, 16)
                pos = eol + 2
                if size == 0:
                    state = _TRAILER
                else:
                    state = _CHUNK_DATA
                    left = size
            elif state == _CHUNK_CRLF:
                if n - pos < 2:
                    if buf[pos:] != b"\r":
                        raise HTTPProtocolError("chunk data not followed by CRLF")
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise HTTPProtocolError("chunk data not followed by CRLF")
                pos += 2
                state = _CHUNK_SIZE
            elif state == _TRAILER:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        raise HTTPProtocolError("trailer too long")
                    break
                empty = eol == pos
                pos = eol + 2
                if empty:  # the blank line after the last chunk (and any trailers)
                    state = _DONE
                    break
            else:  # _DONE: bytes after the response belong to nobody
                break
        self._state = state
        self._left = left
        if pos < n:
            if state == _DONE:
                self.extra += n - pos
            else:
                self._buf = buf[pos:]
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        parts = status_line.split(b" ", 2)
        if (
            len(parts) < 2
            or not parts[0].startswith(b"HTTP/1.")
            or len(parts[1]) != 3
            or not parts[1].isdigit()
        ):
            raise HTTPProtocolError(f"bad status line {status_line[:80]!r}")
        self.status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise HTTPProtocolError(f"bad header line {line[:80]!r}")
            k = name.strip().lower().decode("latin-1")
            v = value.strip().decode("latin-1")
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        self.headers = headers
        self.head_done = True
        conn = headers.get("connection", "").lower()
        self.keep_alive = parts[0] != b"HTTP/1.0" and "close" not in conn
        if self.status == 101:
            raise HTTPProtocolError(SWITCHING_PROTOCOLS)
        if 100 <= self.status < 200:
            return
        te = headers.get("transfer-encoding", "").lower()
        if te and "content-length" in headers:
            raise HTTPProtocolError(BOTH_LENGTHS)
        if self.status in (204, 304):
            self._state = _DONE
        elif "chunked" in te:
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise HTTPProtocolError(
                    f"bad Content-Length {headers['content-length'][:40]!r}"
                ) from None
            if self._left < 0:
                raise HTTPProtocolError("negative Content-Length")
            self._state = _LENGTH if self._left else _DONE
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False

    def eof(self) -> bool:
        """The connection closed. True when that cleanly ended a read-until-close body."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            return True
        return self._state == _DONE


__all__ = [
    "BOTH_LENGTHS",
    "MAX_CHUNK_LINE_BYTES",
    "MAX_HEAD_BYTES",
    "SWITCHING_PROTOCOLS",
    "ResponseParser",
]
