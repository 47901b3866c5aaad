"""Bounded I/O at the door of `rollmux serve`: what one connection may cost before the app sees it.

uvicorn's httptools protocol, plus: the request line and the head (request line and headers) are
measured as their bytes arrive, before the parser sees them (the parser concatenates a long header
piece by piece, a cost that grows faster than the header), so an oversized one is answered 414 or
431 and its connection closed after `max_head_bytes`, not after the whole header; a head not
complete within `header_timeout_s` of its first byte (or of the connection opening) is answered
408 and closed; a body not complete within `body_timeout_s` of its head closes the connection;
an idle keep-alive connection closes after `keep_alive_s` (uvicorn's own timer). Connections are
counted per client address and in all: one over either cap is answered 429 or 503 and closed at
once. A slow or huge request costs only its own connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("rollmux.door")


@dataclass(frozen=True)
class DoorLimits:
    """What one request and one client may cost (0 for a cap: none)."""

    max_head_bytes: int = 64 * 1024      # request line and headers together (nginx's default is 32 KiB)
    max_request_line: int = 8 * 1024     # method, target and version
    max_headers: int = 100               # header lines
    header_timeout_s: float = 10.0       # from a request's first byte (or the connection opening) to its head's end
    body_timeout_s: float = 30.0         # from the end of the head to the end of the body
    keep_alive_s: float = 5.0            # an idle keep-alive connection is closed after this
    max_conns_per_client: int = 2048     # open connections from one client address
    max_conns: int = 32768               # open connections in all


class Counts:
    """Open connections, per client address and in all (touched only on the event loop)."""

    def __init__(self) -> None:
        self.by_addr: Counter[str] = Counter()
        self.total = 0

    def admit(self, addr: str, limits: DoorLimits) -> tuple[int, str] | None:
        """Count a new connection, or the refusal (status, reason) if a cap is reached."""
        if limits.max_conns and self.total >= limits.max_conns:
            return 503, f"the server holds its maximum of {limits.max_conns} connections"
        if limits.max_conns_per_client and self.by_addr[addr] >= limits.max_conns_per_client:
            return 429, f"this address holds its maximum of {limits.max_conns_per_client} connections"
        self.by_addr[addr] += 1
        self.total += 1
        return None

    def leave(self, addr: str) -> None:
        """A counted connection closed."""
        self.total -= 1
        self.by_addr[addr] -= 1
        if self.by_addr[addr] <= 0:
            del self.by_addr[addr]


def _reply(status: int, phrase: str, text: str) -> bytes:
    body = (text + "\n").encode()
    return (f"HTTP/1.1 {status} {phrase}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


PHRASES = {408: "Request Timeout", 414: "URI Too Long", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 503: "Service Unavailable"}


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the door's limits (`protocol_for` binds them)."""

    limits: DoorLimits = DoorLimits()
    counts: Counts = Counts()

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        """Count the connection (or refuse it) and start the clock on its first head."""
        super().connection_made(transport)
        self._addr = self.client[0] if self.client else "?"
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._next_head()
        refusal = self.counts.admit(self._addr, self.limits)
        self._counted = refusal is None
        if refusal is not None:
            self._refuse(*refusal)
            return
        self._arm(self.limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        """Uncount the connection and stop its clock."""
        self._closed = True
        self._disarm()
        if self._counted:
            self._counted = False
            self.counts.leave(self._addr)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Measure the head before the parser sees it; refuse an oversized one."""
        if self._closed:
            return
        if self._in_head:
            if self._head == 0 and self._timer is None:  # a kept-alive connection's next request
                self._arm(self.limits.header_timeout_s, self._head_timed_out)
            refusal = self._measure(data)
            if refusal is not None:
                self._refuse(*refusal)
                return
        super().data_received(data)

    def _next_head(self) -> None:
        self._in_head, self._head, self._lines, self._line_done, self._tail = True, 0, 0, False, b""

    def _measure(self, data: bytes) -> tuple[int, str] | None:
        """Count this chunk's part of the head; the refusal once a limit is passed."""
        lim = self.limits
        buf = self._tail + data
        end = buf.find(b"\r\n\r\n")
        part = end + 4 - len(self._tail) if end >= 0 else len(data)
        if not self._line_done:
            nl = data.find(b"\n", 0, part)
            if nl >= 0:
                self._line_done = True
            if (self._head + (nl if nl >= 0 else part)) > lim.max_request_line:
                return 414, f"request line over {lim.max_request_line} bytes"
        self._head += part
        self._lines += data.count(b"\n", 0, part)
        if self._head > lim.max_head_bytes:
            return 431, f"request head over {lim.max_head_bytes} bytes"
        if self._lines > lim.max_headers + 2:  # the request line and the empty line end it too
            return 431, f"more than {lim.max_headers} header lines"
        self._tail = buf[-3:]
        if end >= 0:
            self._in_head = False  # the parser's callbacks take it from here
        return None

    def on_headers_complete(self) -> None:
        """The head is in: its clock stops, the body's starts."""
        self._in_head = False
        self._arm(self.limits.body_timeout_s, self._body_timed_out)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The body is in: no clock until the next request's first byte."""
        self._disarm()
        self._next_head()
        super().on_message_complete()

    def _arm(self, after_s: float, then: Any) -> None:
        self._disarm()
        if after_s and after_s > 0:
            self._timer = self.loop.call_later(after_s, then)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        if self._closed:
            return
        if self._head == 0:  # nothing asked: an idle connection, closed without a word
            self._close()
        else:
            self._refuse(408, f"request head not complete within {self.limits.header_timeout_s:g}s")

    def _body_timed_out(self) -> None:
        self._timer = None
        if not self._closed:  # the app may be reading the body: it sees a disconnect
            log.info("%s: request body not complete within %gs: connection closed",
                     self._addr, self.limits.body_timeout_s)
            self._close()

    def _refuse(self, status: int, reason: str) -> None:
        """Answer `status` and close: this connection, and only it, pays."""
        log.info("%s: %d %s: connection closed", self._addr, status, reason)
        if not self._closed and not self.transport.is_closing():
            self.transport.write(_reply(status, PHRASES[status], reason))
        self._close()

    def _close(self) -> None:
        self._closed = True
        self._disarm()
        self.transport.close()


def protocol_for(limits: DoorLimits) -> type[GuardedHttp]:
    """A protocol class bound to `limits` and to a connection count of its own (one per server)."""
    return type("DoorHttp", (GuardedHttp,), {"limits": limits, "counts": Counts()})


def uvicorn_options(limits: DoorLimits) -> dict[str, Any]:
    """The uvicorn.Config arguments that put the door in front of the app."""
    return {"http": protocol_for(limits), "timeout_keep_alive": limits.keep_alive_s, "limit_concurrency": None}
